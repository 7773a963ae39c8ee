package memory

import (
	"context"
	"testing"

	"github.com/shoal-dev/shoal/journal"
)

// A short log holds room for about its own events, not a full chunk; a long
// one still fills chunks of chunkSize and replays in order.
func TestLogGrowsWithItsEvents(t *testing.T) {
	j := New()
	write := func(pid string, seq uint64) {
		t.Helper()
		if err := j.Write(context.Background(), []journal.Event{{PersistenceID: pid, SeqNr: seq, Manifest: "m"}}); err != nil {
			t.Fatal(err)
		}
	}
	write("short", 1)
	if c := cap(j.logs["short"].chunks[0]); c > 8 {
		t.Fatalf("a one-event log holds room for %d events", c)
	}
	const long = 2*chunkSize + 3
	for seq := uint64(1); seq <= long; seq++ {
		write("long", seq)
	}
	if n := len(j.logs["long"].chunks); n != 3 {
		t.Fatalf("%d chunks for %d events, want 3", n, long)
	}
	var next uint64 = 1
	err := j.Replay(context.Background(), "long", 1, long, func(e journal.Event) error {
		if e.SeqNr != next {
			t.Fatalf("replayed seq %d, want %d", e.SeqNr, next)
		}
		next++
		return nil
	})
	if err != nil || next != long+1 {
		t.Fatalf("replay ended at %d with %v", next, err)
	}
}
