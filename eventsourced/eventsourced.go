// Package eventsourced runs entities whose state is the fold of their
// events: a command handler decides which events to persist, an event
// handler applies them, and recovery rebuilds the state from the latest
// snapshot plus the events after it.
//
// The command handler gets a CommandContext, whose methods build the
// effects (ctx.Persist, ctx.Reply, ctx.Stash, ctx.Stop, ...) so that no
// effect needs type arguments; a reply is eventsourced.To(replyTo, value),
// whose type is inferred. Effects are plain values: chaining returns a new
// effect, and a test can inspect one (Kind, Events, SideEffects).
//
// A behavior is built from a Config and runs on the entity runtime like any
// other. While it recovers or waits for a write, its mailbox is held: later
// commands wait there, in order, and are handled once the state is current.
// Writes are single-writer per persistence id: if another incarnation has
// written the same sequence number, the entity stops with an error matching
// ErrWriteConflict instead of interleaving its history with the other's.
//
// Recovery reads stored events as the codec's DecodeAll sees them today
// (docs/DESIGN.md, Schema evolution): an event stored under an alias of a
// manifest decodes to its type, and one with an upcaster is applied as the
// events it is upcast to, in order, each with the stored event's sequence
// number (none, when it is dropped). Sequence numbers keep counting stored
// events, so the entity writes on after the last stored one. A snapshot is
// one state: an alias or a one-to-one upcaster reads an old one.
package eventsourced

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/internal/runtime"
	"github.com/shoal-dev/shoal/journal"
	"github.com/shoal-dev/shoal/snapshot"
	"github.com/shoal-dev/shoal/timers/reminder"
)

// Separator joins the entity type and the entity id in a PersistenceID.
const Separator = "|"

// ErrInvalidPersistenceID is the stop reason of an entity whose persistence
// id is empty or whose entity id contains the Separator.
var ErrInvalidPersistenceID = errors.New("eventsourced: invalid persistence id")

// PersistenceID names one entity's event stream: "Type|id".
type PersistenceID struct {
	value string
	err   error
}

// NewPersistenceID joins typeName and entityID, rejecting ids that would
// make the joined form ambiguous.
func NewPersistenceID(typeName, entityID string) (PersistenceID, error) {
	switch {
	case typeName == "" || entityID == "":
		return PersistenceID{}, fmt.Errorf("%w: empty type %q or id %q", ErrInvalidPersistenceID, typeName, entityID)
	case strings.Contains(typeName, Separator), strings.Contains(entityID, Separator):
		return PersistenceID{}, fmt.Errorf("%w: %q or %q contains %q", ErrInvalidPersistenceID, typeName, entityID, Separator)
	}
	return PersistenceID{value: typeName + Separator + entityID}, nil
}

// PersistenceIDOf is NewPersistenceID for the entity type of key, in a form
// that fits a Config literal: an invalid id is reported when the entity
// starts, which then stops with ErrInvalidPersistenceID.
func PersistenceIDOf[C any](key entity.TypeKey[C], entityID string) PersistenceID {
	pid, err := NewPersistenceID(key.Name(), entityID)
	if err != nil {
		return PersistenceID{err: err}
	}
	return pid
}

// RawPersistenceID uses s as the persistence id as is, for streams not
// named Type|id (for example ones written by another system).
func RawPersistenceID(s string) PersistenceID {
	if s == "" {
		return PersistenceID{err: fmt.Errorf("%w: empty", ErrInvalidPersistenceID)}
	}
	return PersistenceID{value: s}
}

// String is the joined form, "Type|id"; empty for an invalid id.
func (p PersistenceID) String() string { return p.value }

// Err reports why the id is invalid; nil for a valid id.
func (p PersistenceID) Err() error {
	if p.err == nil && p.value == "" {
		return fmt.Errorf("%w: not set", ErrInvalidPersistenceID)
	}
	return p.err
}

// Context is the entity context of an event-sourced behavior.
type Context[C any] interface {
	entity.Context[C]
	PersistenceID() PersistenceID
	// LastSeqNr is the sequence number of the last event applied to the state.
	LastSeqNr() uint64
	// Recovering is true while the event handler replays stored events.
	Recovering() bool
}

