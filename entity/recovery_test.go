package entity_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/internal/runtime"
)

// At most MaxConcurrentRecoveries run at once; the others wait in line and
// run, in order, as the running ones end.
func TestStartRecoveryBoundsConcurrentRecoveries(t *testing.T) {
	sys, err := entity.NewSystem(entity.Config{Logger: discardLogger(), MaxConcurrentRecoveries: 2})
	if err != nil {
		t.Fatal(err)
	}
	const n = 5
	var running, peak atomic.Int32
	started := make(chan int, n)
	release := make([]chan struct{}, n)
	for i := range n {
		release[i] = make(chan struct{})
		runtime.StartRecovery(sys, fmt.Sprint("pid-", i), func() {
			now := running.Add(1)
			for p := peak.Load(); now > p && !peak.CompareAndSwap(p, now); p = peak.Load() {
			}
			started <- i
			<-release[i]
			running.Add(-1)
		})
	}
	first, second := <-started, <-started
	select {
	case i := <-started:
		t.Fatalf("recovery %d started while two were running", i)
	default:
	}
	// Releasing one lets exactly the next in line start.
	close(release[first])
	if next := <-started; next != 2 {
		t.Fatalf("recovery %d started after the first ended, want 2 (the next in line)", next)
	}
	close(release[second])
	close(release[2])
	for range 2 {
		close(release[<-started])
	}
	if p := peak.Load(); p != 2 {
		t.Fatalf("peak concurrent recoveries %d, want 2", p)
	}
}
