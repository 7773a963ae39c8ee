// Package eventsourcedtest runs one event-sourced entity in a test: send a
// command, get back the events it persisted, its new state and its reply;
// stop it and start it again to check recovery; inject journal and
// snapshot-store faults and journal latency.
//
// New takes the entity's Create function, so its type arguments are
// spelled out (New[C, E, S]); NewFromConfig takes the function that builds
// the entity's eventsourced.Config instead and infers them.
//
// Every write is reported for the message that caused it: a command's
// Result holds the events that command persisted, and Others the events
// that other messages (a timer, a piped result, an unstashed command)
// persisted meanwhile, each with its cause; History has them all.
//
// The kit stops its entity when the test ends (a Cleanup registered by New),
// so that no incarnation outlives its test: an in-flight PipeToSelf sees its
// context cancelled, and a test inside testing/synctest ends with no
// goroutine of the bubble left blocked on the entity.
//
// An entity that stops fails the test unless the test said it would:
// ExpectStop, Options.AllowStop, the kit's own Stop and Restart, and a
// passivation are expected. The kit owns the entity as a shard would: when
// it passivates, the kit sends it Options.StopMessage, as sharding sends
// sharding.Entity.StopMessage, and the entity stops when it handles it (so
// an entity that stashes its stop message while busy is tested as it runs);
// without a stop message the entity is stopped at once. Unlike a shard, the
// kit neither holds messages sent after the stop message for a next
// incarnation nor stops a slow entity by force.
//
// Time: the entity runs on Options.Clock (default timers.Real). Inside a
// testing/synctest bubble the default clock is the bubble's fake clock, so
// a test of timers creates the kit inside synctest.Test and moves time with
// time.Sleep and synctest.Wait; nothing waits for real time.
//
// An entity configured with eventsourced.Config.EnforcedReplies is checked
// too: a command that carries a ReplyTo and gets an effect that neither
// replies nor says NoReply fails the test at that command.
//
// Serialization is checked by default, because a type that does not survive
// the codec works locally and fails only when it first crosses a network or
// a restart: every command goes through a codec round trip, every stored
// event must decode and re-encode to the same bytes, and the state after
// each command must survive a round trip unchanged.
package eventsourcedtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/eventsourced"
	"github.com/shoal-dev/shoal/eventsourced/internal/observe"
	"github.com/shoal-dev/shoal/internal/deepequal"
	"github.com/shoal-dev/shoal/internal/runtime"
	"github.com/shoal-dev/shoal/journal"
	"github.com/shoal-dev/shoal/journal/memory"
	snapmemory "github.com/shoal-dev/shoal/snapshot/memory"
	"github.com/shoal-dev/shoal/timers"
	remindermemory "github.com/shoal-dev/shoal/timers/reminder/memory"
)

// Options configures a Kit. Codec is required.
type Options struct {
	// Codec registers the entity's commands, events and state; the kit
	// checks that each survives it.
	Codec *codec.Registry
	// EntityID of the entity under test. Default "test-entity".
	EntityID string
	// SkipSerializationChecks turns the default checks off.
	SkipSerializationChecks bool
	// Timeout bounds each wait for the entity. Default 5s.
	Timeout time.Duration
	// Logger for the runtime. Default: discards.
	Logger *slog.Logger
	// Clock drives the entity's timers, its events' timestamps and the
	// journal latency. Default timers.Real, which inside a synctest bubble
	// is the bubble's clock.
	Clock timers.Clock
	// AllowStop lets the entity stop at any time without failing the test;
	// without it, a stop must be announced with ExpectStop.
	AllowStop bool
	// StopMessage, if set, is what the kit sends the entity when it
	// passivates, like sharding.Entity.StopMessage; it must be a command
	// of the entity's type. Nil: a passivation stops the entity at once.
	StopMessage any
	// StashCapacity, MailboxCapacity and HeldCapacity are passed to the
	// entity's entity.Props; zero means the runtime's default.
	StashCapacity, MailboxCapacity, HeldCapacity int
}