// CommandContext is what a command handler gets: the entity's Context and
// the Effects for its events and state, so that building an effect needs no
// type arguments:
//
//	return ctx.Persist(Incremented{By: c.By}).ThenReply(eventsourced.To(c.ReplyTo, "ok"))
//
// Its Stop and Stash build effects; the entity-level calls of the same
// names are ctx.Context.Stop and ctx.Context.Stash. Because of them a
// CommandContext is not itself a Context: pass ctx.Context to a function
// that wants one.
//
// Effects act only when the handler returns them, whereas the Context's
// Passivate, Timers and PipeToSelf act at once. A handler that builds a
// Persist, Stash, Stop, UnstashAll or Reply effect and returns another
// (ctx.Stop(); return ctx.None()) is a bug the entity stops for, with a
// *DroppedEffectError.
type CommandContext[C, E, S any] struct {
	Context[C]
	Effects[E, S]
	track *effectTracker // nil in a CommandContext made outside an entity
}

// Config describes an event-sourced entity. C is its command type, E its
// event type and S its state.
type Config[C, E, S any] struct {
	PersistenceID PersistenceID
	// EmptyState is the state before the first event.
	EmptyState S
	// OnCommand decides what to do with a command in the current state.
	OnCommand func(ctx CommandContext[C, E, S], state S, cmd C) Effect[E, S]
	// OnEvent applies an event. It runs for new events and during replay,
	// with the same context, so timers it starts are restored by recovery.
	// In replay, the events a stored event was upcast to come one by one.
	OnEvent func(ctx Context[C], state S, event E) S
	// OnSignal, if set, observes lifecycle signals (RecoveryCompleted, ...).
	OnSignal func(ctx Context[C], state S, sig Signal)

	// Tagger, if set, returns the tags stored with each event.
	Tagger func(event E) []string
	// SnapshotWhen, if set, takes a snapshot after an event for which it is true.
	SnapshotWhen func(state S, event E, seqNr uint64) bool
	// Retention takes snapshots every N events and prunes old ones.
	Retention Retention

	// EnforcedReplies, like Akka's withEnforcedReplies, requires every
	// command that carries an entity.ReplyTo (a field of the command
	// struct, or of a struct it embeds) to end in an effect that decides
	// its reply: one that replies (Reply, ThenReply, ThenReplyFrom), says
	// it will not (NoReply, ThenNoReply: the reply comes later, from
	// another message), stashes the command or refuses it (Unhandled). A command that does not is
	// a bug in the handler. The effect still runs; the entity logs the
	// violation at Error, signals ReplyMissing with a *MissingReplyError,
	// and carries on, so production traffic is not lost to a missing
	// reply; the asker's Ask ends at its context's deadline. The testkit
	// (eventsourcedtest) fails the test at the command that broke it.
	EnforcedReplies bool

	// SnapshotIsOptional, like Akka's snapshot-is-optional, lets recovery
	// go on without the snapshot when the snapshot store fails to load it:
	// the entity signals SnapshotLoadFailed, logs a warning and replays
	// every event from the first. If events the snapshot covered were
	// deleted (Retention.DeleteEventsOnSnapshot), that would build a wrong
	// state, so recovery fails instead. A snapshot that loads but does not
	// decode still fails recovery: that is a schema problem, not an outage.
	// Default false: a failed load fails recovery (RecoveryFailed), so that
	// a long history is not replayed unnoticed.
	SnapshotIsOptional bool

	// Journal, Snapshots, Codec and Reminders default to the System's.
	// Reminder changes that go with events are written by the journal, in
	// their transaction (it must be a journal.SideWriter for reminders);
	// Reminders takes those of effects without events, and the
	// acknowledgements of deliveries handled without events.
	Journal   journal.Journal
	Snapshots snapshot.Store
	Codec     *codec.Registry
	Reminders reminder.Store
	// WriteTimeout bounds each journal write and snapshot save. Default 10s.
	WriteTimeout time.Duration
	// ReplayBatch is how many events recovery hands to the entity at once. Default 256.
	ReplayBatch int
}

