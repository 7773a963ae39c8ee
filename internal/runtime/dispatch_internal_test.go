package runtime

import (
	"sync/atomic"
	"testing"
	"testing/synctest"
)

type runFunc func()

func (f runFunc) run() { f() }

// At most max mailboxes run at once; the rest wait in the run queue and
// all run in the end, after which no worker is left.
func TestDispatcherRunsAtMostMax(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := dispatcher{max: 2}
		release := make(chan struct{})
		var running, most, ran atomic.Int32
		for range 5 {
			d.submit(runFunc(func() {
				n := running.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				<-release
				running.Add(-1)
				ran.Add(1)
			}))
		}
		synctest.Wait()
		if n := running.Load(); n != 2 {
			t.Fatalf("%d mailboxes run at once, want 2", n)
		}
		close(release)
		synctest.Wait()
		d.mu.Lock()
		workers := d.workers
		d.mu.Unlock()
		if most.Load() != 2 || ran.Load() != 5 || workers != 0 {
			t.Fatalf("at most %d ran at once, %d of 5 ran, %d workers left", most.Load(), ran.Load(), workers)
		}
	})
}