// T is the part of testing.TB the kit uses. *testing.T and *testing.B
// satisfy it; so does anything else that can report a failure.
type T interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	Errorf(format string, args ...any)
	Cleanup(f func())
}

// Kit drives one entity of command type C, event type E and state S.
type Kit[C, E, S any] struct {
	t         T
	opts      Options
	key       entity.TypeKey[C]
	create    func(entity.Context[C]) entity.Behavior[C]
	sys       *entity.System
	journal   *Journal
	snaps     *SnapshotStore
	reminders *remindermemory.Store
	props     *entity.Props[C]
	cell      *entity.Cell[C]
	behav     stateful[S]
	seen      int // how many of journal.Written are in history
	obs       *observer
	history   []Persisted[E]
	byKit     []bool // history[i] was written by a command the kit sent
	// reported is how much of history a Result has reported.
	reported int

	mu          sync.Mutex // guards the stop bookkeeping, which the entity's goroutine also touches
	expectStop  bool       // ExpectStop was called and no stop has used it yet
	kitStopping bool       // Stop or Restart is stopping the incarnation
	passivated  bool       // the incarnation asked to passivate
	stopChecked bool       // this incarnation's stop was already judged
}

type stateful[S any] interface {
	State() S
	LastSeqNr() uint64
}

// Persisted is one write: the events a message's effect persisted.
type Persisted[E any] struct {
	// Cause is the message whose effect persisted the events (a command, a
	// timer message, a piped result); nil for events written to the
	// journal directly.
	Cause  any
	Events []E
}

// Result is what one command did.
type Result[E, S any] struct {
	// Events are the events this command persisted, in order; not those
	// persisted by other messages meanwhile (see Others).
	Events []E
	// Others are the writes other messages made since the previous result
	// (timers, piped results, commands unstashed by this one), in order,
	// each with its cause.
	Others []Persisted[E]
	// State is the state once the command and its side effects are done.
	State S
	// Stopped is true when the entity stopped while handling the command;
	// Err is then its stop reason (nil for a normal stop).
	Stopped bool
	Err     error
}

// ReplyResult is a Result plus the reply to the command.
type ReplyResult[E, S, R any] struct {
	Result[E, S]
	// Reply is what the command answered; the zero R when Replied is false.
	Reply R
	// Replied is false when the command was handled without a reply.
	Replied bool
}

