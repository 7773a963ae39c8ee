package sharding

import (
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shoal-dev/shoal/entity"
)

// tellFast takes a message only in the steady state: shard hosted and
// routable at the current write epoch, entity started and not stopping.
// Every other state is refused, for the locked path to decide.
func TestTellFastRefusesEveryStateButTheSteadyOne(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gate := make(chan struct{})
		r := fastRegion(t, Settings{}, func(entity.Context[string]) entity.Behavior[string] {
			return entity.Receive(func(ctx entity.Context[string], m string) entity.Behavior[string] {
				switch m {
				case "stop":
					return entity.Stopped[string]()
				case "passivate":
					ctx.Passivate()
					<-gate
				}
				return entity.Same[string]()
			})
		})
		fast := func(what string, want bool) {
			t.Helper()
			if ok, err := r.tellFast("e", r.fast.entities.hash("e"), "m", nil); ok != want || err != nil {
				t.Fatalf("%s: tellFast = %v, %v; want %v", what, ok, err, want)
			}
		}
		fast("shard not yet home", false)
		if err := r.EntityRefFor("e").Tell("m"); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		fast("entity started, shard not routed at this epoch", false)
		_ = r.EntityRefFor("e").Tell("m") // the locked path stamps the shard
		fast("steady state", true)
		r.step(func(c *regionCore[string, *shard[string]]) { c.tick() }) // any write lock
		fast("after a write lock", false)
		_ = r.EntityRefFor("e").Tell("m")
		fast("routed again", true)
		_ = r.EntityRefFor("e").Tell("passivate")
		synctest.Wait()
		fast("entity passivating (sealed)", false)
		close(gate)
		synctest.Wait()
		fast("entity stopped", false)
		_ = r.EntityRefFor("e").Tell("m") // restarts it
		synctest.Wait()
		_ = r.EntityRefFor("e").Tell("m")
		fast("next incarnation", true)
		r.StopShards(r.ShardID("e"))
		synctest.Wait()
		fast("shard handed off", false)
	})
}

// An entity that gets its messages only on the fast path is not idle: its
// shard folds the ticks its cell keeps into the core before it looks for
// idle entities. Here "a" takes the locked path after every region tick
// (stamping the shard routable again), and "b", in the same shard, only
// the fast path, for longer than the idle timeout.
func TestFastPathTellsKeepAnEntityFromIdlePassivation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		starts := map[string]int{}
		r := fastRegion(t, Settings{NumberOfShards: 1, PassivateIdleAfter: 10 * time.Second}, func(ctx entity.Context[string]) entity.Behavior[string] {
			mu.Lock()
			starts[ctx.EntityID()]++
			mu.Unlock()
			return entity.Receive(func(_ entity.Context[string], m string) entity.Behavior[string] {
				if m == "stop" {
					return entity.Stopped[string]()
				}
				return entity.Same[string]()
			})
		})
		for _, id := range []string{"a", "b"} {
			if err := r.EntityRefFor(id).Tell("m"); err != nil {
				t.Fatal(err)
			}
		}
		synctest.Wait()
		for i := range 30 {
			time.Sleep(time.Second)
			synctest.Wait()
			_ = r.EntityRefFor("a").Tell("m")
			if ok, err := r.tellFast("b", r.fast.entities.hash("b"), "m", nil); !ok || err != nil {
				t.Fatalf("after %ds: tellFast(b) = %v, %v: b was passivated as idle", i+1, ok, err)
			}
			synctest.Wait()
		}
		mu.Lock()
		defer mu.Unlock()
		if starts["b"] != 1 {
			t.Fatalf("b started %d times, want 1", starts["b"])
		}
	})
}

// A kept EntityRef (with the hash it took once) and Region.Tell reach a
// running entity on the fast path: no shard id is computed, as the locked
// path would.
func TestEntityRefsAndRegionTellTakeTheFastPath(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var shardIDs atomic.Int64
		shardID := func(string) string { shardIDs.Add(1); return "s" }
		r := fastRegion(t, Settings{ShardID: shardID}, func(entity.Context[string]) entity.Behavior[string] {
			return entity.Receive(func(_ entity.Context[string], m string) entity.Behavior[string] {
				if m == "stop" {
					return entity.Stopped[string]()
				}
				return entity.Same[string]()
			})
		})
		ref := r.EntityRefFor("e")
		for range 2 { // starts e, then stamps its shard routable
			if err := ref.Tell("m"); err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
		}
		before := shardIDs.Load()
		for range 10 {
			if err := ref.Tell("m"); err != nil {
				t.Fatal(err)
			}
			if err := r.Tell(Envelope[string]{EntityID: "e", Message: "m"}); err != nil {
				t.Fatal(err)
			}
		}
		if n := shardIDs.Load() - before; n != 0 {
			t.Fatalf("%d of 20 tells took the locked path (computed a shard id)", n)
		}
	})
}

// fastRegion is a region of string entities on a node of its own, in the
// caller's bubble; the node terminates with the test.
func fastRegion(t testing.TB, settings Settings, create func(entity.Context[string]) entity.Behavior[string]) *Region[string] {
	t.Helper()
	sys, err := entity.NewSystem(entity.Config{NodeID: "a"})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(sys, Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Terminate)
	r, err := Init(s, Entity[string]{Key: entity.NewTypeKey[string]("Fast"), StopMessage: "stop", Settings: settings, Create: create})
	if err != nil {
		t.Fatal(err)
	}
	return r
}
