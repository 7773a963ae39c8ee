package sharding

import (
	"errors"
	"fmt"
	"time"

	"github.com/shoal-dev/shoal/entity"
	"go.opentelemetry.io/otel/trace"
)

// shardEnv is the world a shard's effects act on: the entities' lives,
// timers, the remember store and the dead letters. The shard runner
// implements it with real cells, clock and store (shardIO); the simulator
// on its discrete-event world. The effects' order, the delivery's verdicts
// and the core's follow-up inputs (attach, undelivered, told) are
// shardEffects' own, so that both run the same decisions (docs/DESIGN.md,
// "Cores and runners").
type shardEnv[C any, H comparable] interface {
	// now is the node's clock.
	now() time.Time
	// acting returns nil while the node may act on the entity path.
	// Otherwise it no longer holds its node lease: msg is the
	// environment's to dispose of, and deliver refuses it with the error.
	acting(msg C) error
	// bufferFull is the error of a message refused because entityID's
	// buffer is full (ErrBufferFull).
	bufferFull(entityID string) error
	// unavailable is the error of a fail-fast message refused because
	// entityID backs off until until after failing with cause
	// (an *UnavailableError).
	unavailable(entityID string, until time.Time, cause error) error
	// spawn starts an incarnation of entityID; afterBackOff says it
	// follows a failure's back-off. false: the node may not host it any
	// more (it fenced itself), msgs are its to dispose of, and nothing
	// more is applied.
	spawn(entityID string, afterBackOff bool, msgs []C) (H, bool)
	// tell hands msg to the incarnation h, with the trace context parent
	// (nil for none); entity.ErrStopped says h stopped already (its
	// Stopped report is still to come).
	tell(h H, msg C, parent *trace.SpanContext) error
	// started: h's buffer is in; new mail may bypass the shard now.
	started(h H)
	// deadLetter records msg for entityID, refused with err.
	deadLetter(err error, entityID string, msg C, reason string)
	// sendStop sends h its stop message (passivation or hand-off).
	sendStop(ef *shardEffect[C, H])
	// forceStop stops h at once.
	forceStop(ef *shardEffect[C, H])
	// armTimer arms timer ef.gen, which steps the core with timerFired.
	armTimer(ef *shardEffect[C, H])
	cancelTimer(gen uint64)
	// remember queues a remember-entities write, stored in order.
	remember(entityID string, add bool)
	// refuseAsks fails the asks among ef.msgs: the entity backs off.
	refuseAsks(ef *shardEffect[C, H])
	// handedOff: every entity stopped; leftover goes back to the region
	// once the remember writes queued so far are stored.
	handedOff(leftover []pending[C])
}

// shardEffects carries out a shardCore's effects through a shardEnv: the
// one effect switch of a shard, run by the shard runner and by the
// simulator. Its caller holds the shard's lock.
type shardEffects[C any, H comparable] struct {
	core *shardCore[C, H]
	env  shardEnv[C, H]
}

// deliver hands msg to the entity, starting it if needed; with start it
// only makes sure the entity runs. With failFast an entity backing off
// refuses msg at once with an UnavailableError (see Ask); otherwise msg
// waits for the next incarnation, unless the entity's buffer is full
// (ErrBufferFull). With accepted (a message the region accepted earlier)
// the buffer's limit does not apply. tick is the region's idle tick;
// parent, nil for none, is the trace context msg carries to its handler;
// a message the shard holds for the entity's next incarnation leaves it
// behind (docs/DESIGN.md, "Tracing"). It is the shard runner's delivery,
// called per message off the fast path, and the simulator's.
func (x *shardEffects[C, H]) deliver(entityID string, msg C, start, failFast, accepted bool, tick uint64, parent *trace.SpanContext) error {
	c, env := x.core, x.env
	if err := env.acting(msg); err != nil {
		return err
	}
	if start {
		c.startEntity(entityID, env.now())
		x.apply()
		return nil
	}
	verdict, h := c.deliver(entityID, msg, failFast, accepted, tick)
	if len(c.out) > 0 {
		x.apply()
	}
	switch verdict {
	case deliverHeld:
		return nil
	case deliverBufferFull:
		return env.bufferFull(entityID)
	case deliverUnavailable:
		until, cause := c.backOffOf(entityID)
		return env.unavailable(entityID, until, cause)
	case deliverTellNew:
		h = c.handle(entityID)
	}
	if err := env.tell(h, msg, parent); err != nil {
		if !errors.Is(err, entity.ErrStopped) {
			if accepted {
				// Its sender was told it was taken: a dead letter, not a
				// log line (a full mailbox, say the region drained more
				// mail for one entity than a recovering one holds).
				env.deadLetter(err, entityID, msg, "accepted message refused by the entity: "+err.Error())
				return nil
			}
			return err // the message itself is refused: a full mailbox, no codec
		}
		// Stopped but not yet reported: keep msg for the next incarnation.
		if !c.undelivered(entityID, msg, accepted, failFast) {
			return env.bufferFull(entityID)
		}
	}
	c.told(entityID, tick)
	return nil
}

// apply carries out the core's effects in order, and those they queue.
func (x *shardEffects[C, H]) apply() {
	c, env := x.core, x.env
	for len(c.out) > 0 {
		out := c.out
		c.out = nil
		for i := range out {
			ef := &out[i]
			switch ef.kind {
			case effStart:
				h, ok := env.spawn(ef.entityID, ef.afterBackOff, ef.msgs)
				if !ok {
					return
				}
				c.attach(ef.entityID, h)
				// The buffer, accepted under bufferLimit, fits the new
				// mailbox and goes in before any new mail (the shard's
				// lock is held). What it refuses all the same (it sent
				// itself mail first, a message the region had accepted
				// past the limit, a codec error under forced
				// serialization) is a counted dead letter.
				for _, m := range ef.msgs {
					switch err := env.tell(h, m, nil); {
					case errors.Is(err, entity.ErrStopped):
						c.undelivered(ef.entityID, m, true, false)
					case err != nil:
						env.deadLetter(err, ef.entityID, m, "buffered message refused by the new incarnation: "+err.Error())
					}
				}
				env.started(h)
			case effSendStop:
				env.sendStop(ef)
			case effForceStop:
				env.forceStop(ef)
			case effArmTimer:
				env.armTimer(ef)
			case effCancelTimer:
				env.cancelTimer(ef.gen)
			case effRemember:
				env.remember(ef.entityID, ef.add)
			case effRefuseAsks:
				env.refuseAsks(ef)
			case effHandedOff:
				env.handedOff(ef.leftover)
			default:
				panic(fmt.Sprintf("sharding: unknown shard effect %d", ef.kind))
			}
		}
		// Effects applied above queue none, mostly; reuse the slice
		// unless they did.
		if c.out == nil {
			clear(out)
			c.out = out[:0]
		}
	}
}
