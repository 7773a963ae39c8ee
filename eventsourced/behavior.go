package eventsourced

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"reflect"
	"runtime/debug"
	"time"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/eventsourced/internal/observe"
	"github.com/shoal-dev/shoal/internal/runtime"
	"github.com/shoal-dev/shoal/journal"
	"github.com/shoal-dev/shoal/snapshot"
	"github.com/shoal-dev/shoal/timers/reminder"
)

// New returns the behavior described by cfg. Recovery starts when the
// entity starts; commands wait until it has completed.
func New[C, E, S any](cfg Config[C, E, S]) entity.Behavior[C] {
	b := &behavior[C, E, S]{cfg: cfg, state: cfg.EmptyState}
	return entity.Setup(func(ec entity.Context[C]) entity.Behavior[C] {
		b.start(ec)
		return b
	})
}

// behavior is one incarnation's event-sourced state machine. It is a single
// allocation kept small, because an idle entity is mostly this struct: the
// Config holds the resolved stores, the context is a view of the behavior
// itself (esContext), and what only recovery needs is dropped once it ends.
type behavior[C, E, S any] struct {
	entity.Context[C] // the cell; promoted for esContext
	cfg               Config[C, E, S]
	state             S
	seqNr             uint64
	recovering        bool
	// track checks that the command handler returns the effect it built;
	// it fits in the padding after recovering.
	track effectTracker
	// writerID names this incarnation in the events it writes; set at its first write.
	writerID string
	// cancelRecovery ends a running recovery when the entity stops; nil after it.
	cancelRecovery context.CancelFunc
	// diag is what a testkit watches; nil until it is needed.
	diag *diagnostics
}

// diagnostics is the part of a behavior only tests and misbehaving
// handlers need, kept out of line so an idle entity does not pay for it.
type diagnostics struct {
	// missing holds the first EnforcedReplies violations until a testkit
	// takes them.
	missing  []error
	observer observe.Observer
}

func (b *behavior[C, E, S]) diagnostics() *diagnostics {
	if b.diag == nil {
		b.diag = &diagnostics{}
	}
	return b.diag
}

// Observe installs o; nil removes it. For a testkit: call it on the
// entity's goroutine.
func (b *behavior[C, E, S]) Observe(o observe.Observer) { b.diagnostics().observer = o }

// esContext is the behavior seen as the Context its handlers get: the
// same memory, so handing it out allocates nothing.
type esContext[C, E, S any] behavior[C, E, S]

func (c *esContext[C, E, S]) PersistenceID() PersistenceID { return c.cfg.PersistenceID }
func (c *esContext[C, E, S]) LastSeqNr() uint64            { return c.seqNr }
func (c *esContext[C, E, S]) Recovering() bool             { return c.recovering }

// ctx is the Context passed to the handlers.
func (b *behavior[C, E, S]) ctx() *esContext[C, E, S] { return (*esContext[C, E, S])(b) }

// cell is the runtime side of the context: the hooks that hold the
// mailbox while the behavior waits for IO and run IO completions on the
// entity's goroutine are functions of the runtime on it.
func (b *behavior[C, E, S]) cell() *runtime.Cell[C] { return b.Context.(*runtime.Cell[C]) }

// pid is the persistence id as stored.
func (b *behavior[C, E, S]) pid() string { return b.cfg.PersistenceID.value }

// State is the current state; for tests, on the entity's goroutine or after it stopped.
func (b *behavior[C, E, S]) State() S { return b.state }

// LastSeqNr is the sequence number of the last applied event; as State.
func (b *behavior[C, E, S]) LastSeqNr() uint64 { return b.seqNr }

