package eventsourced

import (
	"errors"
	"fmt"
)

// ErrEffectDropped matches the stop reason of an entity whose command
// handler built an effect with its CommandContext and then returned
// another: the handler meant the dropped effect to act, and effects act
// only when returned. See DroppedEffectError.
var ErrEffectDropped = errors.New("eventsourced: effect built but not returned")

// DroppedEffectError is why an entity stopped after its command handler
// dropped an effect. Persist, Stash, Stop, UnstashAll and Reply of a
// CommandContext build effects, which do nothing until the handler returns
// them, whereas ctx.Passivate, ctx.Timers and ctx.PipeToSelf act at once:
//
//	ctx.Stop()           // builds a stop effect, then drops it
//	return ctx.None()    // the entity would carry on
//
// Rather than run either effect and guess, the entity stops with this
// error and fails the command's asks; the handler is to return the effect
// it built (return ctx.Stop()), or chain it (ctx.Persist(e).ThenStop()).
// None, NoReply and Unhandled are not checked: they do nothing by
// themselves, so a handler may start from one and return another.
type DroppedEffectError struct {
	PersistenceID string
	Command       string // the command's type
	Built         string // the first effect built and dropped, by its builder: "Stop", "Persist", ...
	Returned      EffectKind
}

// Error implements error.
func (e *DroppedEffectError) Error() string {
	return fmt.Sprintf("%v: %s: the handler of %s built a %s effect and returned a %s effect instead; "+
		"effects act only when returned (return ctx.%s(...) or chain it, e.g. ctx.Persist(e).ThenStop())",
		ErrEffectDropped, e.PersistenceID, e.Command, e.Built, e.Returned, e.Built)
}

// Unwrap gives ErrEffectDropped.
func (e *DroppedEffectError) Unwrap() error { return ErrEffectDropped }

// builder names the CommandContext method that built an effect.
type builder uint8

const (
	builtNothing builder = iota
	builtPersist
	builtStash
	builtStop
	builtUnstashAll
	builtReply
)

func (b builder) String() string {
	switch b {
	case builtPersist:
		return "Persist"
	case builtStash:
		return "Stash"
	case builtStop:
		return "Stop"
	case builtUnstashAll:
		return "UnstashAll"
	case builtReply:
		return "Reply"
	}
	return "no"
}

// effectTracker counts the effects a behavior's CommandContext builds, so
// that Receive can tell whether the handler returned the one it built.
// Each built effect carries its number (Effect.origin), which chaining
// keeps. It lives in the behavior, in the padding after its recovering
// flag, so that an idle entity is no larger for it; its 16-bit numbers wrap,
// which at worst lets a handler that returns an effect built 65536 effects
// earlier hide one dropped now.
type effectTracker struct {
	built uint16  // effects built so far, by this incarnation (wrapping)
	start uint16  // built when the current handler started
	first builder // the first effect the current handler built
}

// note numbers a newly built effect; a nil tracker (a CommandContext made
// by hand, in a test) numbers nothing.
func (t *effectTracker) note(b builder) uint16 {
	if t == nil {
		return 0
	}
	if t.built == t.start {
		t.first = b
	}
	t.built++
	return t.built
}

// dropped reports which effect the handler built and did not return, if
// any: it built more than one (effects do not combine, so one was
// dropped), or one that is not the returned effect.
func (t *effectTracker) dropped(returned uint16) (builder, bool) {
	switch n := t.built - t.start; {
	case n == 0:
		return builtNothing, false
	case n == 1 && returned == t.built:
		return builtNothing, false
	}
	return t.first, true
}

func tracked[E, S any](t *effectTracker, b builder, eff Effect[E, S]) Effect[E, S] {
	if eff.kind == EffectNone && len(eff.then) == 0 {
		return eff // Persist of no events is None
	}
	eff.origin = t.note(b)
	return eff
}

// Persist is Effects.Persist; the handler must return it (or an effect
// chained from it).
func (c CommandContext[C, E, S]) Persist(events ...E) Effect[E, S] {
	return tracked(c.track, builtPersist, c.Effects.Persist(events...))
}

// Stop is the effect that persists nothing and stops the entity. It acts
// only when the handler returns it; ctx.Context.Stop() stops at once.
func (c CommandContext[C, E, S]) Stop() Effect[E, S] {
	return tracked(c.track, builtStop, c.Effects.Stop())
}

// Stash is the effect that sets the command aside until UnstashAll. It acts
// only when the handler returns it; ctx.Context.Stash() is the stash itself.
func (c CommandContext[C, E, S]) Stash() Effect[E, S] {
	return tracked(c.track, builtStash, c.Effects.Stash())
}

// UnstashAll is Effects.UnstashAll; the handler must return it (or an
// effect chained from it).
func (c CommandContext[C, E, S]) UnstashAll() Effect[E, S] {
	return tracked(c.track, builtUnstashAll, c.Effects.UnstashAll())
}

// Reply is Effects.Reply; the handler must return it (or an effect chained
// from it). entity.Reply sends at once.
func (c CommandContext[C, E, S]) Reply(a Answer) Effect[E, S] {
	return tracked(c.track, builtReply, c.Effects.Reply(a))
}
