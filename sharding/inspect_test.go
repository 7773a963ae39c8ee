package sharding_test

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shoal-dev/shoal/cluster/inproc"
	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/sharding"
)

func TestTypeStateReportsHomesCountsAndCoordinatorAndRebalanceMovesTheShard(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, sharding.Settings{NumberOfShards: 4, RebalanceInterval: time.Hour})
		a := s.join("a", "host")
		ids := entityIDs(20)
		for _, id := range ids {
			a.tell(t, id, note{Text: "x"})
		}
		synctest.Wait()
		b := s.join("b", "host")
		synctest.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()

		if got := b.sh.Types(); !slices.Equal(got, []string{key.Name()}) {
			t.Fatalf("Types %v", got)
		}
		st, err := b.sh.TypeState(ctx, key.Name())
		if err != nil {
			t.Fatal(err)
		}
		if st.Coordinator != addr("a") || st.Epoch == 0 || !slices.Equal(st.Regions, addrs("a", "b")) || len(st.Unanswered) != 0 {
			t.Fatalf("state %+v", st)
		}
		total := 0
		for _, sh := range st.Shards {
			if sh.Home != addr("a") || sh.HandingOff {
				t.Fatalf("shard %+v, want every shard active on a", sh)
			}
			total += sh.Entities
		}
		if len(st.Shards) != 4 || total != len(ids) {
			t.Fatalf("%d shards, %d entities: %+v", len(st.Shards), total, st.Shards)
		}
		if !slices.IsSortedFunc(st.Shards, func(x, y sharding.ShardState) int { return sharding.CompareShardIDs(x.ID, y.ID) }) {
			t.Fatalf("shards not sorted: %+v", st.Shards)
		}

		moved := st.Shards[0].ID
		if err := b.sh.RebalanceShard(key.Name(), moved); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		st, err = b.sh.TypeState(ctx, key.Name())
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(st.Shards, func(sh sharding.ShardState) bool { return sh.ID == moved })
		if i < 0 || st.Shards[i].Home != addr("b") || st.Shards[i].HandingOff {
			t.Fatalf("shard %s after the rebalance: %+v", moved, st.Shards)
		}
		b.sh.Terminate()
		a.sh.Terminate()
	})
}

func TestInspectRefusesUnknownTypesAndShards(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, sharding.Settings{NumberOfShards: 4})
		a := s.join("a", "host")
		synctest.Wait()
		if _, err := a.sh.TypeState(context.Background(), "nope"); !errors.Is(err, sharding.ErrUnknownEntityType) {
			t.Fatalf("TypeState of an unknown type: %v", err)
		}
		if err := a.sh.RebalanceShard("nope", "1"); !errors.Is(err, sharding.ErrUnknownEntityType) {
			t.Fatalf("RebalanceShard of an unknown type: %v", err)
		}
		if err := a.sh.RebalanceShard(key.Name(), "1"); !errors.Is(err, sharding.ErrUnknownShard) {
			t.Fatalf("RebalanceShard of a shard without a home: %v", err)
		}
		a.sh.Terminate()
	})
}

// RequestLeave reaches the node's OnLeaveRequest over the network; a node
// that runs none drops the request (and counts it), and a node whose
// transport is gone cannot be reached.
func TestRequestLeaveRunsTheTargetsOnLeaveRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, sharding.Settings{})
		var asked atomic.Int32
		start := func(name string, onLeave func()) (*sharding.Sharding, *inproc.Transport) {
			sys, err := entity.NewSystem(entity.Config{NodeID: name, Incarnation: simIncarnation, Logger: quiet()})
			if err != nil {
				t.Fatal(err)
			}
			return s.start(sys, sharding.Config{Membership: s.cluster.Join(name), OnLeaveRequest: onLeave, Logger: quiet()})
		}
		a, _ := start("a", nil)
		b, bt := start("b", func() { asked.Add(1) })
		if err := a.RequestLeave(addr("b")); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if asked.Load() != 1 {
			t.Fatalf("OnLeaveRequest ran %d times", asked.Load())
		}
		// a does not listen for leave requests: it drops b's.
		if err := b.RequestLeave(addr("a")); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if st := a.TransportStats(); st.UnknownTarget != 1 || st.Delivered != 0 {
			t.Fatalf("a's transport stats %+v, want the request dropped as for no listener", st)
		}
		b.Terminate()
		_ = bt.Close(context.Background())
		if err := a.RequestLeave(addr("b")); !errors.Is(err, sharding.ErrUnreachable) {
			t.Fatalf("RequestLeave to a node whose transport closed: %v", err)
		}
		if asked.Load() != 1 {
			t.Fatalf("OnLeaveRequest ran %d times", asked.Load())
		}
		a.Terminate()
	})
}
