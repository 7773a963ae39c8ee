package sharding_test

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shoal-dev/shoal/sharding"
)

// slowAdds is a remember store whose Add takes a second: a later Remove of
// the same entity must still win.
type slowAdds struct{ *sharding.MemoryRememberStore }

func (s slowAdds) Add(ctx context.Context, typeName, shard, entityID string) error {
	time.Sleep(time.Second)
	return s.MemoryRememberStore.Add(ctx, typeName, shard, entityID)
}

func remembered(t *testing.T, s *sim, n *node, id string) bool {
	t.Helper()
	ids, err := s.remember.Entities(context.Background(), "Test", n.region.ShardID(id))
	if err != nil {
		t.Fatal(err)
	}
	return slices.Contains(ids, id)
}

func TestRememberStoreWritesKeepTheirOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, sharding.Settings{RememberEntities: true})
		s.rememberStore = slowAdds{s.remember}
		n := s.join("a", "host")
		n.tell(t, "e", note{Text: "1"}) // remembered: a slow Add
		n.tell(t, "e", passivate{})     // passivated: a quick Remove
		time.Sleep(time.Minute)         // past any restart back-off
		synctest.Wait()
		// EntityTerminationSpec: a passivated remembered entity stays stopped.
		if s.log.startCount("e") != 1 || len(n.region.State().Shards[n.region.ShardID("e")]) != 0 {
			t.Fatalf("e not passivated, or restarted: %d starts, %v", s.log.startCount("e"), n.region.State())
		}
		if remembered(t, s, n, "e") {
			t.Fatal("a passivated entity is remembered: its Remove overtook its Add")
		}
		n.tell(t, "e", note{Text: "2"}) // started again: remembered again
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if !remembered(t, s, n, "e") {
			t.Fatal("a running entity is not remembered")
		}
		_ = n.sh.Shutdown(context.Background())
	})
}

// The constant recovery strategy restarts RecoveryRate remembered entities
// per RecoveryInterval when their shard starts.
func TestRememberedEntitiesRestartAtAConstantRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, sharding.Settings{NumberOfShards: 1, RememberEntities: true, RecoveryRate: 2, RecoveryInterval: time.Second})
		ids := []string{"r1", "r2", "r3", "r4", "r5", "r6"}
		for _, id := range ids {
			if err := s.remember.Add(context.Background(), "Test", "0", id); err != nil {
				t.Fatal(err)
			}
		}
		n := s.join("a", "host")
		started := func() int {
			c := 0
			for _, id := range ids {
				c += s.log.startCount(id)
			}
			return c
		}
		if err := n.region.StartEntity("r1"); err != nil { // starts the shard
			t.Fatal(err)
		}
		synctest.Wait()
		for i, want := range []int{2, 4, 6, 6} {
			if got := started(); got != want {
				t.Fatalf("after %ds: %d remembered entities started, want %d", i, got, want)
			}
			time.Sleep(time.Second)
			synctest.Wait()
		}
		for _, id := range ids {
			if c := s.log.startCount(id); c != 1 {
				t.Fatalf("%s started %d times", id, c)
			}
		}
		_ = n.sh.Shutdown(context.Background())
	})
}

// With remember-entities on, idle entities are never passivated, whatever
// PassivateIdleAfter says.
func TestRememberEntitiesTurnsIdlePassivationOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, sharding.Settings{RememberEntities: true, PassivateIdleAfter: time.Minute})
		n := s.join("a", "host")
		n.tell(t, "e", note{Text: "1"})
		time.Sleep(10 * time.Minute)
		synctest.Wait()
		if got := n.region.State().Shards[n.region.ShardID("e")]; !slices.Equal(got, []string{"e"}) {
			t.Fatalf("idle remembered entity passivated: %v", n.region.State())
		}
		if s.log.stopsByNode["a"] != 0 {
			t.Fatal("idle remembered entity got its stop message")
		}
		_ = n.sh.Shutdown(context.Background())
	})
}

// A remembered entity that stops without passivating comes back after the
// restart back-off, not before, and its restarts back off exponentially.
func TestRememberedEntityRestartsAfterBackOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, sharding.Settings{RememberEntities: true, RestartBackoffMin: 10 * time.Second, RestartBackoffMax: time.Minute})
		n := s.join("a", "host")
		n.tell(t, "e", note{Text: "1"})
		n.tell(t, "e", stop{}) // stops itself: not a passivation
		synctest.Wait()
		time.Sleep(4 * time.Second) // well inside the first back-off (10 s ± 50%)
		synctest.Wait()
		if c := s.log.startCount("e"); c != 1 {
			t.Fatalf("restarted within 4s: %d starts", c)
		}
		time.Sleep(12 * time.Second) // past the longest first back-off
		synctest.Wait()
		if c := s.log.startCount("e"); c != 2 {
			t.Fatalf("%d starts after the back-off, want 2", c)
		}
		if !remembered(t, s, n, "e") {
			t.Fatal("restarted entity is not remembered")
		}
		_ = n.sh.Shutdown(context.Background())
	})
}

// A hand-off completes only once the shard's remember writes are stored:
// the next home reads the store to restart remembered entities, and an Add
// still on its way would leave the entity remembered but not running.
func TestHandOffWaitsForRememberWrites(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, sharding.Settings{RememberEntities: true})
		s.rememberStore = slowAdds{s.remember}
		a := s.join("a", "host")
		b := s.join("b", "host")
		synctest.Wait()
		a.tell(t, "r1", note{Text: "hi"})
		synctest.Wait() // r1 runs on a; its Add is still being written
		if len(a.region.State().Shards[a.region.ShardID("r1")]) != 1 {
			t.Fatalf("r1 not on a: %v", a.region.State())
		}
		if err := a.sh.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if !remembered(t, s, b, "r1") {
			t.Fatal("r1 not remembered")
		}
		if c := s.log.startCount("r1"); c != 2 {
			t.Fatalf("remembered r1 started %d times, want 2 (on a, then on b)", c)
		}
		_ = b.sh.Shutdown(context.Background())
	})
}
