// Package journal defines the event journal: an append-only log per
// persistence id, with atomic batch writes, ordered replay, the highest
// sequence number, and deletion of a prefix; and its read side (Queries):
// events by slice range and by tag, in commit order, without gaps.
//
// Implementations live in subpackages (memory, postgres); journaltest holds
// the conformance suite every implementation passes.
package journal

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Event is one stored event: the payload as the codec produced it plus the
// bookkeeping the journal needs.
type Event struct {
	PersistenceID string
	SeqNr         uint64
	Manifest      string
	Payload       []byte
	Tags          []string
	// WriterID identifies the entity incarnation that wrote the event.
	WriterID string
	// Timestamp is the writer's clock at persist time.
	Timestamp time.Time
	// Ordering is a journal-wide position assigned on write; replay fills it in.
	Ordering int64
}

// Journal is the event log. Implementations are safe for concurrent use.
type Journal interface {
	// Write stores events atomically: all of them or none. They belong to
	// one persistence id and carry consecutive sequence numbers. If any
	// (persistence id, seq nr) already exists the whole write fails with an
	// error matching ErrWriteConflict. An ill-formed batch fails with an
	// error matching ErrRejected.
	Write(ctx context.Context, events []Event) error

	// Replay calls fn, in sequence order, for each stored event of pid with
	// from <= SeqNr <= to. An error from fn stops the replay and is returned.
	// Implementations stream: they never hold the whole range in memory.
	Replay(ctx context.Context, pid string, from, to uint64, fn func(Event) error) error

	// HighestSeqNr is the highest sequence number ever written for pid, even
	// if those events were deleted since; 0 if none.
	HighestSeqNr(ctx context.Context, pid string) (uint64, error)

	// DeleteTo removes pid's events with SeqNr <= to. HighestSeqNr is unaffected.
	DeleteTo(ctx context.Context, pid string, to uint64) error
}

// AsyncWriter is an optional extension of Journal for implementations that
// can report a write's outcome through a callback instead of holding the
// caller's goroutine, such as the memory journal, which completes inline.
// done is called exactly once, possibly before WriteAsync returns, with the
// error Write would have returned. Implementations bound the write's
// duration themselves.
type AsyncWriter interface {
	WriteAsync(events []Event, done func(error))
}

// ImmediateReader is an optional extension of Journal for implementations
// whose Replay and HighestSeqNr never wait on IO, such as the memory
// journal. An entity whose history is short replays one on its own
// goroutine as it starts, without a reader goroutine or a hand-over.
type ImmediateReader interface {
	Journal
	// ReadsImmediately marks the implementation; it does nothing.
	ReadsImmediately()
}

// Side is a change to another store that a write carries, committed with
// the write's events or not at all: an effect's reminder changes
// (docs/DESIGN.md, "Durable reminders"). The journal does not interpret it;
// it hands it to the side store it was built with, which SideStore names.
type Side interface {
	SideStore() string
}

// SideWriter is an optional extension of Journal for implementations built
// with a side store (journal/memory.WithSideStore,
// journal/postgres.WithSideStore): WriteWithSide is Write whose events and
// side go in in one transaction, all or nothing. A side for another store
// than SideStore's, or a journal without one, fails with an error matching
// ErrRejected, and nothing is stored.
type SideWriter interface {
	WriteWithSide(ctx context.Context, events []Event, side Side) error
	// WriteAsyncWithSide is AsyncWriter's WriteAsync with a side.
	WriteAsyncWithSide(events []Event, side Side, done func(error))
	// SideStore names the side store; "" when the journal has none.
	SideStore() string
}

// ErrWriteConflict means another writer already stored an event at one of the
// sequence numbers: two incarnations of one entity are alive.
var ErrWriteConflict = errors.New("journal: write conflict")

// ErrRejected means the journal refused a batch as ill-formed; retrying it
// unchanged cannot succeed.
var ErrRejected = errors.New("journal: write rejected")

// WriteConflictError names the sequence number another writer already holds.
type WriteConflictError struct {
	PersistenceID string
	SeqNr         uint64
}

func (e *WriteConflictError) Error() string {
	return fmt.Sprintf("journal: write conflict on %s seq %d", e.PersistenceID, e.SeqNr)
}

func (e *WriteConflictError) Unwrap() error { return ErrWriteConflict }

// Validate checks the shape Write requires: non-empty, one persistence id,
// consecutive sequence numbers starting above zero.
func Validate(events []Event) error {
	if len(events) == 0 {
		return fmt.Errorf("%w: empty batch", ErrRejected)
	}
	pid := events[0].PersistenceID
	if pid == "" {
		return fmt.Errorf("%w: empty persistence id", ErrRejected)
	}
	if events[0].SeqNr == 0 {
		return fmt.Errorf("%w: %s: sequence numbers start at 1", ErrRejected, pid)
	}
	for i, e := range events {
		if e.PersistenceID != pid {
			return fmt.Errorf("%w: batch mixes %s and %s", ErrRejected, pid, e.PersistenceID)
		}
		if e.SeqNr != events[0].SeqNr+uint64(i) {
			return fmt.Errorf("%w: %s: seq %d follows %d", ErrRejected, pid, e.SeqNr, events[0].SeqNr+uint64(i)-1)
		}
	}
	return nil
}
