package postgres_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shoal-dev/shoal/cluster/lease"
	"github.com/shoal-dev/shoal/journal"
	"github.com/shoal-dev/shoal/journal/postgres"
	"github.com/shoal-dev/shoal/timers/reminder"
	reminders "github.com/shoal-dev/shoal/timers/reminder/postgres"
)

func sideSet(id string) reminder.Batch {
	return reminder.Batch{Changes: []reminder.Change{{
		Key:     reminder.Key{EntityType: "T", EntityID: id, Name: "r"},
		ShardID: "1", After: time.Hour, Manifest: "cmd", Payload: []byte("x"), Generation: reminder.NewGeneration(),
	}}}
}

func hasReminder(t *testing.T, s reminder.Store, id string) bool {
	t.Helper()
	_, ok, err := s.Get(context.Background(), reminder.Key{EntityType: "T", EntityID: id, Name: "r"})
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// A write's side goes in with its events, and not without them: a write
// that conflicts stores neither, while the other writes of its batch (and
// their sides) go in.
func TestSideCommitsWithItsEvents(t *testing.T) {
	pool := pg.Pool(t)
	store := reminders.New(pool)
	committed := make(chan reminder.Batch, 16)
	store.Observe(func(b reminder.Batch, _ time.Time) { committed <- b })
	j := postgres.New(pool, postgres.Config{MaxBatchWait: 20 * time.Millisecond}, postgres.WithSideStore(store))
	t.Cleanup(func() { j.Close() })
	ctx := context.Background()
	if got := j.SideStore(); got != reminder.SideStoreName {
		t.Fatalf("SideStore() = %q", got)
	}
	if err := j.WriteWithSide(ctx, []journal.Event{event("T|a", 1)}, sideSet("a")); err != nil {
		t.Fatal(err)
	}
	if !hasReminder(t, store, "a") {
		t.Fatal("the side of a stored write is missing")
	}
	<-committed

	// b's seq 1 is taken: its write conflicts, in a batch with c's.
	if err := j.Write(ctx, []journal.Event{event("T|b", 1)}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var errB, errC error
	wg.Go(func() { errB = j.WriteWithSide(ctx, []journal.Event{event("T|b", 1)}, sideSet("b")) })
	wg.Go(func() { errC = j.WriteWithSide(ctx, []journal.Event{event("T|c", 1), event("T|c", 2)}, sideSet("c")) })
	wg.Wait()
	if !errors.Is(errB, journal.ErrWriteConflict) || errC != nil {
		t.Fatalf("conflicting write: %v, other write: %v; want a conflict and nil", errB, errC)
	}
	if hasReminder(t, store, "b") {
		t.Fatal("the side of a write that conflicted was stored")
	}
	if !hasReminder(t, store, "c") {
		t.Fatal("the side of the stored write beside a conflicting one is missing")
	}
	if b := <-committed; b.Changes[0].EntityID != "c" {
		t.Fatalf("observed %+v, want c's side only", b)
	}
	select {
	case b := <-committed:
		t.Fatalf("observed a side that was not stored: %+v", b)
	default:
	}
}

// failingSides fails every side write.
type failingSides struct{ *reminders.Store }

func (failingSides) QueueSides(b *pgx.Batch, _ []journal.Side) error {
	b.Queue("SELECT * FROM no_such_table")
	return nil
}

// When the side cannot be written, the events are not stored either.
func TestSideFailureStoresNoEvents(t *testing.T) {
	pool := pg.Pool(t)
	j := postgres.New(pool, postgres.Config{}, postgres.WithSideStore(failingSides{reminders.New(pool)}))
	t.Cleanup(func() { j.Close() })
	ctx := context.Background()
	if err := j.WriteWithSide(ctx, []journal.Event{event("T|a", 1)}, sideSet("a")); err == nil {
		t.Fatal("write whose side failed succeeded")
	}
	if h, err := j.HighestSeqNr(ctx, "T|a"); err != nil || h != 0 {
		t.Fatalf("highest seq nr %d (%v) after the failed write, want 0: its events were stored", h, err)
	}
}

// A side the journal cannot write is refused before anything is stored.
func TestSideRefused(t *testing.T) {
	pool := pg.Pool(t)
	ctx := context.Background()
	plain := postgres.New(pool, postgres.Config{})
	t.Cleanup(func() { plain.Close() })
	if err := plain.WriteWithSide(ctx, []journal.Event{event("T|a", 1)}, sideSet("a")); !errors.Is(err, journal.ErrRejected) {
		t.Fatalf("side without a side store: %v, want ErrRejected", err)
	}
	j := postgres.New(pool, postgres.Config{}, postgres.WithSideStore(reminders.New(pool)))
	t.Cleanup(func() { j.Close() })
	bad := sideSet("a")
	bad.Changes[0].Generation = 0
	done := make(chan error, 1)
	j.WriteAsyncWithSide([]journal.Event{event("T|a", 1)}, bad, func(err error) { done <- err })
	if err := <-done; !errors.Is(err, journal.ErrRejected) || !errors.Is(err, reminder.ErrInvalid) {
		t.Fatalf("ill-formed side: %v, want ErrRejected and reminder.ErrInvalid", err)
	}
	if h, _ := j.HighestSeqNr(ctx, "T|a"); h != 0 {
		t.Fatal("events of a refused write were stored")
	}
}

// The one-round-trip way of a batch with sides stores nothing when its
// insert stores less than every row: a fenced journal whose lease expired
// in the database, or a write below its deletion mark, sets no side.
func TestSideOfARefusedWriteIsNotStored(t *testing.T) {
	pool := pg.Pool(t)
	ctx := context.Background()
	store := reminders.New(pool)
	node := liveLease(t, pool, 1)
	j := postgres.New(pool, postgres.Config{}, postgres.WithSideStore(store),
		postgres.WithFence(postgres.Fence{NodeID: node.Node, Incarnation: node.Incarnation}))
	t.Cleanup(func() { j.Close() })
	if err := j.WriteWithSide(ctx, []journal.Event{event("T|a", 1), event("T|a", 2)}, sideSet("a")); err != nil {
		t.Fatalf("fenced write with side while the lease is live: %v", err)
	}
	if !hasReminder(t, store, "a") {
		t.Fatal("the side of a fenced write stored while the lease is live is missing")
	}
	if err := j.DeleteTo(ctx, "T|a", 2); err != nil {
		t.Fatal(err)
	}
	// Below the deletion mark: a conflict, and no side.
	if err := j.WriteWithSide(ctx, []journal.Event{event("T|a", 2)}, sideSet("deleted")); !errors.Is(err, journal.ErrWriteConflict) {
		t.Fatalf("write below the deletion mark: %v, want a conflict", err)
	}
	if hasReminder(t, store, "deleted") {
		t.Fatal("the side of a write below its deletion mark was stored")
	}
	expire(t, pool, node)
	if err := j.WriteWithSide(ctx, []journal.Event{event("T|b", 1)}, sideSet("b")); !errors.Is(err, lease.ErrFenced) {
		t.Fatalf("write with side after the lease expired: %v, want ErrFenced", err)
	}
	if hasReminder(t, store, "b") {
		t.Fatal("the side of a fenced-off write was stored")
	}
}