func (b *behavior[C, E, S]) start(ec entity.Context[C]) {
	cl, ok := ec.(*runtime.Cell[C])
	if !ok {
		panic(fmt.Sprintf("eventsourced: context %T does not come from the entity runtime", ec))
	}
	sys := ec.System()
	b.Context = ec
	b.recovering = true
	b.cfg.Journal = firstNonNil(b.cfg.Journal, sys.Journal())
	b.cfg.Snapshots = firstNonNil(b.cfg.Snapshots, sys.Snapshots())
	if b.cfg.Codec == nil {
		b.cfg.Codec = sys.Codec()
	}
	if b.cfg.WriteTimeout <= 0 {
		b.cfg.WriteTimeout = 10 * time.Second
	}
	if b.cfg.ReplayBatch <= 0 {
		b.cfg.ReplayBatch = 256
	}
	switch {
	case b.cfg.PersistenceID.Err() != nil:
		b.failRecovery(b.cfg.PersistenceID.Err())
		return
	case b.cfg.Journal == nil:
		b.failRecovery(ErrNoJournal)
		return
	case b.cfg.Codec == nil:
		b.failRecovery(fmt.Errorf("eventsourced: no codec configured"))
		return
	}
	if b.recoverImmediately() {
		return
	}
	runtime.Suspend(cl)
	// Cancelled by PostStop, so a recovery whose entity stopped ends
	// without a goroutine of its own watching for it.
	ctx, cancel := context.WithCancel(context.Background())
	b.cancelRecovery = cancel
	runtime.StartRecovery(sys, b.pid(), func() { b.recover(ctx) })
}

// OnSignal implements entity.SignalHandler: a stop ends a running recovery.
// The user's OnSignal then sees Stopped.
func (b *behavior[C, E, S]) OnSignal(_ entity.Context[C], sig entity.Signal) {
	stop, ok := sig.(entity.PostStop)
	if !ok {
		return
	}
	if b.cancelRecovery != nil {
		b.cancelRecovery()
		b.cancelRecovery = nil
	}
	b.signal(Stopped{Err: stop.Err})
}

func firstNonNil[T comparable](a, b T) T {
	var zero T
	if a != zero {
		return a
	}
	return b
}

func newWriterID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// onEntity runs fn on the entity's goroutine and waits for it. It reports
// false if the entity stopped first (PostStop cancels ctx).
func (b *behavior[C, E, S]) onEntity(ctx context.Context, fn func()) bool {
	done := make(chan struct{})
	if !runtime.Post(b.cell(), func() { fn(); close(done) }) {
		return false
	}
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}

// replayed is one event to apply in recovery. A stored event upcast to
// several (docs/DESIGN.md, Schema evolution) gives several, all with its
// seq nr; one upcast to none gives one that is dropped, so that LastSeqNr
// still counts it.
type replayed[E any] struct {
	event   E
	seqNr   uint64
	dropped bool
}

// recover runs on a recovery goroutine (System.StartRecovery): it reads the
// snapshot and the events after it, decoding off the entity, and hands them
// over a page at a time so a long history is never held in memory at once.
// ctx ends when the entity stops.
func (b *behavior[C, E, S]) recover(ctx context.Context) {
	if ctx.Err() != nil {
		return // stopped while waiting its turn
	}

	var from uint64 = 1
	withoutSnapshot := false // the snapshot store failed: the events must start at 1
	if b.cfg.Snapshots != nil {
		snap, ok, err := b.cfg.Snapshots.Load(ctx, b.pid(), snapshot.Latest())
		switch {
		case err != nil && b.cfg.SnapshotIsOptional:
			withoutSnapshot = true
			if !b.onEntity(ctx, func() {
				b.Log().Warn("snapshot load failed; recovering from the events alone", "persistence_id", b.pid(), "err", err)
				b.signal(SnapshotLoadFailed{Err: err})
			}) {
				return
			}
		case err != nil:
			b.onEntity(ctx, func() {
				b.failRecovery(&RecoveryError{PersistenceID: b.pid(), Err: fmt.Errorf("load snapshot: %w", err)})
			})
			return
		}
		if ok && !withoutSnapshot {
			// A state is one value: its manifest may be an alias or have a
			// one-to-one upcaster, never one that splits (codec.ErrNotOneValue).
			state, err := codec.DecodeAs[S](b.cfg.Codec, snap.Manifest, snap.Payload)
			if err != nil {
				b.onEntity(ctx, func() {
					b.failRecovery(&RecoveryError{PersistenceID: b.pid(), SeqNr: snap.SeqNr, Err: fmt.Errorf("decode snapshot: %w", err)})
				})
				return
			}
			if !b.onEntity(ctx, func() { b.state, b.seqNr = state, snap.SeqNr }) {
				return
			}
			from = snap.SeqNr + 1
		}
	}

	// The page grows with the replay up to ReplayBatch: most entities have
	// a short history, and a page allocated whole cost each recovery
	// ReplayBatch events' worth of zeroed memory.
	var page []replayed[E]
	flush := func() error {
		failed := false
		ok := b.onEntity(ctx, func() { failed = !b.applyReplayed(page) })
		page = page[:0]
		if !ok || failed {
			return errAbandoned
		}
		return nil
	}
	err := b.cfg.Journal.Replay(ctx, b.pid(), from, math.MaxUint64, func(ev journal.Event) error {
		if withoutSnapshot {
			if ev.SeqNr != 1 {
				return b.deletedBehindSnapshot(ev.SeqNr - 1)
			}
			withoutSnapshot = false
		}
		var err error
		if page, err = b.decode(page, ev); err != nil {
			return err
		}
		if len(page) >= b.cfg.ReplayBatch { // an upcast may add several
			return flush()
		}
		return nil
	})
	replayed := err == nil
	var highest uint64
	if replayed {
		highest, err = b.cfg.Journal.HighestSeqNr(ctx, b.pid())
		if err == nil && withoutSnapshot && highest > 0 {
			err = b.deletedBehindSnapshot(highest) // no event left to replay
		}
	}
	if err != nil {
		if ctx.Err() != nil || errors.Is(err, errAbandoned) {
			return // the entity stopped, or recovery failed on the entity
		}
		if _, ok := errors.AsType[*RecoveryError](err); !ok {
			err = &RecoveryError{PersistenceID: b.pid(), Err: err}
		}
		b.onEntity(ctx, func() {
			if !replayed || b.applyReplayed(page) {
				b.failRecovery(err)
			}
		})
		return
	}
	// The last page and the end of recovery in one trip to the entity.
	b.onEntity(ctx, func() {
		if b.applyReplayed(page) {
			b.completeRecovery(highest)
		}
	})
}

