package eventsourced

import (
	"fmt"
	"slices"

	"github.com/shoal-dev/shoal/entity"
)

// Effect is what a command handler decides: which events to persist (if
// any) and what to do once they are stored. Effects are values: building
// one never changes another, so a base effect may be shared, reused from a
// package-level variable, or chained in two ways at once. Build them with
// the methods of Effects (which a handler's CommandContext carries) and
// chain side effects with the Then methods. Side effects run in order, after
// a successful write, with the new state; when the write fails they are
// skipped. The zero Effect is None.
type Effect[E, S any] struct {
	kind   EffectKind
	origin uint16 // which effect a CommandContext built this one from; 0 if none (see effectTracker)
	events []E
	then   []sideEffect[S]
	// reminders are set or cancelled with the events (reminders.go).
	reminders []ReminderChange
}

// EffectKind is what an effect does with its command.
type EffectKind uint8

const (
	// EffectNone persists nothing; its side effects run at once.
	EffectNone EffectKind = iota
	// EffectPersist stores events, then runs its side effects.
	EffectPersist
	// EffectUnhandled records the command as a dead letter.
	EffectUnhandled
	// EffectStash sets the command aside until UnstashAll.
	EffectStash
)

// String names the kind, as its constant without the Effect prefix.
func (k EffectKind) String() string {
	switch k {
	case EffectNone:
		return "None"
	case EffectPersist:
		return "Persist"
	case EffectUnhandled:
		return "Unhandled"
	case EffectStash:
		return "Stash"
	}
	return fmt.Sprintf("EffectKind(%d)", uint8(k))
}

// SideEffectKind names one step an effect takes after its events are stored.
type SideEffectKind uint8

const (
	// SideRun runs a function with the new state (ThenRun).
	SideRun SideEffectKind = iota
	// SideReply sends a reply (ThenReply, ThenReplyFrom, Reply).
	SideReply
	// SideNoReply sends nothing and says so (ThenNoReply, NoReply).
	SideNoReply
	// SideUnstashAll redelivers the stashed commands (ThenUnstashAll).
	SideUnstashAll
	// SideStop stops the entity (ThenStop, Stop).
	SideStop
)

// String names the kind, as its constant without the Side prefix.
func (k SideEffectKind) String() string {
	switch k {
	case SideRun:
		return "Run"
	case SideReply:
		return "Reply"
	case SideNoReply:
		return "NoReply"
	case SideUnstashAll:
		return "UnstashAll"
	case SideStop:
		return "Stop"
	}
	return fmt.Sprintf("SideEffectKind(%d)", uint8(k))
}

type sideEffect[S any] struct {
	kind  SideEffectKind
	run   func(S)
	reply func(S) Answer
}

// Answer is a reply ready to send: an address and a value. It hides the
// reply's type R, so that effect methods, which cannot have type
// parameters, accept replies of any type. Build one with To.
type Answer struct {
	value any
	send  func(entity.Replier)
}

// To is the answer v for the asker behind to; R is inferred from both.
func To[R any](to entity.ReplyTo[R], v R) Answer {
	return Answer{value: v, send: func(via entity.Replier) { entity.Reply(via, to, v) }}
}

// Value is the value the answer carries, for tests that inspect effects.
func (a Answer) Value() any { return a.value }

// Effects builds effects for events E and state S. It holds nothing: its
// only job is to carry E and S so that building an effect needs no type
// arguments. A command handler gets one in its CommandContext.
type Effects[E, S any] struct{}

// Persist stores events atomically, applies them to the state with the
// event handler, then runs the side effects. With no events it is None.
func (Effects[E, S]) Persist(events ...E) Effect[E, S] {
	if len(events) == 0 {
		return Effect[E, S]{}
	}
	// A copy: the caller's slice may change after the effect is built.
	return Effect[E, S]{kind: EffectPersist, events: slices.Clone(events)}
}

// None persists nothing; side effects run at once with the current state.
func (Effects[E, S]) None() Effect[E, S] { return Effect[E, S]{} }

