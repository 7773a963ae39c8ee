package runtime

import (
	"context"
	"log/slog"
	"time"

	"github.com/shoal-dev/shoal/stash"
	"github.com/shoal-dev/shoal/timers"
)

// Behavior decides what an entity does with its next message. Receive
// returns the behavior for the message after it: Same, Stopped, or another
// behavior.
type Behavior[C any] interface {
	Receive(ctx Context[C], msg C) Behavior[C]
}

// SignalHandler is implemented by behaviors that want lifecycle signals.
type SignalHandler[C any] interface {
	OnSignal(ctx Context[C], sig Signal)
}

// Signal is a lifecycle notification delivered through SignalHandler.
type Signal interface{ isSignal() }

// PostStop is signalled once, after the last message, when the entity stops.
// Err is nil for a normal stop.
type PostStop struct{ Err error }

func (PostStop) isSignal() {}

// Context is an entity's view of the runtime, valid inside its handlers only
// (except where a method says otherwise).
type Context[C any] interface {
	// EntityID is the id this incarnation was spawned with.
	EntityID() string
	// Self addresses this entity; safe to hand to other goroutines.
	Self() Ref[C]
	// System is the runtime the entity runs on.
	System() *System
	// Log is a logger tagged with the entity type and id.
	Log() *slog.Logger
	// Clock is the runtime's time source.
	Clock() timers.Clock
	// Timers schedules keyed messages to this entity; they end with this incarnation.
	Timers() *timers.Scheduler[C]
	// Stash sets messages aside until UnstashAll, which redelivers them
	// before any message still in the mailbox.
	Stash() *stash.Buffer[C]
	// PipeToSelf runs work on another goroutine and delivers the command it
	// returns to this entity. work must not touch the entity's state; its
	// context is cancelled when this incarnation stops.
	PipeToSelf(work func(context.Context) C)
	// SetReceiveTimeout delivers msg whenever the entity has been idle for d.
	// Timer messages do not end idleness unless their timer was started
	// with timers.ResetsReceiveTimeout.
	SetReceiveTimeout(d time.Duration, msg C)
	// CancelReceiveTimeout stops the receive timeout; one already queued is discarded.
	CancelReceiveTimeout()
	// Passivate asks the entity's owner (its shard) to stop it gracefully.
	// Without an owner it is Stop.
	Passivate()
	// Stop stops the entity after the current message.
	Stop()
}

// ReceiveFunc adapts a function to Behavior.
type ReceiveFunc[C any] func(ctx Context[C], msg C) Behavior[C]

// Receive implements Behavior.
func (f ReceiveFunc[C]) Receive(ctx Context[C], msg C) Behavior[C] { return f(ctx, msg) }

// Receive returns the behavior that handles each message with f.
func Receive[C any](f func(ctx Context[C], msg C) Behavior[C]) Behavior[C] {
	return ReceiveFunc[C](f)
}

type same[C any] struct{}

func (same[C]) Receive(Context[C], C) Behavior[C] { panic("entity: Same is not a behavior to run") }

type stopped[C any] struct{}

func (stopped[C]) Receive(Context[C], C) Behavior[C] {
	panic("entity: Stopped is not a behavior to run")
}

type unhandled[C any] struct{}

func (unhandled[C]) Receive(Context[C], C) Behavior[C] {
	panic("entity: Unhandled is not a behavior to run")
}

type setup[C any] struct{ f func(Context[C]) Behavior[C] }

func (setup[C]) Receive(Context[C], C) Behavior[C] { panic("entity: Setup is not a behavior to run") }

// Same keeps the current behavior.
func Same[C any]() Behavior[C] { return same[C]{} }

// Stopped stops the entity after the current message.
func Stopped[C any]() Behavior[C] { return stopped[C]{} }

// Unhandled keeps the current behavior and records the message as a dead letter.
func Unhandled[C any]() Behavior[C] { return unhandled[C]{} }

// Setup defers building a behavior until it is installed, on the entity's
// goroutine, with its context.
func Setup[C any](f func(ctx Context[C]) Behavior[C]) Behavior[C] { return setup[C]{f: f} }