// Retention is a count-based snapshot policy, and what to delete after each
// snapshot (whatever triggered it: the count or Config.SnapshotWhen).
type Retention struct {
	// SnapshotEvery takes a snapshot each time the sequence number passes a
	// multiple of it; 0 turns count-based snapshots off.
	SnapshotEvery uint64
	// KeepSnapshots is how many count-based snapshots to keep; older ones
	// are deleted after each new one: a snapshot at seqNr deletes those up
	// to seqNr − KeepSnapshots×SnapshotEvery. 0 keeps all. It needs
	// SnapshotEvery.
	KeepSnapshots uint64
	// DeleteEventsOnSnapshot deletes events after each snapshot, by Akka's
	// rule. With SnapshotEvery and KeepSnapshots, a snapshot at seqNr
	// deletes the events up to seqNr − KeepSnapshots×SnapshotEvery, the
	// sequence number of the newest snapshot just deleted: one interval
	// more than the oldest kept snapshot needs, so the events behind every
	// kept snapshot stay. Without KeepSnapshots nothing is deleted. Without
	// SnapshotEvery (snapshots only from SnapshotWhen), it deletes every
	// event the new snapshot covers, as Akka's snapshotWhen(predicate,
	// deleteEventsOnSnapshot = true) does.
	DeleteEventsOnSnapshot bool
}

// SnapshotEvery is Retention{SnapshotEvery: n, KeepSnapshots: keep}.
func SnapshotEvery(n, keep uint64) Retention {
	return Retention{SnapshotEvery: n, KeepSnapshots: keep}
}

// WithDeleteEventsOnSnapshot also deletes events no kept snapshot needs.
func (r Retention) WithDeleteEventsOnSnapshot() Retention {
	r.DeleteEventsOnSnapshot = true
	return r
}

// deleteUpTo is the highest sequence number no kept snapshot needs, after a
// snapshot at seqNr; 0 when nothing is to be deleted.
func (r Retention) deleteUpTo(seqNr uint64) uint64 {
	if r.SnapshotEvery == 0 || r.KeepSnapshots == 0 {
		return 0
	}
	keep := r.KeepSnapshots * r.SnapshotEvery
	if seqNr <= keep {
		return 0
	}
	return seqNr - keep
}

// deleteEventsUpTo is the highest sequence number of the events to delete
// after a snapshot at seqNr; 0 when none are.
func (r Retention) deleteEventsUpTo(seqNr uint64) uint64 {
	switch {
	case !r.DeleteEventsOnSnapshot:
		return 0
	case r.SnapshotEvery == 0:
		return seqNr
	}
	return r.deleteUpTo(seqNr)
}

// Signal is a lifecycle notification passed to Config.OnSignal.
type Signal interface{ isSignal() }

type (
	// RecoveryCompleted: the state is current; commands flow from now on.
	RecoveryCompleted struct{ SeqNr uint64 }
	// RecoveryFailed: the entity stops with Err.
	RecoveryFailed struct{ Err error }
	// SnapshotLoadFailed: with Config.SnapshotIsOptional, the snapshot
	// store failed to load the snapshot; recovery replays every event.
	SnapshotLoadFailed struct{ Err error }
	// SnapshotCompleted: a snapshot at SeqNr is stored.
	SnapshotCompleted struct{ SeqNr uint64 }
	// SnapshotFailed: saving the snapshot at SeqNr failed; the entity carries on.
	SnapshotFailed struct {
		SeqNr uint64
		Err   error
	}
	// PersistFailed: the journal could not store events; the entity stops
	// with Err, which matches ErrWriteConflict instead of ErrPersistFailed
	// when another incarnation had already written the sequence number.
	PersistFailed struct{ Err error }
	// PersistRejected: the events could not be encoded or were refused; the
	// entity stops with Err.
	PersistRejected struct{ Err error }
	// DeleteSnapshotsCompleted: retention deleted the snapshots up to UpTo.
	DeleteSnapshotsCompleted struct{ UpTo uint64 }
	// DeleteSnapshotsFailed: retention could not delete the snapshots up to
	// UpTo; the entity carries on, and the next snapshot tries again.
	DeleteSnapshotsFailed struct {
		UpTo uint64
		Err  error
	}
	// ReplyMissing: with Config.EnforcedReplies, a command that carries a
	// ReplyTo got an effect that does not decide its reply; Err is a
	// *MissingReplyError. The entity carries on.
	ReplyMissing struct{ Err error }
	// DeleteEventsCompleted: retention deleted the events up to UpTo.
	DeleteEventsCompleted struct{ UpTo uint64 }
	// DeleteEventsFailed: retention could not delete the events up to UpTo;
	// the entity carries on, and the next snapshot tries again.
	DeleteEventsFailed struct {
		UpTo uint64
		Err  error
	}
	// Stopped: the incarnation has stopped (its last signal), Err nil for
	// a normal stop (a stop effect, passivation, hand-off) and the cause
	// otherwise (a failed write, a forced stop).
	Stopped struct{ Err error }
)

