package sharding

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/sharding/internal/protocol"
)

// regionHandle is what a region runner needs of a local shard's handle:
// the shard runner (shard.go) in production, the simulator's in its tests.
type regionHandle[C any] interface {
	comparable
	// deliverPending hands p to the shard (shardEffects.deliver).
	deliverPending(p pending[C], failFast, accepted bool) error
}

// regionEnv is the world a region's effects act on: the transport, the
// clock, the shards' lives and the log. Region implements it with real IO
// (regionIO); the simulator on its discrete-event world. The effects'
// order and the core's follow-up inputs (handOverRefused, flushRefused,
// unreachable, route) are regionEffects' own, so that both run the same
// decisions (docs/DESIGN.md, "Cores and runners").
type regionEnv[C any, S regionHandle[C]] interface {
	// send sends msg to the region or coordinator at to; an error of
	// ErrUnreachable says the transport refused it (the node is gone).
	send(to address, msg Message) error
	// forward sends p to the region on home, for shard.
	forward(home cluster.UniqueAddress, shard string, p pending[C]) error
	// newShard starts hosting shard; its handle is attached to the core.
	newShard(shard string) S
	// hosted looks a local shard up, off the region's write lock.
	hosted(shard string) (S, bool)
	// armTick makes the region's retry tick come after after.
	armTick(after time.Duration)
	// armRegister makes retryRegister(gen) come after after, replacing
	// the one armed before.
	armRegister(after time.Duration, gen uint64)
	// left: the leaving region hosts nothing and may stop.
	left()
	// gone: the region told the coordinator it is gone.
	gone()
	// deadLetter records p, refused with err, whose sender is not
	// waiting; from is the region that forwarded it, zero for this one.
	deadLetter(err error, p pending[C], from cluster.UniqueAddress, reason string)
	// note logs something the core ignored or dropped.
	note(level slog.Level, note string, args []any)
	// handOff stops the shard's entities through their stop message; the
	// region's core learns of the end through handedOff.
	handOff(sh S, shard string)
	// passivateIdle passivates the shard's entities idle for more than
	// ticks ticks at tick.
	passivateIdle(sh S, tick, ticks uint64)
	// terminate stops the shard's entities at once; the core learns of
	// the end through shardTerminated.
	terminate(sh S, shard string)
}

// regionEffects carries out a regionCore's effects through a regionEnv:
// the one effect switch of a region, run by Region and by the simulator.
type regionEffects[C any, S regionHandle[C]] struct {
	core *regionCore[C, S]
	env  regionEnv[C, S]
	typ  string                // the entity type, for errors
	self cluster.UniqueAddress // this node, for errors
}

// applyLocked carries out the core's effects in order, the region's
// write lock held. It returns the effects that run once the lock is
// released: idle passivation and hand-offs, which go through every
// entity of a shard and need not hold up the data path of other shards
// (the core buffers a shard's messages while it hands off).
func (x *regionEffects[C, S]) applyLocked() (later []regionEffect[C, S]) {
	for len(x.core.out) > 0 { // an effect may step the core again
		later = x.applyBatch(later)
	}
	return later
}

func (x *regionEffects[C, S]) applyBatch(later []regionEffect[C, S]) []regionEffect[C, S] {
	c, env := x.core, x.env
	out := c.out
	c.out = nil
	for i := range out {
		ef := &out[i]
		switch ef.kind {
		case regSend:
			to := address{Node: ef.node, Type: x.typ, Coordinator: ef.coordinator}
			if err := env.send(to, ef.msg); err != nil {
				if h, ok := ef.msg.(protocol.HandOver); ok && ef.handOver && errors.Is(err, ErrUnreachable) {
					c.handOverRefused(h.Shard, ef.node, h.Seq)
				}
				if _, ok := ef.msg.(protocol.Flush); ok && errors.Is(err, ErrUnreachable) {
					c.flushRefused(ef.node)
				}
			}
		case regForward:
			err := env.forward(ef.node, ef.shard, ef.p)
			if errors.Is(err, ErrUnreachable) {
				// Accepted here before: it waits again, for the home the
				// retry tick asks for.
				c.unreachable(ef.shard, ef.node)
				v, e := c.route(ef.shard, ef.p)
				err = x.sendRouted(v, e, ef.shard, ef.p, false, true)
			}
			if err != nil {
				env.deadLetter(err, ef.p, cluster.UniqueAddress{}, "buffered message not forwarded")
			}
		case regHost:
			c.attach(ef.shard, env.newShard(ef.shard))
		case regDeliver:
			sh, ok := c.local(ef.shard)
			if !ok {
				panic(fmt.Sprintf("sharding: %s: deliver to shard %s, which is not hosted", x.typ, ef.shard))
			}
			// Not failFast, but for the command of an ask forwarded here:
			// the sender of a buffered or forwarded message is not waiting
			// for this answer, an asker is (its asks fail at once).
			if err := sh.deliverPending(ef.p, ef.p.ask && !ef.accepted, ef.accepted); err != nil {
				env.deadLetter(err, ef.p, cluster.UniqueAddress{}, "forwarded or buffered message refused")
			}
		case regHandOff, regPassivateIdle, regTerminate:
			later = append(later, *ef)
		case regArmTick:
			env.armTick(ef.after)
		case regArmRegister:
			env.armRegister(ef.after, ef.tick)
		case regLeft:
			env.left()
		case regGone:
			env.gone()
		case regDeadLetter:
			env.deadLetter(ef.err, ef.p, ef.node, "forwarded message refused")
		case regNote:
			env.note(ef.level, ef.note, ef.args)
		default:
			panic(fmt.Sprintf("sharding: unknown region effect %d", ef.kind))
		}
	}
	if c.out == nil { // reuse the slice
		clear(out)
		c.out = out[:0]
	}
	return later
}

// runUnlocked carries out what applyLocked left for after the lock.
func (x *regionEffects[C, S]) runUnlocked(later []regionEffect[C, S]) {
	for _, ef := range later {
		sh, ok := x.env.hosted(ef.shard)
		if !ok {
			continue
		}
		switch ef.kind {
		case regHandOff:
			x.env.handOff(sh, ef.shard)
		case regPassivateIdle:
			x.env.passivateIdle(sh, ef.tick, ef.ticks)
		case regTerminate:
			x.env.terminate(sh, ef.shard)
		}
	}
}

// sendRouted carries out the core's verdict on p; the region's write
// lock is held. The sender learns of a home the transport cannot reach,
// and the core forgets that home (docs/DESIGN.md, "Homes are
// authoritative and can be unlearned").
func (x *regionEffects[C, S]) sendRouted(v routeVerdict, e *regionShard[C, S], shardID string, p pending[C], failFast, accepted bool) error {
	switch v {
	case routeLocal:
		return e.local.deliverPending(p, failFast, accepted)
	case routeRemote:
		err := x.env.forward(e.home, shardID, p)
		if errors.Is(err, ErrUnreachable) {
			x.core.unreachable(shardID, e.home)
		}
		return err
	case routeStopped:
		return fmt.Errorf("%w: %s on %s", ErrRegionStopped, x.typ, x.self)
	case routeFull:
		return fmt.Errorf("%w: %s holds %d messages for shards without a known home", ErrBufferFull, x.typ, x.core.buffered)
	}
	return nil // held
}
