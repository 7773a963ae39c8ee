package sharding

import (
	"github.com/shoal-dev/shoal/cluster"
	"slices"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/sharding/allocation"
	"github.com/shoal-dev/shoal/sharding/internal/protocol"
)

func TestRegionCoreShardStatesShowHomesHandOffsAndWaitingShards(t *testing.T) {
	c := newRegionCore[string, string](regionCoreConfig{self: addr("b"), bufferSize: 100, tickInterval: time.Second})
	c.membership(addr("a"), addrs("a", "b"))
	c.step(protocol.RegisterAck{Coordinator: addr("a"), Epoch: 3})
	c.step(protocol.ShardHomes{Homes: map[cluster.UniqueAddress][]string{addr("a"): {"10", "2"}}, Epoch: 3})
	c.step(protocol.BeginHandOff{Shard: "10", Epoch: 3})
	c.route("x", pending[string]{entityID: "e", msg: "m"}) // no home yet: held
	want := []ShardState{
		{ID: "2", Home: addr("a"), Entities: -1},
		{ID: "10", Home: addr("a"), HandingOff: true, Entities: -1},
		{ID: "x", Entities: -1},
	}
	if got := c.shardStates(); !slices.Equal(got, want) {
		t.Fatalf("shardStates\n got %+v\nwant %+v", got, want)
	}
	if c.coordinator != addr("a") || c.epoch != 3 {
		t.Fatalf("coordinator %q epoch %d", c.coordinator, c.epoch)
	}
}

func TestCoordinatorRebalanceShardsMovesAShardWhereTheStrategyPlacesIt(t *testing.T) {
	c := newTestCore(1)
	c.step(protocol.Register{Region: addr("a")})
	c.step(protocol.GetShardHome{Shard: "s1", Region: addr("a")})
	c.step(protocol.GetShardHome{Shard: "s2", Region: addr("a")})
	c.step(protocol.Register{Region: addr("b")})
	_, out := c.step(protocol.RebalanceShards{Shards: []string{"s1", "unknown"}})
	if got := sent(out); !slices.Equal(got, []string{"a: BeginHandOff s1", "b: BeginHandOff s1"}) {
		t.Fatalf("sent %v", got)
	}
	c.step(ackOf(c, protocol.BeginHandOffAck{Shard: "s1", Region: addr("a")}))
	c.step(ackOf(c, protocol.BeginHandOffAck{Shard: "s1", Region: addr("b")}))
	changes, out := c.step(stoppedOf(c, protocol.ShardStopped{Shard: "s1", Region: addr("a")}))
	// Not stopped like StopShards: placed again at once, on b, which has fewer shards.
	if !slices.Equal(changes, []change{{shard: "s1"}, {shard: "s1", region: addr("b")}}) {
		t.Fatalf("changes %v", changes)
	}
	if got := sent(out); len(got) == 0 || got[0] != "b: HostShard s1" {
		t.Fatalf("sent %v", got)
	}
}

func TestCompareShardIDsPutsNumbersInNumericOrderFirst(t *testing.T) {
	ids := []string{"b", "10", "a", "9", "100", "09"}
	slices.SortFunc(ids, compareShardIDs)
	if want := []string{"09", "9", "10", "100", "a", "b"}; !slices.Equal(ids, want) {
		t.Fatalf("sorted %v, want %v", ids, want)
	}
}

// The rebalance metric counts what the strategy moved, not the deferred
// hand-offs (requests, leaves) that a rebalance round happens to start: an
// operator's request counts once, when it is made.
func TestCoordinatorCountsOnlyTheStrategysRebalances(t *testing.T) {
	c := newCoordinatorCore(addr("a"), 7, homed(map[string]string{"s1": "a", "s2": "b"}), allocation.NewLeastShard(allocation.DefaultLeastShardConfig()), 1)
	// x, without the type's role, never registers: hand-offs wait for it,
	// then go ahead after a few rounds.
	c.role = "r"
	c.step(membersChanged{members: []cluster.Member{{Address: addr("a"), Roles: []string{"r"}}, {Address: addr("b"), Roles: []string{"r"}}, {Address: addr("x")}}})
	c.step(protocol.Register{Region: addr("a")})
	c.step(protocol.Register{Region: addr("b")})
	if _, out := c.step(protocol.RebalanceShards{Shards: []string{"s1"}}); len(out) != 0 {
		t.Fatalf("handed off before every region registered: %v", sent(out))
	}
	if c.rebalanced != 1 {
		t.Fatalf("the operator's request counted %d rebalanced, want 1", c.rebalanced)
	}
	began := false
	for round := 0; round < 10 && !began; round++ {
		_, out := c.step(rebalanceTick{})
		began = slices.Contains(sent(out), "a: BeginHandOff s1")
		if c.rebalanced != 0 {
			t.Fatalf("round %d: %d counted as rebalanced; the strategy moved nothing (sent %v)", round, c.rebalanced, sent(out))
		}
	}
	if !began {
		t.Fatal("the requested hand-off never began")
	}
}