func (RecoveryCompleted) isSignal()        {}
func (RecoveryFailed) isSignal()           {}
func (SnapshotLoadFailed) isSignal()       {}
func (SnapshotCompleted) isSignal()        {}
func (SnapshotFailed) isSignal()           {}
func (PersistFailed) isSignal()            {}
func (PersistRejected) isSignal()          {}
func (DeleteSnapshotsCompleted) isSignal() {}
func (DeleteSnapshotsFailed) isSignal()    {}
func (DeleteEventsCompleted) isSignal()    {}
func (DeleteEventsFailed) isSignal()       {}
func (ReplyMissing) isSignal()             {}
func (Stopped) isSignal()                  {}

var (
	// ErrPersistFailed matches the stop reason of an entity whose write
	// failed (the journal was unreachable, timed out, ...): restarting it
	// after a back-off is the remedy. A write conflict does not match it.
	// It is the runtime's, so that an ask it fails on another node matches
	// it too.
	ErrPersistFailed = runtime.ErrPersistFailed
	// ErrPersistRejected matches the stop reason of an entity whose events
	// could not be encoded or were refused by the journal.
	// It is the runtime's, as ErrPersistFailed is.
	ErrPersistRejected = runtime.ErrPersistRejected
	// ErrWriteConflict matches the stop reason of an entity that found
	// another incarnation's events at its next sequence number: two
	// incarnations are alive, and restarting this one would not help until
	// the other has stopped. It does not match ErrPersistFailed; errors.As
	// with *journal.WriteConflictError gives the sequence number.
	ErrWriteConflict = journal.ErrWriteConflict
	// ErrRecoveryFailed matches the stop reason of an entity that could not
	// rebuild its state.
	ErrRecoveryFailed = errors.New("eventsourced: recovery failed")
	// ErrSnapshotRequired matches the stop reason of an entity whose
	// snapshot did not load (Config.SnapshotIsOptional) while the events it
	// covered were deleted.
	ErrSnapshotRequired = errors.New("eventsourced: snapshot required: the events it covers were deleted")
	// ErrNoJournal is the stop reason when neither Config nor System has a journal.
	ErrNoJournal = errors.New("eventsourced: no journal configured")
)

// PersistError is why an entity stopped after a failed write. It matches
// exactly one of ErrPersistFailed, ErrPersistRejected and ErrWriteConflict
// (its Kind), and the journal's error.
type PersistError struct {
	PersistenceID string // the entity's event stream
	SeqNr         uint64 // first sequence number of the failed write
	Kind          error  // ErrPersistFailed, ErrPersistRejected or ErrWriteConflict
	Err           error  // the journal's or the codec's error
}

// Error implements error.
func (e *PersistError) Error() string {
	return fmt.Sprintf("%v: %s at seq %d: %v", e.Kind, e.PersistenceID, e.SeqNr, e.Err)
}

// Unwrap gives Kind and Err, so the error matches both.
func (e *PersistError) Unwrap() []error { return []error{e.Kind, e.Err} }

// RecoveryError is why an entity could not recover: which stored event (or
// snapshot) could not be read or applied. It matches ErrRecoveryFailed,
// runtime.ErrUnavailable and the cause (codec.ErrUnknownManifest for an
// event of an unknown type). It matches runtime.ErrUnavailable so that the
// asks left in the stopped entity's mailbox fail at once as unavailable
// (a 503 to an HTTP caller, who may come back), not as a plain stop: while
// the journal is unreachable no incarnation can answer (docs/DESIGN.md,
// Cluster and leases).
type RecoveryError struct {
	PersistenceID string // the entity's event stream
	SeqNr         uint64 // 0 when the failure was not at a specific event
	Err           error  // the cause
}

// Error implements error.
func (e *RecoveryError) Error() string {
	if e.SeqNr == 0 {
		return fmt.Sprintf("eventsourced: recovery of %s failed: %v", e.PersistenceID, e.Err)
	}
	return fmt.Sprintf("eventsourced: recovery of %s failed at seq %d: %v", e.PersistenceID, e.SeqNr, e.Err)
}

// Unwrap gives ErrRecoveryFailed, runtime.ErrUnavailable and the cause, so
// the error matches all three.
func (e *RecoveryError) Unwrap() []error {
	return []error{ErrRecoveryFailed, runtime.ErrUnavailable, e.Err}
}
