package memory_test

import (
	"context"
	"errors"
	"testing"

	"github.com/shoal-dev/shoal/journal"
	"github.com/shoal-dev/shoal/journal/memory"
	"github.com/shoal-dev/shoal/timers/reminder"
	reminders "github.com/shoal-dev/shoal/timers/reminder/memory"
)

func sideSet(id string) reminder.Batch {
	return reminder.Batch{Changes: []reminder.Change{{
		Key:     reminder.Key{EntityType: "T", EntityID: id, Name: "r"},
		ShardID: "1", Manifest: "cmd", Generation: reminder.NewGeneration(),
	}}}
}

func ev(pid string, seq uint64) journal.Event {
	return journal.Event{PersistenceID: pid, SeqNr: seq, Manifest: "m"}
}

// The memory journal gives its side store the atomicity of the Postgres
// one: a side goes in with its events or not at all.
func TestSideCommitsWithItsEvents(t *testing.T) {
	store := reminders.New()
	j := memory.New(memory.WithSideStore(store))
	ctx := context.Background()
	has := func(id string) bool {
		_, ok, _ := store.Get(ctx, reminder.Key{EntityType: "T", EntityID: id, Name: "r"})
		return ok
	}
	if err := j.WriteWithSide(ctx, []journal.Event{ev("T|a", 1)}, sideSet("a")); err != nil || !has("a") {
		t.Fatalf("write with side: %v, side stored %v", err, has("a"))
	}
	if err := j.WriteWithSide(ctx, []journal.Event{ev("T|a", 1)}, sideSet("b")); !errors.Is(err, journal.ErrWriteConflict) || has("b") {
		t.Fatalf("conflicting write: %v, its side stored %v; want a conflict and no side", err, has("b"))
	}
	bad := sideSet("c")
	bad.Changes[0].ShardID = ""
	if err := j.WriteWithSide(ctx, []journal.Event{ev("T|c", 1)}, bad); !errors.Is(err, journal.ErrRejected) {
		t.Fatalf("ill-formed side: %v, want ErrRejected", err)
	}
	if h, _ := j.HighestSeqNr(ctx, "T|c"); h != 0 {
		t.Fatal("the events of a write whose side was refused were stored")
	}
	if err := memory.New().WriteWithSide(ctx, []journal.Event{ev("T|d", 1)}, sideSet("d")); !errors.Is(err, journal.ErrRejected) {
		t.Fatalf("side without a side store: %v, want ErrRejected", err)
	}
}
