// Package eventsourcedtest runs one event-sourced entity in a test: send a
// command, get back the events it persisted, its new state and its reply;
// restart it to check recovery; inject journal faults.
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
	"io"
	"log/slog"
	"reflect"
	"time"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/journal/memory"
	snapmemory "github.com/shoal-dev/shoal/snapshot/memory"
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
	t       T
	opts    Options
	key     entity.TypeKey[C]
	create  func(entity.Context[C]) entity.Behavior[C]
	sys     *entity.System
	journal *Journal
	snaps   *snapmemory.Store
	props   *entity.Props[C]
	cell    *entity.Cell[C]
	behav   stateful[S]
	seen    int // how many of journal.Written were already reported
}

type stateful[S any] interface {
	State() S
	LastSeqNr() uint64
}

// Result is what one command did.
type Result[E, S any] struct {
	// Events are the events stored since the previous result, in order.
	Events []E
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

// New starts the entity built by create and waits for its recovery.
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
	k := &Kit[C, E, S]{t: t, opts: opts, key: key, create: create,
		journal: NewJournal(memory.New()), snaps: snapmemory.New()}
	sys, err := entity.NewSystem(entity.Config{
		Logger:             opts.Logger,
		Codec:              opts.Codec,
		Journal:            k.journal,
		Snapshots:          k.snaps,
		ForceSerialization: !opts.SkipSerializationChecks,
	})
	if err != nil {
		t.Fatal(err)
	}
	k.sys = sys
	k.props = &entity.Props[C]{Key: key, Create: create}
	k.start()
	// Commands sent around RunCommand (with Tell or Ask) are checked too.
	t.Cleanup(func() { k.checkReplies(t.Errorf) })
	return k
}

func (k *Kit[C, E, S]) start() {
	k.t.Helper()
	k.cell = entity.Spawn(k.sys, k.props, k.opts.EntityID)
	k.behav = nil
	cell := k.cell
	k.await(func() {
		if b, ok := cell.Behavior().(stateful[S]); ok {
			k.behav = b
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
	if !k.cell.PostOrdered(func() { fn(); close(done) }) {
		return false
	}
	select {
	case <-done:
		return true
	case <-k.cell.Done():
		return false
	case <-time.After(k.opts.Timeout):
		k.t.Fatalf("eventsourcedtest: %s/%s did not finish within %v", k.key, k.opts.EntityID, k.opts.Timeout)
		return false
	}
}

// System is the runtime the entity runs on.
func (k *Kit[C, E, S]) System() *entity.System { return k.sys }

// Journal is the entity's journal, for fault injection and inspection.
func (k *Kit[C, E, S]) Journal() *Journal { return k.journal }

// Snapshots is the entity's snapshot store.
func (k *Kit[C, E, S]) Snapshots() *snapmemory.Store { return k.snaps }

// Ref addresses the running incarnation.
func (k *Kit[C, E, S]) Ref() entity.Ref[C] { return k.cell }

// Cell is the running incarnation.
func (k *Kit[C, E, S]) Cell() *entity.Cell[C] { return k.cell }

// RunCommand sends cmd and waits until it, and the side effects of what it
// persisted, have been handled.
func (k *Kit[C, E, S]) RunCommand(cmd C) Result[E, S] {
	k.t.Helper()
	if err := k.cell.Tell(cmd); err != nil {
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
		r, err := entity.Ask(ctx, tellThen[C]{Ref: k.cell, after: func() { close(sent) }}, build)
		answered <- answer{r, err}
	}()
	<-sent
	res := k.collect()
	cancel()
	a := <-answered
	return ReplyResult[E, S, R]{Result: res, Reply: a.r, Replied: a.err == nil}
}

// tellThen calls after once the command is in the mailbox.
type tellThen[C any] struct {
	entity.Ref[C]
	after func()
}

func (r tellThen[C]) Tell(msg C) error {
	err := r.Ref.Tell(msg)
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
		<-k.cell.Done()
		res.Stopped, res.Err = true, k.cell.Err()
		observe()
	}
	if len(missing) > 0 {
		k.t.Fatalf("eventsourcedtest: %v", errors.Join(missing...))
	}
	written := k.journal.Written()
	for _, ev := range written[k.seen:] {
		e, err := codec.DecodeAs[E](k.opts.Codec, ev.Manifest, ev.Payload)
		if err != nil {
			k.t.Fatalf("eventsourcedtest: stored event %s #%d does not decode: %v", ev.PersistenceID, ev.SeqNr, err)
		}
		if !k.opts.SkipSerializationChecks {
			if _, again, err := k.opts.Codec.Encode(e); err != nil || !bytes.Equal(again, ev.Payload) {
				k.t.Fatalf("eventsourcedtest: event %T does not survive a codec round trip (err %v)", e, err)
			}
		}
		res.Events = append(res.Events, e)
	}
	k.seen = len(written)
	if !k.opts.SkipSerializationChecks && k.behav != nil {
		k.checkState(res.State)
	}
	return res
}

func (k *Kit[C, E, S]) checkState(s S) {
	k.t.Helper()
	copied, err := codec.RoundTrip(k.opts.Codec, any(s))
	if err != nil {
		k.t.Fatalf("eventsourcedtest: state %T does not serialize: %v", s, err)
	}
	if !equal(reflect.ValueOf(copied), reflect.ValueOf(any(s))) {
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
		<-k.cell.Done()
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
		<-k.cell.Done()
		observe()
	}
	if len(missing) > 0 {
		k.t.Fatalf("eventsourcedtest: %v", errors.Join(missing...))
	}
	return s
}

// Restart stops the running incarnation and starts a new one, which
// recovers from what was stored.
func (k *Kit[C, E, S]) Restart() {
	k.t.Helper()
	k.checkReplies(k.t.Fatalf)
	k.cell.StopNow()
	<-k.cell.Done()
	k.start()
}

// Stopped reports whether the incarnation has stopped, and why.
func (k *Kit[C, E, S]) Stopped() (bool, error) {
	select {
	case <-k.cell.Done():
		return true, k.cell.Err()
	default:
		return false, nil
	}
}