// recoverImmediately recovers on the entity's goroutine, as it starts,
// when the journal reads without IO (journal.ImmediateReader), no snapshot
// store is configured, and the history fits one page: no reader goroutine,
// no turn among MaxConcurrentRecoveries, no hand-over. A longer history
// goes to a reader, so that no entity holds a worker for long. It reports
// whether it recovered, or failed the recovery.
func (b *behavior[C, E, S]) recoverImmediately() bool {
	j, ok := b.cfg.Journal.(journal.ImmediateReader)
	if !ok || b.cfg.Snapshots != nil {
		return false
	}
	ctx := context.Background()
	highest, err := j.HighestSeqNr(ctx, b.pid())
	if err != nil || highest > uint64(b.cfg.ReplayBatch) {
		return false // the reader retries, and reports what fails
	}
	var page []replayed[E]
	err = j.Replay(ctx, b.pid(), 1, math.MaxUint64, func(ev journal.Event) (err error) {
		page, err = b.decode(page, ev)
		return err
	})
	switch {
	case err != nil:
		if _, ok := errors.AsType[*RecoveryError](err); !ok {
			err = &RecoveryError{PersistenceID: b.pid(), Err: err}
		}
		b.failRecovery(err)
	case b.applyReplayed(page):
		b.completeRecovery(highest)
	}
	return true
}

// decode appends what a stored event replays as to page: through
// codec.DecodeAll's rules, one event, or several or none when an upcaster
// split or dropped it. An event that does not decode, or decodes to
// something that is not an E, fails the recovery, naming it; page is then
// unchanged.
func (b *behavior[C, E, S]) decode(page []replayed[E], ev journal.Event) ([]replayed[E], error) {
	var one [1]any // the usual case decodes into it, on the stack
	vs, err := b.cfg.Codec.AppendDecoded(one[:0], ev.Manifest, ev.Payload)
	if err != nil {
		return page, &RecoveryError{PersistenceID: b.pid(), SeqNr: ev.SeqNr, Err: err}
	}
	if len(vs) == 0 {
		return append(page, replayed[E]{seqNr: ev.SeqNr, dropped: true}), nil
	}
	n := len(page)
	for _, v := range vs {
		e, ok := v.(E)
		if !ok {
			err := fmt.Errorf("%w: manifest %q holds %T, want %v", codec.ErrTypeMismatch, ev.Manifest, v, reflect.TypeFor[E]())
			return page[:n], &RecoveryError{PersistenceID: b.pid(), SeqNr: ev.SeqNr, Err: err}
		}
		page = append(page, replayed[E]{event: e, seqNr: ev.SeqNr})
	}
	return page, nil
}