// New starts the entity built by create and waits for its recovery. It
// registers a t.Cleanup that checks the end of the test and stops the
// entity, so a test need not stop it.
func New[C, E, S any](t T, key entity.TypeKey[C], create func(entity.Context[C]) entity.Behavior[C], opts Options) *Kit[C, E, S] {
	t.Helper()
	if opts.Codec == nil {
		t.Fatal("eventsourcedtest: Options.Codec is required")
	}
	if opts.EntityID == "" {
		opts.EntityID = "test-entity"
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 5 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if opts.Clock == nil {
		opts.Clock = timers.Real{}
	}
	reminders := remindermemory.New(remindermemory.WithClock(opts.Clock.Now))
	k := &Kit[C, E, S]{t: t, opts: opts, key: key, create: create, reminders: reminders,
		journal: NewJournal(memory.New(memory.WithSideStore(reminders))),
		snaps:   NewSnapshotStore(snapmemory.New()), obs: &observer{}}
	k.journal.clock = opts.Clock
	sys, err := entity.NewSystem(entity.Config{
		Logger:             opts.Logger,
		Clock:              opts.Clock,
		Codec:              opts.Codec,
		Journal:            k.journal,
		Snapshots:          k.snaps,
		Reminders:          reminders,
		ForceSerialization: !opts.SkipSerializationChecks,
	})
	if err != nil {
		t.Fatal(err)
	}
	k.sys = sys
	owner := kitOwner[C]{book: k.stopBookkeeping()}
	if opts.StopMessage != nil {
		stop, ok := opts.StopMessage.(C)
		if !ok {
			t.Fatalf("eventsourcedtest: Options.StopMessage %T is not a %v", opts.StopMessage, reflect.TypeFor[C]())
		}
		owner.stop, owner.hasStop = stop, true
	}
	k.props = &entity.Props[C]{Key: key, Create: create, Owner: owner,
		StashCapacity: opts.StashCapacity, MailboxCapacity: opts.MailboxCapacity, HeldCapacity: opts.HeldCapacity}
	k.start()
	// Commands sent around RunCommand (with Tell or Ask), and stops
	// between commands, are checked too; then the entity is stopped.
	t.Cleanup(func() {
		if stopped, err := k.stoppedNow(); stopped {
			k.judgeStop(err, t.Errorf)
		}
		k.checkReplies(t.Errorf)
		k.stopAtEnd()
	})
	return k
}

// stopAtEnd stops the running incarnation when the test ends, so that
// nothing of it outlives the test: its PipeToSelf work sees its context
// cancelled and its timers end, and a synctest bubble is left with no
// goroutine blocked on it.
func (k *Kit[C, E, S]) stopAtEnd() {
	if stopped, _ := k.stoppedNow(); stopped {
		return
	}
	k.mu.Lock()
	k.kitStopping = true
	k.mu.Unlock()
	k.cell.StopNow()
	select {
	case <-k.cell.Done():
	case <-time.After(k.opts.Timeout):
		k.t.Errorf("eventsourcedtest: %s/%s did not stop within %v after the test", k.key, k.opts.EntityID, k.opts.Timeout)
	}
}

// NewFromConfig is New for an entity given by the function that builds its
// eventsourced.Config: C, E and S are inferred from it, so a test writes
//
//	kit := eventsourcedtest.NewFromConfig(t, AccountKey, accountConfig, opts)
//
// where the entity's Create is func(ec) { return eventsourced.New(accountConfig(ec)) }.
func NewFromConfig[C, E, S any](t T, key entity.TypeKey[C], config func(entity.Context[C]) eventsourced.Config[C, E, S], opts Options) *Kit[C, E, S] {
	t.Helper()
	return New[C, E, S](t, key, func(ec entity.Context[C]) entity.Behavior[C] { return eventsourced.New(config(ec)) }, opts)
}

func (k *Kit[C, E, S]) start() {
	k.t.Helper()
	k.mu.Lock()
	k.kitStopping, k.passivated, k.stopChecked = false, false, false
	k.mu.Unlock()
	k.cell = entity.Spawn(k.sys, k.props, k.opts.EntityID)
	k.behav = nil
	cell := k.cell
	k.await(func() {
		if b, ok := runtime.BehaviorOf(cell).(stateful[S]); ok {
			k.behav = b
		}
		if o, ok := runtime.BehaviorOf(cell).(interface{ Observe(observe.Observer) }); ok {
			o.Observe(k.obs)
		}
	})
	if k.behav == nil && k.cell.Err() == nil {
		select {
		case <-k.cell.Done():
		default:
			k.t.Fatalf("eventsourcedtest: %s did not create an eventsourced behavior with state %v", k.key, reflect.TypeFor[S]())
		}
	}
}

// await runs fn on the entity after everything queued so far has been
// handled; it returns false if the entity stopped first.
func (k *Kit[C, E, S]) await(fn func()) bool {
	k.t.Helper()
	done := make(chan struct{})
	if !runtime.PostOrdered(k.cell, func() { fn(); close(done) }) {
		<-k.cell.Done()
		k.judgeStop(k.cell.Err(), k.t.Fatalf)
		return false
	}
	select {
	case <-done:
		return true
	case <-k.cell.Done():
		k.judgeStop(k.cell.Err(), k.t.Fatalf)
		return false
	case <-time.After(k.opts.Timeout):
		k.t.Fatalf("eventsourcedtest: %s/%s did not finish within %v", k.key, k.opts.EntityID, k.opts.Timeout)
		return false
	}
}

// Inspect runs fn on the entity's goroutine, with its context, once every
// message queued so far has been handled, and waits for it: a test looks
// at what only the entity may touch, such as its timers. It reports false,
// and fn does not run, when the incarnation has stopped first.
func (k *Kit[C, E, S]) Inspect(fn func(ctx entity.Context[C])) bool {
	k.t.Helper()
	cell := k.cell
	done := make(chan struct{})
	if !runtime.PostOrdered(cell, func() { fn(cell); close(done) }) {
		return false
	}
	select {
	case <-done:
		return true
	case <-cell.Done():
		select {
		case <-done: // ran, then the entity stopped
			return true
		default:
			return false
		}
	case <-time.After(k.opts.Timeout):
		k.t.Fatalf("eventsourcedtest: %s/%s did not run Inspect within %v", k.key, k.opts.EntityID, k.opts.Timeout)
		return false
	}
}

// System is the runtime the entity runs on.
func (k *Kit[C, E, S]) System() *entity.System { return k.sys }

// Journal is the entity's journal, for fault injection and inspection.
func (k *Kit[C, E, S]) Journal() *Journal { return k.journal }

// Reminders is the entity's durable reminder store, in memory on the
// kit's clock, for inspection: the reminders its effects set, and those
// its handled deliveries acknowledged (docs/DESIGN.md, "Durable
// reminders"). The entity runs in shard KitShard. Deliver a reminder by
// sending its command with the reminder.Delivery filled in.
func (k *Kit[C, E, S]) Reminders() *remindermemory.Store { return k.reminders }

// KitShard is the shard a kit's entity runs in, for its reminders.
const KitShard = "kit-shard"

// Snapshots is the entity's snapshot store, for fault injection and inspection.
func (k *Kit[C, E, S]) Snapshots() *SnapshotStore { return k.snaps }

// Ref addresses the running incarnation.
func (k *Kit[C, E, S]) Ref() entity.Ref[C] { return k.cell }

// Cell is the running incarnation.
func (k *Kit[C, E, S]) Cell() *entity.Cell[C] { return k.cell }

// RunCommand sends cmd and waits until it, and the side effects of what it
// persisted, have been handled.
func (k *Kit[C, E, S]) RunCommand(cmd C) Result[E, S] {
	k.t.Helper()
	if err := k.tell(k.cell, cmd); err != nil {
		k.t.Fatalf("eventsourcedtest: tell %T: %v", cmd, err)
	}
	return k.collect()
}

// RunCommandWithReply sends the command built around a ReplyTo and returns
// what it did and what it answered while being handled.
func RunCommandWithReply[C, E, S, R any](k *Kit[C, E, S], build func(entity.ReplyTo[R]) C) ReplyResult[E, S, R] {
	k.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel() // also when collect fails the test: the ask must end
	type answer struct {
		r   R
		err error
	}
	answered := make(chan answer, 1)
	sent := make(chan struct{})
	go func() {
		r, err := entity.Ask(ctx, tellThen[C]{Ref: k.cell, tell: k.tell, after: func() { close(sent) }}, build)
		answered <- answer{r, err}
	}()
	<-sent
	res := k.collect()
	cancel()
	a := <-answered
	return ReplyResult[E, S, R]{Result: res, Reply: a.r, Replied: a.err == nil}
}

// tell sends the kit's own command, marked so that the observer knows
// which handled message it is (the first one after the mark equal to it).
func (k *Kit[C, E, S]) tell(ref entity.Ref[C], cmd C) error {
	runtime.PostOrdered(k.cell, func() { k.obs.expect(cmd) })
	return ref.Tell(cmd)
}

// tellThen sends with tell and calls after once the command is in the mailbox.
type tellThen[C any] struct {
	entity.Ref[C]
	tell  func(entity.Ref[C], C) error
	after func()
}

func (r tellThen[C]) Tell(msg C) error {
	err := r.tell(r.Ref, msg)
	r.after()
	return err
}

// replyChecker is the behavior's side of eventsourced.Config.EnforcedReplies.
type replyChecker interface{ TakeMissingReplies() []error }

func (k *Kit[C, E, S]) collect() Result[E, S] {
	k.t.Helper()
	var (
		res     Result[E, S]
		missing []error
	)
	observe := func() {
		if k.behav == nil {
			return
		}
		res.State = k.behav.State()
		missing = k.takeMissingReplies()
	}
	if !k.await(observe) {
		res.Stopped, res.Err = true, k.cell.Err()
		observe()
	}
	if len(missing) > 0 {
		k.t.Fatalf("eventsourcedtest: %v", errors.Join(missing...))
	}
	if k.obs.unmatched() && !res.Stopped && k.behav != nil {
		// Handled, but not recognised: it arrived different from what was sent.
		k.t.Fatalf("eventsourcedtest: the command sent is not the command the entity handled (a codec round trip changed it); its writes cannot be told from other messages'")
	}
	k.ingest()
	for i := k.reported; i < len(k.history); i++ {
		if k.byKit[i] {
			res.Events = append(res.Events, k.history[i].Events...)
		} else {
			res.Others = append(res.Others, Persisted[E]{Cause: k.history[i].Cause, Events: slices.Clone(k.history[i].Events)})
		}
	}
	k.reported = len(k.history)
	if !k.opts.SkipSerializationChecks && k.behav != nil {
		k.checkState(res.State)
	}
	return res
}

// ingest appends the writes the journal has stored since the last call to
// the history, each attributed to its cause and checked by the codec.
func (k *Kit[C, E, S]) ingest() {
	k.t.Helper()
	written := k.journal.Written()
	var last *Persisted[E]
	lastFirst := uint64(0)
	for _, ev := range written[k.seen:] {
		events := k.decodeStored(ev)
		w, ok := k.obs.writeOf(ev.SeqNr)
		if last == nil || !ok || w.first != lastFirst {
			k.history = append(k.history, Persisted[E]{Cause: w.cause})
			k.byKit = append(k.byKit, ok && w.byKit)
			last, lastFirst = &k.history[len(k.history)-1], w.first
		}
		last.Events = append(last.Events, events...)
	}
	k.seen = len(written)
}

// decodeStored reads a stored event through DecodeAll, like every reader
// of stored events: a row written to the journal directly in an old form
// (an alias, an upcast shape) reads as the events it stands for today.
// What today's code wrote must also survive a codec round trip.
func (k *Kit[C, E, S]) decodeStored(ev journal.Event) []E {
	k.t.Helper()
	vs, err := k.opts.Codec.DecodeAll(ev.Manifest, ev.Payload)
	if err != nil {
		k.t.Fatalf("eventsourcedtest: stored event %s #%d does not decode: %v", ev.PersistenceID, ev.SeqNr, err)
	}
	events := make([]E, len(vs))
	for i, v := range vs {
		e, ok := v.(E)
		if !ok {
			k.t.Fatalf("eventsourcedtest: stored event %s #%d decodes to %T, which is not the entity's event type", ev.PersistenceID, ev.SeqNr, v)
		}
		events[i] = e
	}
	if !k.opts.SkipSerializationChecks && len(events) == 1 {
		m, again, err := k.opts.Codec.Encode(events[0])
		if err != nil || m == ev.Manifest && !bytes.Equal(again, ev.Payload) {
			k.t.Fatalf("eventsourcedtest: event %T does not survive a codec round trip (err %v)", events[0], err)
		}
	}
	return events
}

func (k *Kit[C, E, S]) checkState(s S) {
	k.t.Helper()
	copied, err := codec.RoundTrip(k.opts.Codec, any(s))
	if err != nil {
		k.t.Fatalf("eventsourcedtest: state %T does not serialize: %v", s, err)
	}
	if !deepequal.Equal(copied, any(s)) {
		k.t.Fatalf("eventsourcedtest: state changes in a codec round trip:\n before %+v\n after  %+v", s, copied)
	}
}

// takeMissingReplies returns the EnforcedReplies violations not reported
// yet; call it on the entity's goroutine or after it stopped.
func (k *Kit[C, E, S]) takeMissingReplies() []error {
	if rc, ok := k.behav.(replyChecker); ok {
		return rc.TakeMissingReplies()
	}
	return nil
}

// checkReplies fails the test if a command handled since the last check
// (one sent with Tell or Ask rather than RunCommand) broke EnforcedReplies.
func (k *Kit[C, E, S]) checkReplies(fail func(format string, args ...any)) {
	k.t.Helper()
	var missing []error
	if !k.await(func() { missing = k.takeMissingReplies() }) {
		missing = k.takeMissingReplies()
	}
	if len(missing) > 0 {
		fail("eventsourcedtest: %v", errors.Join(missing...))
	}
}

// State is the entity's current state. It also fails the test if a
// command handled since the last check broke EnforcedReplies.
func (k *Kit[C, E, S]) State() S {
	k.t.Helper()
	var (
		s       S
		missing []error
	)
	observe := func() {
		if k.behav != nil {
			s = k.behav.State()
			missing = k.takeMissingReplies()
		}
	}
	if !k.await(observe) {
		observe()
	}
	if len(missing) > 0 {
		k.t.Fatalf("eventsourcedtest: %v", errors.Join(missing...))
	}
	return s
}

// Restart stops the running incarnation and starts a new one, which
// recovers from what was stored: Stop, then Start.
func (k *Kit[C, E, S]) Restart() {
	k.t.Helper()
	k.Stop()
	k.Start()
}

// Stop stops the running incarnation now, ahead of its queued mail, and
// waits until it has stopped. The stop is expected. A stopped entity stays
// stopped until Start.
func (k *Kit[C, E, S]) Stop() {
	k.t.Helper()
	if stopped, err := k.stoppedNow(); stopped {
		k.judgeStop(err, k.t.Fatalf)
		return
	}
	k.checkReplies(k.t.Fatalf)
	k.mu.Lock()
	k.kitStopping = true
	k.mu.Unlock()
	k.cell.StopNow()
	<-k.cell.Done()
}

// Start starts a new incarnation, which recovers from what was stored, and
// waits for its recovery. The previous one must have stopped.
func (k *Kit[C, E, S]) Start() {
	k.t.Helper()
	stopped, err := k.stoppedNow()
	if !stopped {
		k.t.Fatalf("eventsourcedtest: Start while %s/%s is running; Stop it first", k.key, k.opts.EntityID)
	}
	k.judgeStop(err, k.t.Fatalf)
	k.start()
}

// ExpectStop announces that the entity will stop (for example, at the next
// command): the next stop does not fail the test.
func (k *Kit[C, E, S]) ExpectStop() {
	k.mu.Lock()
	k.expectStop = true
	k.mu.Unlock()
}

// Passivated reports whether the running or last incarnation asked to
// passivate (Context.Passivate); the kit, its owner, then sends it
// Options.StopMessage, or stops it at once without one.
func (k *Kit[C, E, S]) Passivated() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.passivated
}

