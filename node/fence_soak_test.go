package node_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/internal/metrics/metricstest"
	"github.com/shoal-dev/shoal/node"
)

// TestNoFalseFence runs one node with the default leases for
// SHOAL_FALSE_FENCE_SECONDS (default 20) under journal traffic (four
// goroutines persisting one event after another) and fails if the node
// fenced itself: a healthy node must keep its lease. It is a soak, not a
// unit test: it runs only when SHOAL_FALSE_FENCE_SECONDS is set, and
// scripts/false-fence.sh runs it N times beside a busy loop on every core
// and counts the fences. It logs the renewals by outcome and the slowest
// renewal's bucket.
func TestNoFalseFence(t *testing.T) {
	secs, err := strconv.Atoi(os.Getenv("SHOAL_FALSE_FENCE_SECONDS"))
	if err != nil || secs <= 0 {
		t.Skip("a soak: set SHOAL_FALSE_FENCE_SECONDS (scripts/false-fence.sh)")
	}
	reg := prometheus.NewRegistry()
	n := startNode(t, pg.MigratedDSN(t), "soak", nil, func(c *node.Config) {
		c.Metrics = reg
		c.Leases = node.DefaultConfig("soak").Leases
	})
	awaitUp(t, []*testNode{n})
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(secs)*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var persisted, failed [4]int
	for w := range 4 {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil && n.Alive() == nil; i++ {
				actx, acancel := context.WithTimeout(ctx, 5*time.Second)
				_, err := entity.Ask(actx, n.ops.EntityRefFor(fmt.Sprint("soak-", w, "-", i%50)), func(to entity.ReplyTo[int]) Command {
					return Apply{Op: "x", ReplyTo: to}
				})
				acancel()
				if err == nil {
					persisted[w]++
				} else if ctx.Err() == nil {
					failed[w]++
				}
			}
		})
	}
	wg.Wait()
	renewals := func(result string) float64 {
		return metricstest.Value(t, reg, "shoal_lease_renewals_total", map[string]string{"node": "soak", "lease": "node", "result": result})
	}
	labels := map[string]string{"node": "soak", "lease": "node"}
	count, sum := metricstest.Value(t, reg, "shoal_lease_renewal_duration_seconds", labels), metricstest.HistogramSum(t, reg, "shoal_lease_renewal_duration_seconds", labels)
	total, fails := 0, 0
	for w := range 4 {
		total, fails = total+persisted[w], fails+failed[w]
	}
	t.Logf("%d s: %d events persisted (%d asks failed); node lease renewals ok %v, failed %v, refused %v; mean renewal %.1f ms",
		secs, total, fails, renewals("ok"), renewals("failed"), renewals("refused"), 1000*sum/max(count, 1))
	if err := n.Alive(); err != nil {
		t.Fatalf("FALSE FENCE: a healthy node fenced itself: %v", err)
	}
}
