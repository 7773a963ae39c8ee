package sharding_test

import (
	"context"
	"github.com/shoal-dev/shoal/cluster"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shoal-dev/shoal/sharding"
	"github.com/shoal-dev/shoal/sharding/internal/protocol"
)

// A region asks for shard homes only once the coordinator has its
// registration, so a message sent the moment a node starts is not placed
// as if that node did not exist.
func TestRegionAsksForHomesOnlyOnceRegistered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, sharding.Settings{ShardID: func(id string) string { return id[:1] }})
		a := s.join("a", "host")
		a.tell(t, "x1", note{Text: "1"}) // a hosts one shard
		synctest.Wait()
		b := s.join("b", "host")
		b.tell(t, "y1", note{Text: "1"}) // at once: b's registration is still on its way
		synctest.Wait()
		if home := sharding.HomesOf(b.region)["y"]; home != addr("b") {
			t.Fatalf("shard y placed on %q, want b (the region with fewer shards)", home)
		}
		_ = b.sh.Shutdown(context.Background())
		_ = a.sh.Shutdown(context.Background())
	})
}

// A region ignores what a deposed coordinator (an older fencing epoch)
// tells it, so a coordinator that lost its lease cannot move shards.
func TestRegionIgnoresACoordinatorWithAStaleEpoch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, sharding.Settings{})
		// A predecessor held epoch 1 and released it; the coordinator a
		// starts gets epoch 2.
		if _, _, err := s.store.Acquire(context.Background(), "Test", addr("old"), time.Minute); err != nil {
			t.Fatal(err)
		}
		if err := s.store.Release(context.Background(), "Test", 1); err != nil {
			t.Fatal(err)
		}
		a := s.join("a", "host")
		a.tell(t, "e", note{Text: "1"})
		synctest.Wait()
		shard := a.region.ShardID("e")
		to := sharding.Address{Node: addr("a"), Type: "Test"}
		for _, m := range []sharding.Message{
			protocol.ShardHome{Shard: shard, Region: addr("elsewhere"), Epoch: 1},
			protocol.ShardHome{Shard: "x", Region: addr("elsewhere"), Epoch: 1},
			protocol.ShardHomes{Homes: map[cluster.UniqueAddress][]string{addr("elsewhere"): {"y"}}, Epoch: 1},
			protocol.HostShard{Shard: "z", Epoch: 1},
			protocol.BeginHandOff{Shard: shard, Epoch: 1},
		} {
			if err := s.send(to, m); err != nil {
				t.Fatal(err)
			}
		}
		synctest.Wait()
		if got := sharding.HomesOf(a.region); len(got) != 1 || got[shard] != addr("a") {
			t.Fatalf("homes %v after stale messages, want only %s on a", got, shard)
		}
		a.tell(t, "e", note{Text: "2"}) // still routed: no hand-off began
		if got := a.ask(t, "e"); len(got) != 2 {
			t.Fatalf("e got %v", got)
		}
		// The current epoch is obeyed.
		if err := s.send(to, protocol.ShardHome{Shard: "x", Region: addr("elsewhere"), Epoch: 2}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if sharding.HomesOf(a.region)["x"] != addr("elsewhere") {
			t.Fatalf("homes %v: current epoch ignored", sharding.HomesOf(a.region))
		}
		a.sh.Terminate()
	})
}