// deletedBehindSnapshot is the recovery error of an entity that recovers
// without its snapshot (Config.SnapshotIsOptional) and finds the events up
// to upTo deleted: replaying the rest would build a wrong state.
func (b *behavior[C, E, S]) deletedBehindSnapshot(upTo uint64) error {
	return &RecoveryError{PersistenceID: b.pid(), Err: fmt.Errorf("the snapshot did not load and the events up to %d were deleted: %w", upTo, ErrSnapshotRequired)}
}

// errAbandoned ends a replay whose failure the entity has already handled.
var errAbandoned = errors.New("eventsourced: replay abandoned")

// applyReplayed runs the event handler over a page of replayed events, on the
// entity's goroutine. A panic in the handler fails the recovery, naming the
// event, like an event that cannot be decoded: RecoveryFailed is signalled
// and the entity stops with a RecoveryError wrapping the *entity.PanicError.
func (b *behavior[C, E, S]) applyReplayed(page []replayed[E]) (ok bool) {
	var at uint64
	defer func() {
		if v := recover(); v != nil {
			perr := &entity.PanicError{Value: v, Stack: debug.Stack()}
			b.failRecovery(&RecoveryError{PersistenceID: b.pid(), SeqNr: at, Err: perr})
			ok = false
		}
	}()
	for _, r := range page {
		at = r.seqNr
		if !r.dropped {
			b.state = b.cfg.OnEvent(b.ctx(), b.state, r.event)
		}
		b.seqNr = r.seqNr
	}
	return true
}

func (b *behavior[C, E, S]) completeRecovery(highest uint64) {
	b.seqNr = max(b.seqNr, highest)
	b.recovering = false
	if b.cancelRecovery != nil { // nil when it recovered immediately
		b.cancelRecovery()
		b.cancelRecovery = nil
	}
	b.signal(RecoveryCompleted{SeqNr: b.seqNr})
	runtime.Resume(b.cell())
}

func (b *behavior[C, E, S]) failRecovery(err error) {
	b.Log().Error("recovery failed; stopping", "persistence_id", b.pid(), "err", err)
	b.signal(RecoveryFailed{Err: err})
	runtime.Fail(b.cell(), err)
}

func (b *behavior[C, E, S]) signal(sig Signal) {
	if b.cfg.OnSignal != nil {
		b.cfg.OnSignal(b.ctx(), b.state, sig)
	}
}

// Receive implements entity.Behavior.
func (b *behavior[C, E, S]) Receive(_ entity.Context[C], cmd C) entity.Behavior[C] {
	if b.diag != nil && b.diag.observer != nil {
		b.diag.observer.Handling(cmd)
	}
	b.track.start = b.track.built
	eff := b.cfg.OnCommand(CommandContext[C, E, S]{Context: b.ctx(), track: &b.track}, b.state, cmd)
	if built, dropped := b.track.dropped(eff.origin); dropped {
		b.dropEffect(cmd, built, eff.kind)
		return entity.Same[C]()
	}
	if b.cfg.EnforcedReplies && !eff.DecidesReply() && carriesReplyTo(cmd) {
		b.missingReply(cmd, eff)
	}
	batch, err := b.reminderBatch(cmd, eff)
	if err != nil {
		b.rejectPersist(cmd, b.seqNr+1, err)
		return entity.Same[C]()
	}
	switch eff.kind {
	case EffectPersist:
		b.persist(cmd, eff, batch)
		return entity.Same[C]()
	case EffectStash:
		if err := b.Context.Stash().Stash(cmd); err != nil {
			b.Log().Error("stash full; stopping", "err", err)
			runtime.Fail(b.cell(), fmt.Errorf("eventsourced: %s: %w", b.pid(), err))
			return entity.Same[C]()
		}
	}
	if batch.Empty() {
		b.runSideEffects(eff.then)
	} else {
		b.applyReminders(cmd, batch, func() { b.runSideEffects(eff.then) })
	}
	if eff.kind == EffectUnhandled {
		return entity.Unhandled[C]()
	}
	return entity.Same[C]()
}