// Stopped reports whether the incarnation has stopped, and why. A stop the
// test did not expect fails it.
func (k *Kit[C, E, S]) Stopped() (bool, error) {
	k.t.Helper()
	stopped, err := k.stoppedNow()
	if stopped {
		k.judgeStop(err, k.t.Fatalf)
	}
	return stopped, err
}

// History is every write stored so far, in order, each with the message
// that caused it, across incarnations: it waits for the messages queued so
// far, so it includes the write behind a reply a ReplyProbe has seen, and
// writes no Result has reported yet (the next Result's Others still will).
func (k *Kit[C, E, S]) History() []Persisted[E] {
	k.t.Helper()
	if stopped, _ := k.stoppedNow(); !stopped {
		k.await(func() {})
	}
	k.ingest()
	h := make([]Persisted[E], len(k.history))
	for i, p := range k.history {
		h[i] = Persisted[E]{Cause: p.Cause, Events: slices.Clone(p.Events)}
	}
	return h
}

func (k *Kit[C, E, S]) stoppedNow() (bool, error) {
	select {
	case <-k.cell.Done():
		return true, k.cell.Err()
	default:
		return false, nil
	}
}

// judgeStop fails the test, once per incarnation, if the stop was not
// expected: not announced with ExpectStop or Options.AllowStop, not the
// kit's own Stop, not a passivation.
func (k *Kit[C, E, S]) judgeStop(err error, fail func(format string, args ...any)) {
	k.t.Helper()
	k.mu.Lock()
	if k.stopChecked {
		k.mu.Unlock()
		return
	}
	k.stopChecked = true
	expected := k.opts.AllowStop || k.kitStopping || k.passivated || k.expectStop
	if !k.kitStopping && !k.passivated {
		k.expectStop = false // used up by this stop
	}
	k.mu.Unlock()
	if !expected {
		fail("eventsourcedtest: %s/%s stopped unexpectedly (reason: %v); call ExpectStop first if the test means it to stop", k.key, k.opts.EntityID, err)
	}
}

