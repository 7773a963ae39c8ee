package sharding

import (
	"errors"
	"fmt"

	"github.com/shoal-dev/shoal/entity"
)

// shardEnv is the world a shard's effects act on: the entities' lives,
// timers, the remember store and the dead letters. The shard runner
// implements it with real cells, clock and store (shardIO); the simulator
// on its discrete-event world. The effects' order and the core's
// follow-up inputs (attach, undelivered) are shardEffects' own, so that
// both run the same decisions (docs/DESIGN.md, "Cores and runners").
type shardEnv[C any, H comparable] interface {
	// spawn starts an incarnation of entityID; afterBackOff says it
	// follows a failure's back-off. false: the node may not host it any
	// more (it fenced itself), msgs are its to dispose of, and nothing
	// more is applied.
	spawn(entityID string, afterBackOff bool, msgs []C) (H, bool)
	// tell hands a buffered message to the new incarnation h before any
	// new mail; entity.ErrStopped says h stopped already.
	tell(h H, msg C) error
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
					switch err := env.tell(h, m); {
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
