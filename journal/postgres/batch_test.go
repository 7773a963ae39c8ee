package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/journal"
	"github.com/shoal-dev/shoal/journal/journaltest"
	"github.com/shoal-dev/shoal/journal/postgres"
)

// A short wait for company exercises the timer path of the batcher.
func TestConformanceBatchWait(t *testing.T) {
	journaltest.Run(t, func(t *testing.T) journal.Journal {
		return newJournal(t, postgres.Config{MaxBatchWait: 2 * time.Millisecond, Writers: 1})
	})
}

func evs(pid string, first uint64, n int, writer string) []journal.Event {
	out := make([]journal.Event, n)
	for i := range out {
		out[i] = journal.Event{PersistenceID: pid, SeqNr: first + uint64(i), Manifest: "m",
			Payload: []byte(fmt.Sprintf("%s/%d", writer, first+uint64(i))), WriterID: writer, Timestamp: time.Now()}
	}
	return out
}

func mustWrite(t *testing.T, j journal.Journal, e []journal.Event) {
	t.Helper()
	if err := j.Write(context.Background(), e); err != nil {
		t.Fatal(err)
	}
}

func stored(t *testing.T, j journal.Journal, pid string) []journal.Event {
	t.Helper()
	var out []journal.Event
	if err := j.Replay(context.Background(), pid, 0, math.MaxUint64, func(e journal.Event) error {
		out = append(out, e)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// writeOneBatch runs the writes concurrently and checks that they were
// stored in a single round trip (the batch is exactly full, so it goes out
// as soon as the last write is queued).
func writeOneBatch(t *testing.T, j *postgres.Journal, writes [][]journal.Event) []error {
	t.Helper()
	before := j.Stats()
	errs := make([]error, len(writes))
	var wg sync.WaitGroup
	for i, w := range writes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = j.Write(context.Background(), w)
		}()
	}
	wg.Wait()
	after := j.Stats()
	if got := after.Batches - before.Batches; got != 1 {
		t.Fatalf("writes went out in %d batches, want 1", got)
	}
	return errs
}

// batchJournal returns a journal whose one writer goroutine sends a batch
// only when it holds exactly events events, and a second journal on the same
// tables for setting up data.
func batchJournal(t *testing.T, events int) (batched, plain *postgres.Journal) {
	pool := pg.Pool(t)
	batched = postgres.New(pool, postgres.Config{Writers: 1, MaxBatchEvents: events, MaxBatchWait: time.Minute})
	plain = postgres.New(pool, postgres.Config{})
	t.Cleanup(func() { batched.Close(); plain.Close() })
	return batched, plain
}

// TestConflictIsolatedInBatch: in one batch, writes that conflict (whole or
// in part) fail alone; the others are stored; nothing of a failed write is.
func TestConflictIsolatedInBatch(t *testing.T) {
	j, setup := batchJournal(t, 2+3+2+4+1)
	mustWrite(t, setup, evs("taken", 1, 3, "old"))
	mustWrite(t, setup, evs("partial", 1, 3, "old"))

	before := j.Stats()
	errs := writeOneBatch(t, j, [][]journal.Event{
		evs("fresh-a", 1, 2, "new"), // ok
		evs("partial", 3, 3, "new"), // 3 taken, 4 and 5 free: must store nothing
		evs("fresh-b", 1, 2, "new"), // ok
		evs("taken", 1, 4, "new"),   // all of 1..3 taken
		evs("fresh-c", 1, 1, "new"), // ok
	})
	if j.Stats().ConflictBatches-before.ConflictBatches != 1 {
		t.Fatalf("conflict path not taken")
	}
	for i, want := range []error{nil, journal.ErrWriteConflict, nil, journal.ErrWriteConflict, nil} {
		if want == nil && errs[i] != nil || want != nil && !errors.Is(errs[i], want) {
			t.Errorf("write %d: err = %v, want %v", i, errs[i], want)
		}
	}
	var wc *journal.WriteConflictError
	if errors.As(errs[1], &wc) && (wc.PersistenceID != "partial" || wc.SeqNr != 3) {
		t.Errorf("partial conflict names %s %d, want partial 3", wc.PersistenceID, wc.SeqNr)
	}
	for pid, n := range map[string]int{"fresh-a": 2, "fresh-b": 2, "fresh-c": 1, "partial": 3, "taken": 3} {
		got := stored(t, j, pid)
		if len(got) != n {
			t.Errorf("%s: %d events stored, want %d", pid, len(got), n)
		}
		for _, e := range got {
			if pid != "partial" && pid != "taken" {
				continue
			}
			if e.WriterID != "old" {
				t.Errorf("%s seq %d written by %s: a failed write left rows", pid, e.SeqNr, e.WriterID)
			}
		}
	}
	if h, _ := j.HighestSeqNr(context.Background(), "partial"); h != 3 {
		t.Errorf("HighestSeqNr(partial) = %d, want 3", h)
	}
}

// TestDuplicateWithinBatch: two writes of one batch claim the same seq nrs
// (two incarnations in one process): the first queued wins whole.
func TestDuplicateWithinBatch(t *testing.T) {
	j, _ := batchJournal(t, 3+3)
	errs := writeOneBatch(t, j, [][]journal.Event{evs("dup", 1, 3, "a"), evs("dup", 2, 3, "b")})
	ok := 0
	for _, err := range errs {
		if err == nil {
			ok++
		} else if !errors.Is(err, journal.ErrWriteConflict) {
			t.Fatalf("unexpected error %v", err)
		}
	}
	if ok != 1 {
		t.Fatalf("%d writes succeeded (%v), want exactly 1", ok, errs)
	}
	got := stored(t, j, "dup")
	winner := got[0].WriterID
	want := map[string]int{"a": 3, "b": 4}[winner]
	if len(got) != 3 || got[len(got)-1].SeqNr != uint64(want) {
		t.Fatalf("stored %d events ending at %d, want the whole batch of %s", len(got), got[len(got)-1].SeqNr, winner)
	}
	for _, e := range got {
		if e.WriterID != winner {
			t.Fatalf("events of %s and %s interleave", winner, e.WriterID)
		}
	}
}

// TestDeletedBelowMarkInBatch: a write at or below a pid's deletion mark is
// a conflict even though no row holds its seq nrs, without failing the others.
func TestDeletedBelowMarkInBatch(t *testing.T) {
	j, other := batchJournal(t, 2+2)
	mustWrite(t, other, evs("deleted", 1, 5, "old"))
	if err := other.DeleteTo(context.Background(), "deleted", 5); err != nil {
		t.Fatal(err)
	}
	errs := writeOneBatch(t, j, [][]journal.Event{evs("deleted", 4, 2, "stale"), evs("fine", 1, 2, "new")})
	var wc *journal.WriteConflictError
	if !errors.As(errs[0], &wc) || wc.PersistenceID != "deleted" || wc.SeqNr != 4 {
		t.Fatalf("write below the deletion mark: err = %v, want conflict at deleted 4", errs[0])
	}
	if errs[1] != nil {
		t.Fatalf("other write in the batch: %v", errs[1])
	}
	if got := stored(t, j, "deleted"); len(got) != 0 {
		t.Fatalf("stale write stored %d events", len(got))
	}

	// Both kinds of conflict in one batch with a unique violation.
	j2, other2 := batchJournal(t, 2+2+1)
	other = other2
	mustWrite(t, other, evs("deleted", 1, 5, "old"))
	if err := other.DeleteTo(context.Background(), "deleted", 5); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, other, evs("live", 1, 1, "old"))
	errs = writeOneBatch(t, j2, [][]journal.Event{evs("deleted", 4, 2, "stale"), evs("fine2", 1, 2, "new"), evs("live", 1, 1, "stale")})
	if !errors.Is(errs[0], journal.ErrWriteConflict) || errs[1] != nil || !errors.Is(errs[2], journal.ErrWriteConflict) {
		t.Fatalf("errs = %v, want conflict, nil, conflict", errs)
	}
}