// Unhandled persists nothing and records the command as a dead letter. It
// satisfies Config.EnforcedReplies: the asker gets no reply.
func (Effects[E, S]) Unhandled() Effect[E, S] { return Effect[E, S]{kind: EffectUnhandled} }

// Stash sets the command aside in the entity's stash until UnstashAll. A
// full stash stops the entity with an error matching stash.ErrFull. A
// stashed command is answered when it is handled again, so Stash satisfies
// Config.EnforcedReplies.
func (Effects[E, S]) Stash() Effect[E, S] { return Effect[E, S]{kind: EffectStash} }

// Stop persists nothing and stops the entity.
func (f Effects[E, S]) Stop() Effect[E, S] { return f.None().ThenStop() }

// UnstashAll persists nothing and redelivers every stashed command.
func (f Effects[E, S]) UnstashAll() Effect[E, S] { return f.None().ThenUnstashAll() }

// Reply persists nothing and sends a: ctx.Reply(eventsourced.To(c.ReplyTo, v)).
func (f Effects[E, S]) Reply(a Answer) Effect[E, S] { return f.None().ThenReply(a) }

// NoReply persists nothing and says that no reply is due now (one may come
// later, from another message); it satisfies Config.EnforcedReplies.
func (f Effects[E, S]) NoReply() Effect[E, S] { return f.None().ThenNoReply() }

// with returns a new effect with s appended. It never writes to eff's
// backing array, so eff and every other effect built from it are unchanged.
func (eff Effect[E, S]) with(s sideEffect[S]) Effect[E, S] {
	eff.then = append(eff.then[:len(eff.then):len(eff.then)], s)
	return eff
}

// ThenRun runs f with the new state once the events are stored.
func (eff Effect[E, S]) ThenRun(f func(state S)) Effect[E, S] {
	return eff.with(sideEffect[S]{kind: SideRun, run: f})
}

// ThenReply sends a once the events are stored.
func (eff Effect[E, S]) ThenReply(a Answer) Effect[E, S] {
	return eff.with(sideEffect[S]{kind: SideReply, reply: func(S) Answer { return a }})
}

// ThenReplyFrom sends the answer f builds from the new state once the
// events are stored.
func (eff Effect[E, S]) ThenReplyFrom(f func(state S) Answer) Effect[E, S] {
	return eff.with(sideEffect[S]{kind: SideReply, reply: f})
}

// ThenNoReply sends nothing; it says that no reply is due now, for the
// reader and for Config.EnforcedReplies.
func (eff Effect[E, S]) ThenNoReply() Effect[E, S] {
	return eff.with(sideEffect[S]{kind: SideNoReply})
}

// ThenUnstashAll redelivers every stashed command once the events are stored.
func (eff Effect[E, S]) ThenUnstashAll() Effect[E, S] {
	return eff.with(sideEffect[S]{kind: SideUnstashAll})
}

// ThenStop stops the entity once the events are stored and the side
// effects before it have run.
func (eff Effect[E, S]) ThenStop() Effect[E, S] {
	return eff.with(sideEffect[S]{kind: SideStop})
}

// Kind is what the effect does with its command.
func (eff Effect[E, S]) Kind() EffectKind { return eff.kind }

// Events are the events this effect persists (a copy).
func (eff Effect[E, S]) Events() []E { return slices.Clone(eff.events) }

// SideEffects are the kinds of the effect's side effects, in order.
func (eff Effect[E, S]) SideEffects() []SideEffectKind {
	kinds := make([]SideEffectKind, len(eff.then))
	for i, s := range eff.then {
		kinds[i] = s.kind
	}
	return kinds
}

// DecidesReply reports whether the effect settles its command's reply, as
// Config.EnforcedReplies requires: it replies, says NoReply, stashes the
// command to be handled again later, or refuses it as Unhandled (a dead
// letter, which is explicit enough: the command was not understood here).
func (eff Effect[E, S]) DecidesReply() bool {
	if eff.kind == EffectStash || eff.kind == EffectUnhandled {
		return true
	}
	for _, s := range eff.then {
		if s.kind == SideReply || s.kind == SideNoReply {
			return true
		}
	}
	return false
}
