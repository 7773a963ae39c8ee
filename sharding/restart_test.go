package sharding_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/shoal-dev/shoal/sharding"
)

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
		for i := range 3 { // back-offs of 1 s, 1.5 s and 2.25 s (± 50%), each cut short
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
		// Past the first back-off (at most 1.5 s), before the fourth
		// (3.375 s ± 50%, at least 1.69 s).
		time.Sleep(1600 * time.Millisecond)
		synctest.Wait()
		if c := s.log.startCount("e"); c != 4 {
			t.Fatalf("the back-off started over after StartEntity restarts (%d starts, want 4)", c)
		}
		n.sh.Terminate()
	})
}
