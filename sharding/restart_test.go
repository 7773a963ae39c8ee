package sharding_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/sharding"
)

// flakyRememberStore fails its first failAdds Add calls.
type flakyRememberStore struct {
	*sharding.MemoryRememberStore
	mu       sync.Mutex
	failAdds int
	calls    int
}

func (f *flakyRememberStore) Add(ctx context.Context, typeName, shard, entityID string) error {
	f.mu.Lock()
	f.calls++
	fail := f.calls <= f.failAdds
	f.mu.Unlock()
	if fail {
		return errors.New("store unavailable")
	}
	return f.MemoryRememberStore.Add(ctx, typeName, shard, entityID)
}

// A remember-entities write the store refuses is retried with back-off
// until it lands, so a brief store outage loses no remembered entity.
func TestRememberStoreWritesAreRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &flakyRememberStore{MemoryRememberStore: sharding.NewMemoryRememberStore(), failAdds: 3}
		sys, err := entity.NewSystem(entity.Config{NodeID: "a", Logger: quiet()})
		if err != nil {
			t.Fatal(err)
		}
		sh, err := sharding.New(sys, sharding.Config{RememberStore: store})
		if err != nil {
			t.Fatal(err)
		}
		defer sh.Terminate()
		log := newJournal()
		r, err := sharding.Init(sh, sharding.Entity[msg]{Key: key, Create: log.create("a"), StopMessage: stop{},
			Settings: sharding.Settings{RememberEntities: true}})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.EntityRefFor("e").Tell(note{Text: "1"}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(30 * time.Second)
		synctest.Wait()
		ids, err := store.Entities(context.Background(), key.Name(), r.ShardID("e"))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(ids, []string{"e"}) || store.calls != 4 {
			t.Fatalf("remembered %v after %d Add calls; want [e] after 4", ids, store.calls)
		}
	})
}

// The restart back-off grows while an entity crashes in a loop, and starts
// over once it has run longer than the longest back-off.
func TestRestartBackOffResetsAfterAStableRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, sharding.Settings{RememberEntities: true, RestartBackoffMin: time.Second, RestartBackoffMax: 4 * time.Second})
		n := s.join("a", "host")
		n.tell(t, "e", note{Text: "start"})
		synctest.Wait()
		// Crash in a loop until the back-off is at its maximum (4 s ± 50%).
		for i, wait := range []time.Duration{1500 * time.Millisecond, 3 * time.Second, 6 * time.Second, 6 * time.Second} {
			n.tell(t, "e", crash{})
			time.Sleep(wait)
			synctest.Wait()
			if c := s.log.startCount("e"); c != i+2 {
				t.Fatalf("crash %d: %d starts, want %d", i+1, c, i+2)
			}
		}
		time.Sleep(10 * time.Second) // a stable run, longer than the longest back-off
		n.tell(t, "e", crash{})
		time.Sleep(1500 * time.Millisecond) // the first back-off: 1 s ± 50%
		synctest.Wait()
		if c := s.log.startCount("e"); c != 6 {
			t.Fatalf("after a stable run the restart took longer than the first back-off (%d starts, want 6)", c)
		}
		n.sh.Terminate()
	})
}

// StartEntity cuts a restart back-off short but does not end the crash
// loop: the next back-off goes on growing instead of starting over.
func TestStartEntityDuringBackOffKeepsTheBackOffGrowing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, sharding.Settings{RememberEntities: true, RestartBackoffMin: time.Second, RestartBackoffMax: 4 * time.Second})
		n := s.join("a", "host")
		n.tell(t, "e", note{Text: "start"})
		synctest.Wait()
		for i := range 3 { // back-offs of 1 s, 2 s and 4 s (± 50%), each cut short
			n.tell(t, "e", crash{})
			synctest.Wait()
			if err := n.region.StartEntity("e"); err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
			if c := s.log.startCount("e"); c != i+2 {
				t.Fatalf("crash %d: %d starts, want %d", i+1, c, i+2)
			}
		}
		n.tell(t, "e", crash{})
		time.Sleep(1900 * time.Millisecond) // within the first back-off, not the fourth (4 s ± 50%)
		synctest.Wait()
		if c := s.log.startCount("e"); c != 4 {
			t.Fatalf("the back-off started over after StartEntity restarts (%d starts, want 4)", c)
		}
		n.sh.Terminate()
	})
}
