package node_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/node"
	"github.com/shoal-dev/shoal/sharding"
)

// Memory mode needs no database: two nodes of one process share their
// MemoryStores, gossip and talk over loopback, and serve an event-sourced
// entity wherever its shard lives; its events survive a node's leave.
func TestMemoryModeServesAShardedEventSourcedEntity(t *testing.T) {
	stores := node.NewMemoryStores()
	memory := func(c *node.Config) { c.Memory = stores }
	settings := sharding.Settings{NumberOfShards: 10}
	a := startNodeWith(t, "", "mem-a", nil, settings, memory)
	b := startNodeWith(t, "", "mem-b", []string{a.GossipAddr()}, settings, memory)
	awaitUp(t, []*testNode{a, b})
	if a.Pool() != nil {
		t.Fatalf("a memory-mode node has a database pool")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ids := []string{"m-0", "m-1", "m-2", "m-3", "m-4", "m-5"}
	for i, id := range ids {
		via := []*testNode{a, b}[i%2]
		if err := apply(ctx, via.ops, id, "op-"+id); err != nil {
			t.Fatalf("apply %s via %s: %v", id, via.Self(), err)
		}
	}
	// The other node reads each; then b leaves and a serves them all from
	// the shared journal.
	for i, id := range ids {
		via := []*testNode{b, a}[i%2]
		if s, err := read(ctx, via.ops, id); err != nil || !slices.Equal(s.Ops, []string{"op-" + id}) {
			t.Fatalf("read %s via %s: %+v, %v", id, via.Self(), s, err)
		}
	}
	if err := b.Shutdown(ctx); err != nil {
		t.Fatalf("b leaves: %v", err)
	}
	for _, id := range ids {
		s, err := read(ctx, a.ops, id)
		if err != nil || !slices.Equal(s.Ops, []string{"op-" + id}) || s.Node != "mem-a" {
			t.Fatalf("read %s after b left: %+v, %v", id, s, err)
		}
	}
}

func TestMemoryModeRefusesADatabaseToo(t *testing.T) {
	cfg := node.DefaultConfig("mem-x")
	cfg.Memory, cfg.PostgresDSN = node.NewMemoryStores(), "postgres://nowhere"
	if _, err := node.Start(context.Background(), cfg); !errors.Is(err, node.ErrInvalidConfig) {
		t.Fatalf("Start = %v, want ErrInvalidConfig", err)
	}
}
