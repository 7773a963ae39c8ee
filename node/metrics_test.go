package node_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/shoal-dev/shoal/internal/metrics/metricstest"
	"github.com/shoal-dev/shoal/node"
)

// Config.Metrics reaches every layer of the node, each series labelled
// with its node: two nodes share one registry without colliding.
func TestMetricsWiredThroughTheNode(t *testing.T) {
	dsn := pg.MigratedDSN(t)
	reg := prometheus.NewRegistry()
	withMetrics := func(c *node.Config) { c.Metrics = reg }
	n1 := startNode(t, dsn, "node-1", nil, withMetrics)
	n2 := startNode(t, dsn, "node-2", []string{n1.GossipAddr()}, withMetrics)
	awaitUp(t, []*testNode{n1, n2})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const ids = 20
	for i := range ids {
		if err := apply(ctx, n2.ops, fmt.Sprint("m", i), "op"); err != nil {
			t.Fatal(err)
		}
	}
	sum := func(name string, labels map[string]string) float64 { // over both nodes
		return metricstest.Value(t, reg, name, labels)
	}
	if got := sum("shoal_entity_messages_delivered_total", map[string]string{"type": "Ops"}); got < ids {
		t.Errorf("%v commands delivered to Ops entities, want at least %d", got, ids)
	}
	if got := sum("shoal_journal_persist_duration_seconds", nil); got < ids {
		t.Errorf("%v persists observed, want at least %d", got, ids)
	}
	if got := sum("shoal_entity_ask_duration_seconds", map[string]string{"type": "Ops"}); got != ids {
		t.Errorf("%v asks observed, want %d", got, ids)
	}
	// 30 shards over two nodes: some of the asks via node-2 crossed to node-1.
	if got := metricstest.Value(t, reg, "shoal_transport_sent_frames_total", map[string]string{"node": "node-2", "peer": "node-1"}); got == 0 {
		t.Error("node-2 sent no frame to node-1")
	}
	// Every shard of both nodes, each series labelled with its node.
	if got := sum("shoal_sharding_active_entities", map[string]string{"type": "Ops"}); got != ids {
		t.Errorf("%v active Ops entities over both nodes, want %d", got, ids)
	}
}
