package node_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/internal/logtest"
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

// With the entity types registered before the join (Config.RegisterEntities),
// no node warns of mail for a region it does not run, on start or leave.
func TestEntityTypesRegisteredBeforeTheJoinGetTheirMail(t *testing.T) {
	stores := node.NewMemoryStores()
	logs := &logtest.Recorder{}
	start := func(id string, seeds []string) *testNode {
		t.Helper()
		cfg := node.DefaultConfig(id)
		cfg.Memory, cfg.Seeds, cfg.Timing, cfg.Codec = stores, seeds, testTiming(), newCodec()
		cfg.Leases = testLeases()
		cfg.Logger = slog.New(logs)
		var ops *sharding.Region[Command]
		cfg.RegisterEntities = func(n *node.Node) (err error) {
			ops, err = sharding.Init(n.Sharding(), sharding.Entity[Command]{Key: opsKey, Create: newOps(id), StopMessage: Stop{},
				Settings: sharding.Settings{NumberOfShards: 10}})
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		n, err := node.Start(ctx, cfg)
		if err != nil {
			t.Fatalf("start %s: %v", id, err)
		}
		t.Cleanup(n.Kill)
		if found, err := sharding.Lookup(n.Sharding(), opsKey); err != nil || found != ops {
			t.Fatalf("Lookup = %p, %v; want the region RegisterEntities made", found, err)
		}
		return &testNode{Node: n, ops: ops}
	}
	a := start("early-a", nil)
	b := start("early-b", []string{a.GossipAddr()})
	c := start("early-c", []string{a.GossipAddr()})
	awaitUp(t, []*testNode{a, b, c})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, id := range []string{"e-0", "e-1", "e-2", "e-3"} {
		if err := apply(ctx, c.ops, id, "op"); err != nil {
			t.Fatalf("apply %s: %v", id, err)
		}
	}
	for _, n := range []*testNode{c, b, a} {
		if err := n.Shutdown(ctx); err != nil {
			t.Fatalf("%s leaves: %v", n.Self(), err)
		}
	}
	if w := logs.Containing("no listener for target"); len(w) > 0 {
		t.Fatalf("warned of mail for missing regions:\n%s", strings.Join(w, "\n"))
	}
}