// dropEffect stops the entity for a handler that built an effect and
// returned another: which of the two it meant is anyone's guess.
func (b *behavior[C, E, S]) dropEffect(cmd C, built builder, returned EffectKind) {
	err := &DroppedEffectError{PersistenceID: b.pid(), Command: fmt.Sprintf("%T", cmd), Built: built.String(), Returned: returned}
	b.Log().Error("command handler dropped an effect; stopping", "err", err)
	runtime.FailAsks(b.System(), cmd, err)
	runtime.Fail(b.cell(), err)
}

// missingReply reports a command whose effect broke Config.EnforcedReplies.
func (b *behavior[C, E, S]) missingReply(cmd C, eff Effect[E, S]) {
	err := &MissingReplyError{PersistenceID: b.pid(), Command: fmt.Sprintf("%T", cmd), Effect: eff.kind}
	b.Log().Error("command carries a ReplyTo but its effect neither replies nor says NoReply", "err", err)
	if d := b.diagnostics(); len(d.missing) < maxMissingReplies { // bounded: nobody takes them in production
		d.missing = append(d.missing, err)
	}
	b.signal(ReplyMissing{Err: err})
}

// maxMissingReplies bounds the violations kept for TakeMissingReplies.
const maxMissingReplies = 8

// TakeMissingReplies returns and forgets the EnforcedReplies violations
// seen so far, for a testkit (eventsourcedtest reports them per command).
// Call it on the entity's goroutine or after it stopped.
func (b *behavior[C, E, S]) TakeMissingReplies() []error {
	if b.diag == nil {
		return nil
	}
	m := b.diag.missing
	b.diag.missing = nil
	return m
}

// persist writes eff's events for cmd; cmd is kept until the outcome, so
// that a failed write fails its asks at once.
func (b *behavior[C, E, S]) persist(cmd C, eff Effect[E, S], side reminder.Batch) {
	first := b.seqNr + 1
	now := b.Clock().Now()
	if b.writerID == "" {
		b.writerID = newWriterID()
	}
	batch := make([]journal.Event, len(eff.events))
	for i, e := range eff.events {
		manifest, payload, err := b.cfg.Codec.Encode(e)
		if err != nil {
			b.rejectPersist(cmd, first, err)
			return
		}
		ev := journal.Event{
			PersistenceID: b.pid(),
			SeqNr:         first + uint64(i),
			Manifest:      manifest,
			Payload:       payload,
			WriterID:      b.writerID,
			Timestamp:     now,
		}
		if b.cfg.Tagger != nil {
			ev.Tags = b.cfg.Tagger(e)
		}
		batch[i] = ev
	}
	if b.diag != nil && b.diag.observer != nil {
		b.diag.observer.Persisting(first, first+uint64(len(batch))-1)
	}
	if !side.Empty() {
		sw, ok := b.cfg.Journal.(journal.SideWriter)
		if !ok || sw.SideStore() != reminder.SideStoreName {
			b.rejectPersist(cmd, first, ErrNoReminderStore)
			return
		}
		runtime.Suspend(b.cell())
		sw.WriteAsyncWithSide(batch, side, func(err error) { runtime.Post(b.cell(), func() { b.persisted(cmd, eff, first, err) }) })
		return
	}
	runtime.Suspend(b.cell())
	if aw, ok := b.cfg.Journal.(journal.AsyncWriter); ok {
		aw.WriteAsync(batch, func(err error) { runtime.Post(b.cell(), func() { b.persisted(cmd, eff, first, err) }) })
		return
	}
	j, timeout := b.cfg.Journal, b.cfg.WriteTimeout
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		err := j.Write(ctx, batch)
		cancel()
		runtime.Post(b.cell(), func() { b.persisted(cmd, eff, first, err) })
	}()
}

func (b *behavior[C, E, S]) rejectPersist(cmd C, first uint64, err error) {
	perr := &PersistError{PersistenceID: b.pid(), SeqNr: first, Kind: ErrPersistRejected, Err: err}
	b.Log().Error("events rejected; stopping", "err", perr)
	b.signal(PersistRejected{Err: perr})
	b.failCommand(cmd, perr)
}

// failCommand stops the entity with err, and fails at once the asks that
// cmd, whose events were not stored, carries: no answer will come for it.
func (b *behavior[C, E, S]) failCommand(cmd C, err *PersistError) {
	runtime.FailAsks(b.System(), cmd, fmt.Errorf("eventsourced: command not handled: %w", err))
	runtime.Fail(b.cell(), err)
}

