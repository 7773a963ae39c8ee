package journal_test

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/shoal-dev/shoal/journal"
	"github.com/shoal-dev/shoal/journal/memory"
)

// What every journal does (here the in-memory one; journal/postgres is the
// same contract): an atomic write of consecutive events, a refused second
// writer of the same sequence number, replay in order, and the highest
// sequence number, which survives deletion.
func Example() {
	ctx := context.Background()
	var j journal.Journal = memory.New()
	ev := func(seq uint64, payload string) journal.Event {
		return journal.Event{PersistenceID: "Account|1", SeqNr: seq, Manifest: "deposited", Payload: []byte(payload)}
	}

	if err := j.Write(ctx, []journal.Event{ev(1, "10"), ev(2, "5")}); err != nil {
		panic(err)
	}
	err := j.Write(ctx, []journal.Event{ev(2, "7")})
	fmt.Println("second writer of seq 2 refused:", errors.Is(err, journal.ErrWriteConflict))

	_ = j.Replay(ctx, "Account|1", 1, math.MaxUint64, func(e journal.Event) error {
		fmt.Printf("replay #%d %s %s\n", e.SeqNr, e.Manifest, e.Payload)
		return nil
	})
	_ = j.DeleteTo(ctx, "Account|1", 2)
	highest, _ := j.HighestSeqNr(ctx, "Account|1")
	fmt.Println("highest after deleting both:", highest)
	// Output:
	// second writer of seq 2 refused: true
	// replay #1 deposited 10
	// replay #2 deposited 5
	// highest after deleting both: 2
}
