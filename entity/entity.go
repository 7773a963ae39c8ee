// Package entity is what a user program sees of the runtime every Shoal
// entity runs on.
//
// An entity is a behavior plus a mailbox. Messages to one entity are handled
// one at a time, in arrival order; an entity with an empty mailbox owns no
// goroutine, so a node can hold millions of resident entities. Messages are
// typed: an entity of command type C accepts only C, through a Ref[C]; a
// request that expects an answer carries a ReplyTo[R] built by Ask.
//
// The runtime (System) schedules mailboxes onto a small pool of workers,
// fires timers, routes replies, and, in tests, can force every message
// through the codec so that a type that cannot cross the network fails early.
//
// The runtime itself lives in an internal package; the types here are its
// user-facing ones, and carry no method a user program must not call (see
// docs/DESIGN.md, 'Packages').
package entity

import (
	"context"
	"time"

	"github.com/shoal-dev/shoal/internal/runtime"
)

// TypeKey names an entity type and fixes its command type.
type TypeKey[C any] = runtime.TypeKey[C]

// NewTypeKey returns the key of the entity type called name.
func NewTypeKey[C any](name string) TypeKey[C] { return runtime.NewTypeKey[C](name) }

// Ref addresses an entity that accepts commands of type C: Tell enqueues a
// message without waiting for it to be handled, and fails, not delivering
// it, when the entity is gone or its mailbox is full; System is the local
// runtime that routes replies to asks on the ref.
type Ref[C any] = runtime.Ref[C]

// PanicError is the stop reason of an entity whose handler panicked: the
// value it panicked with and the stack.
type PanicError = runtime.PanicError

// The errors of Tell.
var (
	// ErrStopped is returned when telling an entity that has stopped.
	ErrStopped = runtime.ErrStopped
	// ErrMailboxFull is returned by Tell when a bounded mailbox is at capacity.
	ErrMailboxFull = runtime.ErrMailboxFull
)

// Behavior decides what an entity does with its next message. Receive
// returns the behavior for the message after it: Same, Stopped, or another
// behavior.
type Behavior[C any] = runtime.Behavior[C]

// SignalHandler is implemented by behaviors that want lifecycle signals.
type SignalHandler[C any] = runtime.SignalHandler[C]

// Signal is a lifecycle notification delivered through SignalHandler.
type Signal = runtime.Signal

// PostStop is signalled once, after the last message, when the entity
// stops. Err is nil for a normal stop.
type PostStop = runtime.PostStop

// Context is an entity's view of the runtime, valid inside its handlers
// only (except where a method says otherwise): its id and Self, the
// System, a logger, the clock, timers, the stash, PipeToSelf, the receive
// timeout, Passivate and Stop.
type Context[C any] = runtime.Context[C]

// ReceiveFunc adapts a function to Behavior.
type ReceiveFunc[C any] = runtime.ReceiveFunc[C]

// Receive returns the behavior that handles each message with f.
func Receive[C any](f func(ctx Context[C], msg C) Behavior[C]) Behavior[C] {
	return runtime.Receive(f)
}

// Same keeps the current behavior.
func Same[C any]() Behavior[C] { return runtime.Same[C]() }

// Stopped stops the entity after the current message.
func Stopped[C any]() Behavior[C] { return runtime.Stopped[C]() }

// Unhandled keeps the current behavior and records the message as a dead letter.
func Unhandled[C any]() Behavior[C] { return runtime.Unhandled[C]() }

// Setup defers building a behavior until it is installed, on the entity's
// goroutine, with its context.
func Setup[C any](f func(ctx Context[C]) Behavior[C]) Behavior[C] { return runtime.Setup(f) }

// System is the per-process runtime: the workers that run entities, the
// routing of replies, and the node's shared services (NodeID, Logger,
// Clock, Codec, the default Journal and Snapshots, Stats).
type System = runtime.System

// Config configures a System. The zero value of every field means its default.
type Config = runtime.Config

// Stats are the runtime's counters since NewSystem, for metrics.
type Stats = runtime.Stats

// DefaultDeadLetterLogLimit is Config.DeadLetterLogLimit's default.
const DefaultDeadLetterLogLimit = runtime.DefaultDeadLetterLogLimit

