package eventsourced

import "github.com/shoal-dev/shoal/entity"

// Effect is what a command handler decides: which events to persist (if
// any) and what to do once they are stored. Effects are values; build them
// with Persist, None, Reply, Stash, Stop, UnstashAll or Unhandled and chain
// side effects with the Then methods. Side effects run in order, after a
// successful write, with the new state; when the write fails they are skipped.
// The zero Effect is None.
type Effect[E, S any] struct{ e *effect[E, S] }

type effectKind uint8

const (
	kindNone effectKind = iota
	kindPersist
	kindUnhandled
	kindStash
)

type effect[E, S any] struct {
	kind   effectKind
	events []E
	then   []sideEffect[S]
}

type sideKind uint8

const (
	sideRun sideKind = iota
	sideReply
	sideUnstashAll
	sideStop
)

type sideEffect[S any] struct {
	kind  sideKind
	run   func(S)
	reply func(entity.Replier, S)
}

func newEffect[E, S any](kind effectKind) Effect[E, S] {
	return Effect[E, S]{e: &effect[E, S]{kind: kind}}
}

// Persist stores events atomically, applies them to the state with the event
// handler, then runs the side effects. With no events it is None.
func Persist[E, S any](events ...E) Effect[E, S] {
	if len(events) == 0 {
		return None[E, S]()
	}
	eff := newEffect[E, S](kindPersist)
	eff.e.events = events
	return eff
}

// None persists nothing; side effects run at once with the current state.
func None[E, S any]() Effect[E, S] { return newEffect[E, S](kindNone) }

// Unhandled persists nothing and records the command as a dead letter.
func Unhandled[E, S any]() Effect[E, S] { return newEffect[E, S](kindUnhandled) }

// Stash sets the command aside in the entity's stash until UnstashAll. A
// full stash stops the entity with an error matching stash.ErrFull.
func Stash[E, S any]() Effect[E, S] { return newEffect[E, S](kindStash) }

// Stop persists nothing and stops the entity.
func Stop[E, S any]() Effect[E, S] { return None[E, S]().ThenStop() }

// UnstashAll persists nothing and redelivers every stashed command.
func UnstashAll[E, S any]() Effect[E, S] { return None[E, S]().ThenUnstashAll() }

// Reply persists nothing and sends v to the asker behind to.
func Reply[E, S, R any](to entity.ReplyTo[R], v R) Effect[E, S] {
	return ThenReply(None[E, S](), to, func(S) R { return v })
}

// NoReply persists nothing and says, for the reader, that no reply is due.
func NoReply[E, S any]() Effect[E, S] { return None[E, S]() }

func (eff Effect[E, S]) with(s sideEffect[S]) Effect[E, S] {
	if eff.e == nil {
		eff = None[E, S]()
	}
	eff.e.then = append(eff.e.then, s)
	return eff
}

// ThenRun runs f with the new state once the events are stored.
func (eff Effect[E, S]) ThenRun(f func(state S)) Effect[E, S] {
	return eff.with(sideEffect[S]{kind: sideRun, run: f})
}

// ThenUnstashAll redelivers every stashed command once the events are stored.
func (eff Effect[E, S]) ThenUnstashAll() Effect[E, S] {
	return eff.with(sideEffect[S]{kind: sideUnstashAll})
}

// ThenStop stops the entity once the events are stored and the side
// effects before it have run.
func (eff Effect[E, S]) ThenStop() Effect[E, S] {
	return eff.with(sideEffect[S]{kind: sideStop})
}

// ThenNoReply adds nothing; it documents that no reply is due.
func (eff Effect[E, S]) ThenNoReply() Effect[E, S] { return eff }

// ThenReply sends f(new state) to the asker behind to once the events are
// stored. It is a function, not a method, because it introduces R.
func ThenReply[E, S, R any](eff Effect[E, S], to entity.ReplyTo[R], f func(state S) R) Effect[E, S] {
	return eff.with(sideEffect[S]{kind: sideReply, reply: func(r entity.Replier, s S) {
		entity.Reply(r, to, f(s))
	}})
}

// Events are the events this effect persists.
func (eff Effect[E, S]) Events() []E {
	if eff.e == nil {
		return nil
	}
	return eff.e.events
}