func (b *behavior[C, E, S]) persisted(cmd C, eff Effect[E, S], first uint64, err error) {
	if err != nil {
		if errors.Is(err, journal.ErrRejected) {
			b.rejectPersist(cmd, first, err)
			return
		}
		kind, msg := ErrPersistFailed, "persist failed; stopping"
		if errors.Is(err, journal.ErrWriteConflict) {
			// Another incarnation holds this sequence number: not an
			// outage to retry through, but a second writer to stop for.
			kind, msg = ErrWriteConflict, "write conflict: another incarnation wrote this entity's next event; stopping"
		}
		perr := &PersistError{PersistenceID: b.pid(), SeqNr: first, Kind: kind, Err: err}
		b.Log().Error(msg, "err", perr)
		b.signal(PersistFailed{Err: perr})
		b.failCommand(cmd, perr)
		return
	}
	snapshotDue := false
	for i, e := range eff.events {
		seqNr := first + uint64(i)
		b.state = b.cfg.OnEvent(b.ctx(), b.state, e)
		b.seqNr = seqNr
		if every := b.cfg.Retention.SnapshotEvery; every > 0 && seqNr%every == 0 {
			snapshotDue = true
		}
		if b.cfg.SnapshotWhen != nil && b.cfg.SnapshotWhen(b.state, e, seqNr) {
			snapshotDue = true
		}
	}
	runtime.Resume(b.cell())
	b.runSideEffects(eff.then)
	if snapshotDue {
		b.saveSnapshot()
	}
}

func (b *behavior[C, E, S]) runSideEffects(then []sideEffect[S]) {
	stop := false
	for _, s := range then {
		switch s.kind {
		case SideRun:
			s.run(b.state)
		case SideReply:
			if a := s.reply(b.state); a.send != nil {
				a.send(b.ctx())
			}
		case SideUnstashAll:
			b.Context.Stash().UnstashAll()
		case SideStop:
			stop = true
		}
	}
	if stop {
		b.Context.Stop()
	}
}

// saveSnapshot stores the current state without holding the mailbox, then
// applies retention.
func (b *behavior[C, E, S]) saveSnapshot() {
	seqNr := b.seqNr
	if b.cfg.Snapshots == nil {
		b.signal(SnapshotFailed{SeqNr: seqNr, Err: fmt.Errorf("eventsourced: no snapshot store configured")})
		return
	}
	manifest, payload, err := b.cfg.Codec.Encode(b.state)
	if err != nil {
		b.signal(SnapshotFailed{SeqNr: seqNr, Err: err})
		return
	}
	snap := snapshot.Snapshot{PersistenceID: b.pid(), SeqNr: seqNr, Timestamp: b.Clock().Now(), Manifest: manifest, Payload: payload}
	upTo := b.cfg.Retention.deleteUpTo(seqNr)
	eventsUpTo := b.cfg.Retention.deleteEventsUpTo(seqNr)
	store, j, timeout, pid := b.cfg.Snapshots, b.cfg.Journal, b.cfg.WriteTimeout, b.pid()
	// In order per persistence id, across incarnations: see RunInOrder.
	runtime.RunInOrder(b.System(), pid, func() {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		if err := store.Save(ctx, snap); err != nil {
			runtime.Post(b.cell(), func() { b.signal(SnapshotFailed{SeqNr: seqNr, Err: err}) })
			return
		}
		runtime.Post(b.cell(), func() { b.signal(SnapshotCompleted{SeqNr: seqNr}) })
		if upTo > 0 {
			if err := store.Delete(ctx, pid, snapshot.UpTo(upTo)); err != nil {
				runtime.Post(b.cell(), func() { b.signal(DeleteSnapshotsFailed{UpTo: upTo, Err: err}) })
			} else {
				runtime.Post(b.cell(), func() { b.signal(DeleteSnapshotsCompleted{UpTo: upTo}) })
			}
		}
		if eventsUpTo == 0 {
			return
		}
		if err := j.DeleteTo(ctx, pid, eventsUpTo); err != nil {
			runtime.Post(b.cell(), func() { b.signal(DeleteEventsFailed{UpTo: eventsUpTo, Err: err}) })
		} else {
			runtime.Post(b.cell(), func() { b.signal(DeleteEventsCompleted{UpTo: eventsUpTo}) })
		}
	})
}
