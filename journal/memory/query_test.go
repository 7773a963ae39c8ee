package memory_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shoal-dev/shoal/journal"
	"github.com/shoal-dev/shoal/journal/memory"
)

// A Live query blocks on a channel the next write closes: inside a synctest
// bubble it is durably blocked between writes, is woken by each write, and
// no time passes while it waits (it does not poll).
func TestLiveQueryInSynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		j := memory.New()
		ctx, cancel := context.WithCancel(context.Background())
		var n atomic.Int64
		done := make(chan error, 1)
		start := time.Now()
		go func() {
			done <- j.EventsBySlices(ctx, "S", journal.AllSlices, journal.Offset{}, journal.Live, func(journal.QueriedEvent) error {
				n.Add(1)
				return nil
			})
		}()
		for seq := uint64(1); seq <= 3; seq++ {
			synctest.Wait()
			if got := n.Load(); got != int64(seq-1) {
				t.Fatalf("%d events delivered before write %d", got, seq)
			}
			if err := j.Write(ctx, []journal.Event{{PersistenceID: "S|1", SeqNr: seq, Manifest: "m"}}); err != nil {
				t.Fatal(err)
			}
		}
		synctest.Wait()
		if n.Load() != 3 {
			t.Fatalf("%d events delivered, want 3", n.Load())
		}
		if elapsed := time.Since(start); elapsed != 0 {
			t.Fatalf("the bubble's clock moved %v: the query waited on time", elapsed)
		}
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled Live query returned %v", err)
		}
	})
}