// stopBookkeeping is what the entity's owner updates.
func (k *Kit[C, E, S]) stopBookkeeping() *stopBook {
	return &stopBook{mu: &k.mu, passivated: &k.passivated}
}

type stopBook struct {
	mu         *sync.Mutex
	passivated *bool
}

// kitOwner makes the kit the entity's owner, as a shard would be: a
// passivation request sends the stop message (or, without one, stops the
// entity), once per incarnation, and is remembered as an expected stop.
type kitOwner[C any] struct {
	book    *stopBook
	stop    C
	hasStop bool
}

// ShardID makes the kit a shard owner (internal/runtime ShardOwner):
// reminders need a shard.
func (o kitOwner[C]) ShardID() string { return KitShard }

func (o kitOwner[C]) Passivate(c *entity.Cell[C]) {
	o.book.mu.Lock()
	again := *o.book.passivated
	*o.book.passivated = true
	o.book.mu.Unlock()
	switch {
	case again: // a shard, too, ignores a second request while passivating
	case !o.hasStop:
		c.Stop()
	default:
		if err := c.Tell(o.stop); err != nil {
			// A full mailbox or a stop message the codec refuses: stop now,
			// rather than leave a passivating entity running forever.
			c.Log().Error("eventsourcedtest: stop message refused; stopping", "err", err)
			runtime.Fail(c, fmt.Errorf("eventsourcedtest: stop message refused: %w", err))
		}
	}
}

