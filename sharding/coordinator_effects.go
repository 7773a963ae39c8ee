package sharding

import (
	"errors"
	"log/slog"
	"time"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/sharding/internal/protocol"
)

// coordinatorEnv is the world a coordinator acts on while it holds its
// lease: the clock, the transport, the store and the log. The
// coordinator runner implements it with an entity's context, PipeToSelf
// and timers (coordinatorIO); the simulator on its discrete-event world.
// What the coordinator decides on (the downing machine's filter, the
// pipeline's order of writes and messages, when to stop) is
// coordinatorEffects' own, so that both run the same decisions
// (docs/DESIGN.md, "Cores and runners").
type coordinatorEnv interface {
	now() time.Time
	// holds reports whether the coordinator lease is held now.
	holds() bool
	// send sends msg to the region on to; a failure is the region's to
	// recover from (it retries).
	send(to cluster.UniqueAddress, msg Message)
	// write stores batch b under the lease's epoch; its outcome comes
	// back as a batchWritten.
	write(b *writeBatch)
	// retryWrites makes a retryStoreWrites come after the next back-off;
	// err is the failure that asks for it.
	retryWrites(err error)
	// writesCommitted resets that back-off.
	writesCommitted()
	// downCall makes a downing store call; its outcome comes back as a
	// downResult.
	downCall(call downCall)
	// rebalanced counts the hand-offs a rebalance started.
	rebalanced(n int)
	log(level slog.Level, msg string, args ...any)
}

// coordVerdict is what a coordinator's runner does after a step.
type coordVerdict uint8

const (
	coordGoOn    coordVerdict = iota
	coordStop                 // stop now, the lease kept to expire (deposed, store down too long)
	coordLost                 // the lease is no longer held: stop now
	coordRelease              // give the lease up, then stop
)

// coordinatorEffects is a coordinator acting while it holds its lease:
// it steps the core, filters the membership through the downing machine,
// and carries out the core's output through the pipeline (its writes in
// order, each step's messages once its changes committed).
// coordinatorLife owns the lease and the coordinator's life around it.
type coordinatorEffects struct {
	core *coordinatorCore
	// pipe holds the store writes and the messages waiting for them.
	pipe coordinatorPipeline
	down *downing         // nil without Config.NodeLeases
	view []cluster.Member // the latest membership view, unfiltered
	// leaseLength is the coordinator lease's Length (see downing.standDown).
	leaseLength time.Duration
	// stopping: told to stop while writes (or the acquisition) were in
	// flight; it stops once they ended, taking nothing else meanwhile.
	stopping bool
	// downFailing: the last downing store call failed. Only the first
	// failure of a run is a warning: the calls repeat every poll per
	// member while the node-lease store is down.
	downFailing bool
}

// act steps the coordinator with one message while the lease is held;
// membership views and downing go through the downing machine, which the
// core sees only filtered.
func (x *coordinatorEffects) act(env coordinatorEnv, m Message) coordVerdict {
	if x.down != nil {
		switch m := m.(type) {
		case membersChanged:
			x.view = m.members
			x.down.observe(x.view, x.core.knownRegions(), env.now())
			x.startDowning(env)
			return x.step(env, membersChanged{members: x.down.filter(x.view, x.core.knownRegions())})
		case downingTick:
			if x.down.standDown(env.now(), x.leaseLength) {
				// The minority side: give the lease to the majority's
				// coordinator, which downs this side (see downing).
				env.log(slog.LevelWarn, "sharding: coordinator on the minority side of a partition; standing down", "other_side", x.down.theirsSig)
				return coordRelease
			}
			x.startDowning(env)
			return coordGoOn
		case downResult:
			switch {
			case m.err != nil:
				level := slog.LevelWarn
				if x.downFailing {
					level = slog.LevelDebug
				}
				x.downFailing = true
				env.log(level, "sharding: downing store call failed; retrying", "member", m.call.node, "down", m.call.down, "err", m.err)
			case x.downFailing:
				x.downFailing = false
				env.log(slog.LevelInfo, "sharding: downing store calls succeed again")
			}
			if !x.down.result(m, env.now()) {
				return coordGoOn
			}
			env.log(slog.LevelInfo, "sharding: the node lease of a failed node expired; its shards move", "member", m.call.node)
			return x.step(env, membersChanged{members: x.down.filter(x.view, x.core.knownRegions())})
		}
	}
	return x.step(env, m)
}

// step steps the core, even while a batch is in flight: the step's
// changes join the pending batch and its messages wait for their commit
// (coordinatorPipeline), but for what may go at once.
func (x *coordinatorEffects) step(env coordinatorEnv, m Message) coordVerdict {
	p := &x.pipe
	switch m := m.(type) {
	case batchWritten:
		return x.written(env, m)
	case retryStoreWrites:
		if b := p.retry(); b != nil {
			env.write(b)
		}
		return coordGoOn
	case rebalanceTick:
		if p.retrying() {
			return coordGoOn // the store is in trouble; the next tick comes
		}
	}
	changes, out := x.core.step(m)
	switch m.(type) {
	case rebalanceTick, protocol.RebalanceShards: // the strategy's and an operator's
		env.rebalanced(x.core.rebalanced)
	}
	x.sendAll(env, p.take(m, changes, out))
	if p.retrying() && p.heldSteps() > maxHeldSteps {
		env.log(slog.LevelError, "sharding: coordinator store down too long; stopping coordinator", "held_steps", p.heldSteps())
		return coordStop
	}
	if b := p.next(); b != nil {
		env.write(b)
	}
	return coordGoOn
}

// written takes the outcome of a batch: on success, sends what it
// released and writes the next batch; a stale epoch stops the
// coordinator; any other failure is retried after a back-off.
func (x *coordinatorEffects) written(env coordinatorEnv, m batchWritten) coordVerdict {
	p := &x.pipe
	switch {
	case m.err == nil:
		out := p.committed(m.seq)
		if len(out) > 0 && !env.holds() {
			return coordLost
		}
		x.sendAll(env, out)
		env.writesCommitted()
		if b := p.next(); b != nil {
			env.write(b)
		} else if x.stopping && !p.held() {
			return coordRelease
		}
	case errors.Is(m.err, ErrStaleEpoch):
		// Deposed: it must not announce what it could not record; its
		// successor rebuilds from the store.
		env.log(slog.LevelError, "sharding: coordinator deposed; stopping it", "err", m.err)
		return coordStop
	default:
		if !p.failed(m.seq) {
			return coordGoOn
		}
		if x.stopping {
			// Stopping is bounded: no retries. What was not written
			// was not announced either; the successor rebuilds from
			// the store.
			env.log(slog.LevelWarn, "sharding: coordinator stops with store writes that failed", "err", m.err)
			return coordRelease
		}
		// Retried, not abandoned: stopping would lose the decisions (a
		// hand-off's end, shards waiting for a home), and a successor
		// would meet the same store.
		env.retryWrites(m.err)
	}
	return coordGoOn
}

// sendAll sends a coordinator's messages, in order.
func (x *coordinatorEffects) sendAll(env coordinatorEnv, out []outbound) {
	for _, o := range out {
		env.send(o.to, o.msg)
	}
}

// startDowning makes the store calls the downing machine asks for; each
// answers with a downResult.
func (x *coordinatorEffects) startDowning(env coordinatorEnv) {
	for _, call := range x.down.due(env.now()) {
		env.downCall(call)
	}
}