// NewSystem returns a runtime configured by cfg.
func NewSystem(cfg Config) (*System, error) { return runtime.NewSystem(cfg) }

// Props describes how to run entities of one type. One Props is shared by
// every entity spawned from it, so per-entity memory stays small.
type Props[C any] = runtime.Props[C]

// Cell is one running incarnation of an entity, as Spawn returns it: a Ref
// to it, and its lifecycle (Done, Err, StopNow). It is also the Context
// its own handlers get.
type Cell[C any] = runtime.Cell[C]

// Spawn starts an incarnation of the entity id. Its behavior is created on
// its own goroutine before its first message.
func Spawn[C any](sys *System, props *Props[C], id string) *Cell[C] {
	return runtime.Spawn(sys, props, id)
}

// ReplyTo is the address of one pending Ask expecting an R. It is a plain
// value: an entity may keep it in its state, persist it, or send it to
// another node, and reply through it later.
type ReplyTo[R any] = runtime.ReplyTo[R]

// ReplyAddress names one pending ask anywhere in the cluster: the node id
// and incarnation of the System that asked, and the ask's id there.
type ReplyAddress = runtime.ReplyAddress

// Replier is anything that can send replies: every entity Context, and the System.
type Replier = runtime.Replier

// AskFailedError fails an ask that the node of its target failed: it will
// never be answered. It matches ErrAskFailed and the same sentinels as the
// error of an ask that fails on its own node (ErrUnhandled, ErrStopped,
// ...); Message is the error's text on that node.
type AskFailedError = runtime.AskFailedError

// DefaultAskTimeout is how long an Ask whose context has no deadline waits
// for its reply, unless Config.AskTimeout says otherwise.
const DefaultAskTimeout = runtime.DefaultAskTimeout

// The errors of Ask, AskFrom and Reply.
var (
	// ErrAskTimeout is returned by Ask when no reply arrives before its
	// deadline: its context's, or the System's AskTimeout when the context
	// has none.
	ErrAskTimeout = runtime.ErrAskTimeout
	// ErrUnhandled is returned by an Ask whose target returned Unhandled
	// for the command: nobody will reply.
	ErrUnhandled = runtime.ErrUnhandled
	// ErrAskFailed matches the error of every ask that another node failed
	// (an *AskFailedError), whatever its cause.
	ErrAskFailed = runtime.ErrAskFailed
	// ErrReplyUndecodable fails an Ask whose reply arrived from another
	// node as bytes that do not decode into the asker's R.
	ErrReplyUndecodable = runtime.ErrReplyUndecodable
	// ErrNoReplyAddress is returned by Reply for a zero ReplyTo.
	ErrNoReplyAddress = runtime.ErrNoReplyAddress
	// ErrAskEnded is returned by Reply for a reply to an ask that has
	// already returned (answered, timed out or cancelled): a race with its
	// deadline, not a fault. The reply is counted as a dead letter.
	ErrAskEnded = runtime.ErrAskEnded
	// ErrStaleIncarnation is returned by Reply for a reply to an ask of
	// another incarnation of this node: that process is gone.
	ErrStaleIncarnation = runtime.ErrStaleIncarnation
	// ErrNoRemoteReplies is returned by Reply for a reply to another node
	// when the System has no way to carry it there.
	ErrNoRemoteReplies = runtime.ErrNoRemoteReplies
	// ErrNotSerializable is returned, under Config.ForceSerialization, for
	// a message or reply that could not cross the network: the codec
	// refuses it, or its copy differs from it (ErrLossyRoundTrip).
	ErrNotSerializable = runtime.ErrNotSerializable
	// ErrLossyRoundTrip is wrapped in ErrNotSerializable when a codec round
	// trip succeeds but changes the value.
	ErrLossyRoundTrip = runtime.ErrLossyRoundTrip
)