func TestWriteAfterClose(t *testing.T) {
	j := postgres.New(pg.Pool(t), postgres.Config{})
	mustWrite(t, j, evs("p", 1, 1, "w"))
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if err := j.Write(context.Background(), evs("p", 2, 1, "w")); !errors.Is(err, postgres.ErrClosed) {
		t.Fatalf("Write after Close: %v, want ErrClosed", err)
	}
	// Reads do not need the writers.
	if h, err := j.HighestSeqNr(context.Background(), "p"); err != nil || h != 1 {
		t.Fatalf("HighestSeqNr after Close = %d, %v", h, err)
	}
}

// TestSeqBeyondInt64Rejected: the column is a bigint.
func TestSeqBeyondInt64Rejected(t *testing.T) {
	j := newJournal(t, postgres.Config{})
	err := j.Write(context.Background(), evs("p", math.MaxInt64, 2, "w"))
	if !errors.Is(err, journal.ErrRejected) {
		t.Fatalf("err = %v, want ErrRejected", err)
	}
}

// TestStaleWriteDoesNotFailValidOneInBatch: after 1..3 are stored, a stale
// incarnation writes 3..5 and the current one 4..5, in one batch. The stale
// write is sorted first and its rows 4 and 5 go in before its conflict at 3
// is known; they must not make the valid write fail: it is stored, the
// stale one alone gets the conflict.
func TestStaleWriteDoesNotFailValidOneInBatch(t *testing.T) {
	j, setup := batchJournal(t, 3+2+1)
	mustWrite(t, setup, evs("split", 1, 3, "current"))
	errs := writeOneBatch(t, j, [][]journal.Event{
		evs("split", 3, 3, "stale"),
		evs("split", 4, 2, "current"),
		evs("bystander", 1, 1, "other"),
	})
	var wc *journal.WriteConflictError
	if !errors.As(errs[0], &wc) || wc.PersistenceID != "split" || wc.SeqNr != 3 {
		t.Errorf("stale write: err = %v, want a conflict at split 3", errs[0])
	}
	if errs[1] != nil || errs[2] != nil {
		t.Errorf("valid writes failed: %v, %v", errs[1], errs[2])
	}
	got := stored(t, j, "split")
	if len(got) != 5 {
		t.Fatalf("split: %d events stored, want 5", len(got))
	}
	for _, e := range got {
		if e.WriterID != "current" {
			t.Errorf("split seq %d written by %s", e.SeqNr, e.WriterID)
		}
	}

	// A chain over two rounds: the stale write takes rows of the current
	// one, which takes a row of a third write. The current write goes in;
	// the third then conflicts with it.
	j2, setup2 := batchJournal(t, 3+3+2)
	mustWrite(t, setup2, evs("chain", 1, 2, "current"))
	errs = writeOneBatch(t, j2, [][]journal.Event{
		evs("chain", 2, 3, "stale"),   // 2 is taken: conflict; would take 3..4
		evs("chain", 3, 3, "current"), // 3..5
		evs("chain", 5, 2, "third"),   // 5 belongs to the current write
	})
	if !errors.As(errs[0], &wc) || wc.SeqNr != 2 || errs[1] != nil || !errors.As(errs[2], &wc) || wc.SeqNr != 5 {
		t.Fatalf("errs = %v, want conflict at 2, nil, conflict at 5", errs)
	}
	got = stored(t, j2, "chain")
	if len(got) != 5 {
		t.Fatalf("chain: %d events stored, want 5", len(got))
	}
	for _, e := range got {
		if e.WriterID != "current" {
			t.Errorf("chain seq %d written by %s", e.SeqNr, e.WriterID)
		}
	}
}