func (o kitOwner[C]) Stopped(*entity.Cell[C], error) {}

// observer attributes writes to the message that caused them. Its
// Handling and Persisting run on the entity's goroutine; the kit reads it
// after waiting for the entity.
type observer struct {
	mu        sync.Mutex
	expecting bool
	expected  any  // the kit's command, sent after the mark
	current   any  // the message being handled
	currentBy bool // current is the kit's command
	writes    []write
}

type write struct {
	cause       any
	byKit       bool
	first, last uint64
}

func (o *observer) expect(cmd any) {
	o.mu.Lock()
	o.expecting, o.expected = true, cmd
	o.mu.Unlock()
}

// unmatched reports, and forgets, a kit command no handled message matched.
func (o *observer) unmatched() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	u := o.expecting
	o.expecting, o.expected = false, nil
	return u
}

// Handling implements observe.Observer.
func (o *observer) Handling(msg any) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.current, o.currentBy = msg, false
	if o.expecting && deepequal.Equal(msg, o.expected) {
		o.expecting, o.expected, o.currentBy = false, nil, true
	}
}

// Persisting implements observe.Observer.
func (o *observer) Persisting(first, last uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.writes = append(o.writes, write{cause: o.current, byKit: o.currentBy, first: first, last: last})
}

// writeOf finds the latest write of the event numbered seq.
func (o *observer) writeOf(seq uint64) (write, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for i := len(o.writes) - 1; i >= 0; i-- {
		if w := o.writes[i]; w.first <= seq && seq <= w.last {
			return w, true
		}
	}
	return write{}, false
}
