package sharding

import (
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/entity"
)

// A slot keeps the first route of an epoch against colliding entities,
// and takes any entity's route of a later epoch.
func TestRouteCacheKeepsAnEpochsFirstRoute(t *testing.T) {
	var c routeCache
	var stripe sync.RWMutex
	b, d := cluster.UniqueAddress{Node: "b", Incarnation: 1}, cluster.UniqueAddress{Node: "d", Incarnation: 1}
	const h = 7
	c.store("x", h, "s1", &stripe, b, 1)
	if rt := c.load("x", h); rt == nil || rt.home != b || rt.shardID != "s1" || rt.epoch != 1 {
		t.Fatalf("load x = %+v, want its route to b in epoch 1", rt)
	}
	if rt := c.load("y", h); rt != nil {
		t.Fatalf("load y, of x's hash, = %+v, want none", rt)
	}
	c.store("y", h+routeSlots, "s2", &stripe, d, 1) // the same slot, the same epoch
	if c.load("y", h+routeSlots) != nil || c.load("x", h) == nil {
		t.Fatal("y took x's slot within x's epoch")
	}
	c.store("y", h+routeSlots, "s2", &stripe, d, 2)
	if rt := c.load("y", h+routeSlots); rt == nil || rt.home != d || c.load("x", h) != nil {
		t.Fatalf("after y's route of epoch 2: y %+v, x %+v", rt, c.load("x", h))
	}
}

// Once a region forwarded to an entity on another node under its read
// lock, the entity's next messages go the same way without a shard id
// computed, until a write lock starts a new epoch: the next message takes
// the locked path again (and remembers the route anew).
func TestRemoteRoutesLastOneEpoch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var got atomic.Int32
		var shardIDs atomic.Int32
		settings := Settings{ShardID: func(string) string { shardIDs.Add(1); return "s" }}
		_, ra := proxyPair(t, settings, func(entity.Context[string]) entity.Behavior[string] {
			return entity.Receive(func(entity.Context[string], string) entity.Behavior[string] {
				got.Add(1)
				return entity.Same[string]()
			})
		})
		ref := ra.EntityRefFor("e")
		tell := func(n int) int32 {
			t.Helper()
			before := shardIDs.Load()
			for range n {
				if err := ref.Tell("x"); err != nil {
					t.Fatal(err)
				}
			}
			synctest.Wait()
			return shardIDs.Load() - before
		}
		tell(1) // waits for the shard's home
		if n := tell(1); n != 1 {
			t.Fatalf("the first tell with the home known computed the shard id %d times, want once", n)
		}
		if n := tell(10); n != 0 {
			t.Fatalf("%d of 10 tells computed the shard id, want none", n)
		}
		ra.step(func(*regionCore[string, *shard[string]]) {}) // a write lock: a new epoch
		if n := tell(10); n != 1 {
			t.Fatalf("%d of 10 tells after a write lock computed the shard id, want the first alone", n)
		}
		if n := got.Load(); n != 22 {
			t.Fatalf("b's entity got %d messages, want 22", n)
		}
	})
}