// Ask sends the command built by build to ref and waits for the reply
// through the ReplyTo it passes to build.
//
// Ask never waits for ever: when ctx has no deadline it fails with
// ErrAskTimeout once the System's AskTimeout (DefaultAskTimeout unless
// configured) has passed on the System's clock — at most an eighth of it
// later, as one sweep serves all such asks. It returns ErrAskTimeout when a
// deadline passes, the context's error when ctx is cancelled (and sends
// nothing when ctx has already ended), and fails at once, without waiting,
// when the target cannot answer: the send is refused (ErrStopped,
// ErrMailboxFull, a serialization error), the target stops before handling
// the command or crashes while handling it (ErrStopped, wrapping the crash),
// or it returns Unhandled for it (ErrUnhandled). Where the target lives on
// another node, that node sends the failure back on the reply route, and
// Ask fails at once with an *AskFailedError that matches the same
// sentinels (ErrUnhandled, ErrStopped, ...). A reply that does not
// serialize under ForceSerialization fails the Ask with ErrNotSerializable;
// one from another node that does not decode into R fails it at once with
// ErrReplyUndecodable.
// An entity that handles the command normally and stops without replying
// may have handed the ReplyTo on, so that Ask waits for its deadline.
//
// Ask blocks its goroutine: an entity's handler must not call it (it would
// hold one of the System's few workers); use AskFrom there.
func Ask[C, R any](ctx context.Context, ref Ref[C], build func(ReplyTo[R]) C) (R, error) {
	return runtime.Ask(ctx, ref, build)
}

// AskFrom asks target on behalf of the entity whose handler calls it,
// without blocking that handler: it sends the command built by build, returns
// at once, and later delivers to the entity the command that adapt builds
// from the outcome, which is the reply, or an error as Ask would return it
// (ErrAskTimeout after timeout, ErrStopped, ErrUnhandled, ...). A timeout
// of zero or less means the System's AskTimeout; it runs on the System's
// clock. adapt runs on whichever goroutine completes the ask, not on the
// entity's: it must only build the command, never touch the entity's state.
// If the entity has stopped by then, the command is a dead letter.
func AskFrom[C, T, R any](ctx Context[C], target Ref[T], timeout time.Duration, build func(ReplyTo[R]) T, adapt func(R, error) C) {
	runtime.AskFrom(ctx, target, timeout, build, adapt)
}

// TracerName is the instrumentation name of Shoal's spans.
const TracerName = runtime.TracerName

// The span attributes Shoal sets (docs/DESIGN.md, "Tracing").
const (
	AttrEntityType = runtime.AttrEntityType
	AttrEntityID   = runtime.AttrEntityID
)

// ContextRef is a Ref that carries the trace context of a context with
// the message it sends: the entity's handler then runs in a span that is
// a child of the caller's (docs/DESIGN.md, "Tracing"). Cell and
// sharding's EntityRef implement it.
type ContextRef[C any] = runtime.ContextRef[C]

// TellContext sends msg to ref with the trace context of ctx, when ref
// carries one (a ContextRef); otherwise it is ref.Tell(msg).
func TellContext[C any](ctx context.Context, ref Ref[C], msg C) error {
	return runtime.TellContext(ctx, ref, msg)
}

// TraceContext is a context carrying the span of the message the entity
// is handling (its "shoal.entity.handle" span), for a handler that starts
// spans of its own or calls traced code; without one, a context with no
// span. Call it from the entity's handlers.
func TraceContext[C any](ctx Context[C]) context.Context { return runtime.TraceContext(ctx) }

// Reply sends v to the Ask waiting behind to, and returns why it could not.
// To an ask of this System it is delivered at once; to another node's it
// is encoded (with the codec when v's type is registered, as JSON
// otherwise) and sent on the node's reply route. Every reply that reaches
// no ask is counted as a dead letter: to a zero ReplyTo
// (ErrNoReplyAddress), to an ask that has ended (ErrAskEnded), to another
// incarnation of this node (ErrStaleIncarnation), to another node with no
// way there (ErrNoRemoteReplies), or refused on its way (that error,
// wrapped). A reply that reaches the other node may still find its ask
// ended there.
func Reply[R any](via Replier, to ReplyTo[R], v R) error { return runtime.Reply(via, to, v) }

// ReplyAddresses lists the reply addresses msg carries, at any depth (the
// ReplyTo fields of a command): the asks that wait for an answer to it.
// A transport sends them along with a message it encodes.
func ReplyAddresses(msg any) []ReplyAddress { return runtime.ReplyAddresses(msg) }

// AskFailureManifest is the manifest under which a failure travels on the
// reply route in place of a reply. No codec type may be registered under it.
const AskFailureManifest = runtime.AskFailureManifest
