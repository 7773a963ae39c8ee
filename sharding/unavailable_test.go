package sharding_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/sharding"
)

func askNotes(ctx context.Context, n *node, id string) ([]string, error) {
	return entity.Ask(ctx, n.region.EntityRefFor(id), func(r entity.ReplyTo[[]string]) msg { return get{ReplyTo: r} })
}

// wantUnavailable checks that an ask of an entity backing off failed at
// once, typed, with the time left before the restart; it returns that time.
func wantUnavailable(t *testing.T, n *node, id string, longest time.Duration) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	start := time.Now()
	_, err := askNotes(ctx, n, id)
	if !errors.Is(err, sharding.ErrEntityUnavailable) {
		t.Fatalf("ask during the back-off: %v, want ErrEntityUnavailable", err)
	}
	if waited := time.Since(start); waited != 0 {
		t.Fatalf("the ask failed after %v, want at once", waited)
	}
	ue, ok := errors.AsType[*sharding.UnavailableError](err)
	if !ok || ue.EntityID != id || ue.Cause == nil || ue.RetryAfter <= 0 || ue.RetryAfter > longest {
		t.Fatalf("error %#v: want the entity, its cause and a retry-after in (0, %v]", ue, longest)
	}
	return ue.RetryAfter
}

// An ask of an entity that failed and backs off gets ErrEntityUnavailable
// at once; a Tell meanwhile waits for the restart, and once the back-off
// is over the entity answers again with nothing lost.
func TestAskFailsFastWhileTheEntityBacksOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, sharding.Settings{RestartBackoffMin: 10 * time.Second, RestartBackoffMax: time.Minute})
		n := s.join("a", "host")
		n.tell(t, "e", note{Text: "before"})
		n.tell(t, "e", crash{})
		synctest.Wait()
		retryAfter := wantUnavailable(t, n, "e", 15*time.Second) // 10 s ± 50%
		n.tell(t, "e", note{Text: "told during the back-off"})

		time.Sleep(retryAfter)
		synctest.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		got, err := askNotes(ctx, n, "e")
		if err != nil || !slices.Equal(got, []string{"before", "told during the back-off"}) {
			t.Fatalf("after the back-off: %v, %v", got, err)
		}
		if c := s.log.startCount("e"); c != 2 {
			t.Fatalf("%d starts, want 2", c)
		}
		_ = n.sh.Shutdown(context.Background())
	})
}

// A remembered entity restarts by itself after its back-off, whether or
// not an ask was refused meanwhile.
func TestAskFailsFastWhileARememberedEntityBacksOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, sharding.Settings{RememberEntities: true, RestartBackoffMin: 10 * time.Second, RestartBackoffMax: time.Minute})
		n := s.join("a", "host")
		n.tell(t, "r", note{Text: "before"})
		n.tell(t, "r", crash{})
		synctest.Wait()
		retryAfter := wantUnavailable(t, n, "r", 15*time.Second)
		time.Sleep(retryAfter)
		synctest.Wait()
		if c := s.log.startCount("r"); c != 2 {
			t.Fatalf("%d starts after the back-off, want 2 (restarted by itself)", c)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if got, err := askNotes(ctx, n, "r"); err != nil || !slices.Equal(got, []string{"before"}) {
			t.Fatalf("after the back-off: %v, %v", got, err)
		}
		_ = n.sh.Shutdown(context.Background())
	})
}

// An entity that runs is asked as usual.
func TestAskOfARunningEntity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, sharding.Settings{})
		n := s.join("a", "host")
		n.tell(t, "e", note{Text: "hi"})
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if got, err := askNotes(ctx, n, "e"); err != nil || !slices.Equal(got, []string{"hi"}) {
			t.Fatalf("%v, %v", got, err)
		}
		_ = n.sh.Shutdown(context.Background())
	})
}

// A refused caller comes back after RetryAfter, so the shard restarts the
// entity then even though no message waits: when it fails again (its
// journal still down) the next caller is refused at once too, with a longer
// back-off. Without a refused ask it is left stopped until its next message.
func TestRefusedAskRestartsTheEntityAfterTheBackOff(t *testing.T) {
	for _, asked := range []bool{true, false} {
		synctest.Test(t, func(t *testing.T) {
			s := newSim(t, sharding.Settings{RestartBackoffMin: 10 * time.Second, RestartBackoffMax: time.Minute})
			n := s.join("a", "host")
			n.tell(t, "e", crash{})
			synctest.Wait()
			retryAfter := 15 * time.Second // the longest first back-off: 10 s ± 50%
			if asked {
				retryAfter = wantUnavailable(t, n, "e", retryAfter)
			}
			time.Sleep(retryAfter)
			synctest.Wait()
			want := 1
			if asked {
				want = 2
			}
			if c := s.log.startCount("e"); c != want {
				t.Fatalf("asked %v: %d starts after the back-off, want %d", asked, c, want)
			}
			_ = n.sh.Shutdown(context.Background())
		})
	}
}