// TestLoneWriteIsOneRowInsert: with nothing else queued, a write of one
// event goes out at once as a plain one-row INSERT, and the deletion mark
// and conflicts still hold for it.
func TestLoneWriteIsOneRowInsert(t *testing.T) {
	q := &queryLog{}
	j := postgres.New(tracedPool(t, q), postgres.Config{Writers: 1})
	defer j.Close()
	mustWrite(t, j, evs("lone", 1, 1, "w"))
	mustWrite(t, j, evs("lone", 2, 1, "w"))
	if err := j.Write(context.Background(), evs("lone", 2, 1, "stale")); !errors.Is(err, journal.ErrWriteConflict) {
		t.Fatalf("rewriting seq 2: err = %v, want ErrWriteConflict", err)
	}
	if err := j.DeleteTo(context.Background(), "lone", 2); err != nil {
		t.Fatal(err)
	}
	if err := j.Write(context.Background(), evs("lone", 2, 1, "stale")); !errors.Is(err, journal.ErrWriteConflict) {
		t.Fatalf("writing at the deletion mark: err = %v, want ErrWriteConflict", err)
	}
	mustWrite(t, j, evs("lone", 3, 1, "w"))
	if got := stored(t, j, "lone"); len(got) != 1 || got[0].SeqNr != 3 || string(got[0].Payload) != "w/3" {
		t.Fatalf("stored %+v, want only seq 3 after deleting to 2", got)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.oneRow < 4 {
		t.Fatalf("%d of the lone writes went out as one-row inserts (inserts: %v)", q.oneRow, q.insertRows)
	}
}
