package sharding

import (
	"context"
	"errors"
	"fmt"
	"github.com/shoal-dev/shoal/cluster"
	"log/slog"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/shoal-dev/shoal/cluster/lease"
	"github.com/shoal-dev/shoal/entity"
)

// stopCoordinator stops a coordinator after the messages queued before it.
type stopCoordinator struct{}

func (stopCoordinator) ProtocolMessage() {}

// newCoordinatorRunner returns the behavior that holds the coordinator
// lease, steps the core and does its IO.
func newCoordinatorRunner(ctx entity.Context[Message], r *coordinatorHost) entity.Behavior[Message] {
	cr := &coordinatorRunner{r: r, store: r.s.cfg.CoordinatorStore, timing: r.s.cfg.CoordinatorLease}
	cr.leaseLength = cr.timing.Length
	if r.s.cfg.NodeLeases != nil {
		// The host's machine (start), so that who counts towards the
		// majority survives a restart; only this runner touches it: the
		// last one is done before a new one starts.
		cr.down = r.downing.resume()
	}
	return cr.tryAcquire(ctx)
}

// coordinatorRunner is a coordinator's runner (docs/DESIGN.md, "Cluster and leases"): it acts only
// while it holds the type's coordinator lease. Until it gets the lease it
// retries (see acquireEvery) and drops what it is sent (regions retry);
// what comes while an acquisition is in flight waits for its answer.
// Once it holds it, a lease.Keeper on the coordinator's own timers (no
// goroutine of its own: idle, it owns none) renews it every RenewEvery and
// says when it no longer holds it: at the last successful renewal's start
// + Length − Margin, or at once when the store refuses a renewal. The
// runner then stops, and sends nothing from the moment it no longer holds
// the lease. Every store write carries the lease's epoch, which the store
// checks. Its store calls (acquire, read, renew, write, release) run off
// the entity worker, through PipeToSelf: the worker is shared by every
// entity of the node, and a slow store must hold up none of them.
type coordinatorRunner struct {
	r      *coordinatorHost
	store  CoordinatorStore
	timing lease.Timing

	epoch    uint64
	keeper   *lease.Keeper // nil until the lease is held
	renewing bool          // a renewal is under way
	due      time.Time     // when the renewal under way was due, for its lag
	// coordinatorEffects acts while the lease is held: the core, the
	// downing machine and the store-write pipeline.
	coordinatorEffects
	// retries paces the retries of a failed write.
	retries *backoff.ExponentialBackOff
	// acquiring: the Acquire, or the read of remembered shards after it,
	// is in flight; what comes meanwhile waits in the stash, in order,
	// as it waited in the mailbox when these calls ran on the worker.
	acquiring bool
	// releasing: it gives the lease up and stops once the store answered
	// (or at StoreTimeout), taking nothing else meanwhile.
	releasing bool
}

// acquireTick retries the acquisition of a lease someone else holds.
type acquireTick struct{}

// renewTick starts a renewal; fenceTick checks whether the lease ran out.
type (
	renewTick struct{}
	fenceTick struct{}
)

// renewed is a renewal's answer.
type renewed struct {
	start time.Time
	err   error
}

// acquired is an Acquire's answer; start is when it was sent.
type acquired struct {
	start  time.Time
	epoch  uint64
	shards map[string]Allocation
	err    error
}

// rememberedRead is the answer to the read of the shards of remembered
// entities.
type rememberedRead struct {
	shards []string
	err    error
}

// released is a Release's answer, or its timeout.
type released struct{ err error }

func (acquireTick) ProtocolMessage()    {}
func (renewTick) ProtocolMessage()      {}
func (fenceTick) ProtocolMessage()      {}
func (renewed) ProtocolMessage()        {}
func (acquired) ProtocolMessage()       {}
func (rememberedRead) ProtocolMessage() {}
func (released) ProtocolMessage()       {}

// tryAcquire starts acquiring the lease, or waits for it while downing
// keeps this side off it. Like every store call of the coordinator, the
// Acquire runs off the entity worker (a slow store would hold up every
// entity queued behind it); its answer comes back as acquired.
func (cr *coordinatorRunner) tryAcquire(ctx entity.Context[Message]) entity.Behavior[Message] {
	r := cr.r
	if cr.down != nil && cr.down.offLease(ctx.Clock().Now()) {
		// It stood down on the minority side: the majority's oldest
		// takes the lease meanwhile (see downing).
		ctx.Timers().StartSingleTimer("acquire", acquireTick{}, r.settings.RetryInterval)
		return cr
	}
	cr.acquiring = true
	store, typ, owner, ttl, timeout := cr.store, r.typ, r.s.self, cr.timing.Length, r.settings.StoreTimeout
	start := ctx.Clock().Now() // the fence counts from before the call
	ctx.PipeToSelf(func(c context.Context) Message {
		c, cancel := context.WithTimeout(c, timeout)
		defer cancel()
		epoch, shards, err := store.Acquire(c, typ, owner, ttl)
		return acquired{start: start, epoch: epoch, shards: shards, err: err}
	})
	return cr
}

// whileAcquiring takes m while the acquisition is in flight: its answers,
// and a stop, which ends it once the answer came without acting; the
// rest waits in the stash (dropped once full: regions retry).
func (cr *coordinatorRunner) whileAcquiring(ctx entity.Context[Message], m Message) entity.Behavior[Message] {
	r := cr.r
	switch m := m.(type) {
	case acquired:
		return cr.acquired(ctx, m)
	case rememberedRead:
		return cr.rememberedRead(ctx, m)
	case stopCoordinator:
		if cr.keeper != nil { // it holds the lease, and reads what it remembers
			return cr.release(ctx)
		}
		cr.stopping = true
		return entity.Same[Message]()
	case acquireTick:
		return entity.Same[Message]() // of no use: the answer comes
	}
	if cr.stopping {
		return entity.Same[Message]()
	}
	if err := ctx.Stash().Stash(m); err != nil {
		r.s.log.Debug("sharding: coordinator acquiring its lease; message dropped", "entity_type", r.typ, "err", err)
	}
	return entity.Same[Message]()
}

// acquired takes the answer of an Acquire: it starts acting, or waits
// while another node holds the lease; any other failure stops the
// coordinator, which the region restarts after a back-off. Told to stop
// meanwhile, it gives a granted lease back and stops, acting on nothing.
func (cr *coordinatorRunner) acquired(ctx entity.Context[Message], m acquired) entity.Behavior[Message] {
	r := cr.r
	cr.acquiring = false
	if errors.Is(m.err, ErrLeaseHeld) {
		if cr.stopping {
			return entity.Stopped[Message]()
		}
		r.s.log.Debug("sharding: coordinator lease held elsewhere; waiting", "entity_type", r.typ, "err", m.err)
		ctx.Timers().StartSingleTimer("acquire", acquireTick{}, cr.acquireAfter(m.err))
		ctx.Stash().UnstashAll() // taken as before the lease: dropped, views counted
		return entity.Same[Message]()
	}
	if m.err != nil {
		r.s.log.Error("sharding: cannot acquire the coordinator role", "entity_type", r.typ, "err", m.err)
		return entity.Stopped[Message]()
	}
	cr.epoch, cr.keeper = m.epoch, lease.NewKeeper(cr.timing)
	if !cr.granted(ctx, m.start) {
		r.s.log.Error("sharding: the coordinator lease was granted too late to use", "entity_type", r.typ, "epoch", m.epoch)
		return entity.Stopped[Message]()
	}
	if cr.stopping {
		return cr.release(ctx)
	}
	cr.core = newCoordinatorCore(r.s.self, m.epoch, m.shards, r.settings.Strategy, r.settings.MinMembers)
	cr.core.role = r.role
	cr.retries = storeBackOff(r.settings)
	if r.settings.RememberEntities {
		// Shards with remembered entities start without waiting for a
		// message, so their entities come back after the cluster restarts.
		cr.acquiring = true
		remember, typ, timeout := r.s.cfg.RememberStore, r.typ, r.settings.StoreTimeout
		ctx.PipeToSelf(func(c context.Context) Message {
			c, cancel := context.WithTimeout(c, timeout)
			defer cancel()
			shards, err := remember.Shards(c, typ)
			return rememberedRead{shards: shards, err: err}
		})
		return entity.Same[Message]()
	}
	return cr.begin(ctx)
}

// rememberedRead takes the shards of remembered entities, read once the
// lease was acquired, and starts acting.
func (cr *coordinatorRunner) rememberedRead(ctx entity.Context[Message], m rememberedRead) entity.Behavior[Message] {
	r := cr.r
	cr.acquiring = false
	if m.err != nil {
		r.s.log.Error("sharding: cannot read the shards of remembered entities", "entity_type", r.typ, "err", m.err)
		return entity.Stopped[Message]()
	}
	cr.core.startShards(m.shards)
	return cr.begin(ctx)
}

// begin starts acting once the lease is held: it arms the rebalance and
// downing timers, steps the core with the current view, then takes what
// waited for the acquisition, in order.
func (cr *coordinatorRunner) begin(ctx entity.Context[Message]) entity.Behavior[Message] {
	r := cr.r
	ctx.Timers().StartTimerWithFixedDelay("rebalance", rebalanceTick{}, r.settings.RebalanceInterval, r.settings.RebalanceInterval)
	if cr.down != nil {
		every := cr.pollEvery()
		ctx.Timers().StartTimerWithFixedDelay("downing", downingTick{}, every, every)
	}
	if next := cr.act(ctx, membersChanged{members: r.s.members()}); next != entity.Same[Message]() {
		return next
	}
	ctx.Stash().UnstashAll()
	return entity.Same[Message]()
}

// pollEvery is how often the downing machine's store calls go out: a
// quarter of RetryInterval or of the lease length, whichever is shorter,
// so that an expired node lease is seen a fraction of a lease after it
// expired (see downing.due).
func (cr *coordinatorRunner) pollEvery() time.Duration {
	return max(min(cr.r.settings.RetryInterval, cr.timing.Length)/4, time.Millisecond)
}

// acquireEvery is how often a coordinator retries the acquisition of a
// lease held elsewhere: every RetryInterval, but at least four times per
// lease length, so that a crashed holder's lease is taken over soon after
// it expired.
func (cr *coordinatorRunner) acquireEvery() time.Duration {
	return max(min(cr.r.settings.RetryInterval, cr.timing.Length/4), time.Millisecond)
}

// acquireAfter is when to try again after held refused an acquisition:
// acquireEvery, or just after the lease ends when the store said it ends
// sooner. A crashed oldest node's coordinator lease ends about when its
// node lease does, which is when this node's view made it the oldest: a
// retry an acquireEvery later would add up to that much to the failover
// (docs/DESIGN.md, "Leases and self-fencing").
func (cr *coordinatorRunner) acquireAfter(held error) time.Duration {
	every := cr.acquireEvery()
	if left, ok := lease.HeldFor(held); ok {
		return min(every, left+time.Millisecond)
	}
	return every
}

// granted records a successful acquisition or renewal that started at
// start and arms the renewal and fence timers; false once the lease is
// no longer held.
func (cr *coordinatorRunner) granted(ctx entity.Context[Message], start time.Time) bool {
	now := ctx.Clock().Now()
	if !cr.keeper.Granted(start, now) {
		return false
	}
	cr.due = cr.keeper.RenewAt()
	ctx.Timers().StartSingleTimer("renew", renewTick{}, cr.due.Sub(now))
	ctx.Timers().StartSingleTimer("fence", fenceTick{}, cr.keeper.FenceAt().Sub(now))
	return true
}

// holds reports whether the coordinator may act now.
func (cr *coordinatorRunner) holds(ctx entity.Context[Message]) bool {
	return cr.keeper.Holds(ctx.Clock().Now())
}

// renew starts a renewal, bounded by the fence time: past it, its answer
// would be of no use.
func (cr *coordinatorRunner) renew(ctx entity.Context[Message]) {
	if cr.renewing {
		return
	}
	cr.renewing = true
	start := ctx.Clock().Now()
	within := cr.keeper.FenceAt().Sub(start)
	typ, epoch, ttl, store := cr.r.typ, cr.epoch, cr.timing.Length, cr.store
	ctx.PipeToSelf(func(c context.Context) Message {
		c, cancel := context.WithTimeout(c, within)
		defer cancel()
		return renewed{start: start, err: store.Renew(c, typ, epoch, ttl)}
	})
}

// Receive implements entity.Behavior.
func (cr *coordinatorRunner) Receive(ctx entity.Context[Message], m Message) entity.Behavior[Message] {
	r := cr.r
	if cr.releasing {
		if m, ok := m.(released); ok {
			if m.err != nil {
				r.s.log.Warn("sharding: could not release the coordinator lease; the next coordinator waits for it to expire", "entity_type", r.typ, "err", m.err)
			}
			return entity.Stopped[Message]()
		}
		return entity.Same[Message]() // it stops: nothing more is taken
	}
	if cr.acquiring {
		return cr.whileAcquiring(ctx, m)
	}
	switch m.(type) {
	case stopCoordinator:
		if cr.keeper != nil && cr.pipe.held() && !cr.pipe.retrying() && cr.holds(ctx) {
			// What it decided before the stop is recorded and sent
			// before it goes (the last ShardStopped of a graceful
			// leave); bounded by StoreTimeout per batch, with no retry.
			cr.stopping = true
			return entity.Same[Message]()
		}
		return cr.release(ctx)
	case acquireTick:
		if cr.keeper == nil {
			return cr.tryAcquire(ctx)
		}
		return entity.Same[Message]()
	}
	if cr.keeper == nil {
		if m, ok := m.(membersChanged); ok && cr.down != nil {
			// Counted while it waits (see downing): memberlist may drop
			// a failed member from the view before the lease comes.
			cr.view = m.members
			cr.down.observe(m.members, nil, ctx.Clock().Now())
		}
		return entity.Same[Message]() // not the coordinator (yet): regions retry
	}
	switch m := m.(type) {
	case renewTick:
		cr.renew(ctx)
		return entity.Same[Message]()
	case renewed:
		cr.renewing = false
		switch {
		case m.err == nil:
			r.s.leaseM.Renewed(ctx.Clock().Now().Sub(cr.due))
			if !cr.granted(ctx, m.start) {
				return cr.lost(nil)
			}
		case lease.Refused(m.err):
			r.s.leaseM.Refused()
			cr.keeper.Refused()
			return cr.lost(m.err)
		default: // the store is unreachable or slow: try again soon
			r.s.leaseM.Failed()
			r.s.log.Warn("sharding: coordinator lease renewal failed; retrying", "entity_type", r.typ, "err", m.err)
			ctx.Timers().StartSingleTimer("renew", renewTick{}, cr.timing.RenewEvery/4)
		}
		return entity.Same[Message]()
	}
	if !cr.holds(ctx) {
		return cr.lost(nil)
	}
	if _, ok := m.(fenceTick); ok {
		return entity.Same[Message]() // a fence timer of an earlier renewal
	}
	if cr.stopping {
		if m, ok := m.(batchWritten); ok {
			return cr.written(ctx, m)
		}
		return entity.Same[Message]()
	}
	return cr.act(ctx, m)
}

// lost stops a coordinator that no longer holds its lease.
func (cr *coordinatorRunner) lost(err error) entity.Behavior[Message] {
	cr.r.s.log.Error("sharding: coordinator lease lost; stopping the coordinator", "entity_type", cr.r.typ, "epoch", cr.epoch, "err", err)
	return entity.Stopped[Message]()
}

// release stops the coordinator on a graceful stop, giving the lease up
// first, so that the next coordinator need not wait for it to expire. The
// Release runs off the entity worker; the coordinator stops when it
// answered, or at StoreTimeout should the store not heed its context,
// and takes nothing meanwhile.
func (cr *coordinatorRunner) release(ctx entity.Context[Message]) entity.Behavior[Message] {
	if cr.keeper == nil || !cr.holds(ctx) {
		return entity.Stopped[Message]()
	}
	cr.releasing = true
	store, typ, epoch, timeout := cr.store, cr.r.typ, cr.epoch, cr.r.settings.StoreTimeout
	ctx.Timers().StartSingleTimer("release", released{err: fmt.Errorf("sharding: release: no answer within %v", timeout)}, timeout)
	ctx.PipeToSelf(func(c context.Context) Message {
		c, cancel := context.WithTimeout(c, timeout)
		defer cancel()
		return released{err: store.Release(c, typ, epoch)}
	})
	return entity.Same[Message]()
}

// act steps the core with one message while the lease is held; its
// changes are written under the lease's epoch, through the pipeline,
// and its output sent once they committed (coordinatorEffects.act).
func (cr *coordinatorRunner) act(ctx entity.Context[Message], m Message) entity.Behavior[Message] {
	return cr.then(ctx, cr.coordinatorEffects.act(coordinatorIO{cr, ctx}, m))
}

// written takes the outcome of a batch (coordinatorEffects.written).
func (cr *coordinatorRunner) written(ctx entity.Context[Message], m batchWritten) entity.Behavior[Message] {
	return cr.then(ctx, cr.coordinatorEffects.written(coordinatorIO{cr, ctx}, m))
}

// then carries out a verdict of coordinatorEffects.
func (cr *coordinatorRunner) then(ctx entity.Context[Message], v coordVerdict) entity.Behavior[Message] {
	switch v {
	case coordStop:
		return entity.Stopped[Message]()
	case coordLost:
		return cr.lost(nil)
	case coordRelease:
		return cr.release(ctx)
	}
	return entity.Same[Message]()
}

// coordinatorIO is the production coordinatorEnv: the runner's entity
// context, its store calls off the worker (PipeToSelf), the transport.
type coordinatorIO struct {
	cr  *coordinatorRunner
	ctx entity.Context[Message]
}

func (io coordinatorIO) now() time.Time { return io.ctx.Clock().Now() }

func (io coordinatorIO) holds() bool { return io.cr.holds(io.ctx) }

func (io coordinatorIO) send(to cluster.UniqueAddress, msg Message) {
	r := io.cr.r
	if err := r.s.remote.Send(address{Node: to, Type: r.typ}, msg); err != nil {
		r.s.log.Debug("sharding: coordinator could not reach region", "entity_type", r.typ, "to", to, "err", err)
	}
}

func (io coordinatorIO) write(b *writeBatch) { io.cr.write(io.ctx, b) }

func (io coordinatorIO) retryWrites(err error) {
	r, after := io.cr.r, io.cr.retries.NextBackOff()
	r.s.log.Warn("sharding: coordinator store write failed; retrying", "entity_type", r.typ, "retry_in", after, "err", err)
	io.ctx.Timers().StartSingleTimer("store-retry", retryStoreWrites{}, after)
}

func (io coordinatorIO) writesCommitted() { io.cr.retries.Reset() }

func (io coordinatorIO) downCall(call downCall) {
	leases, timeout := io.cr.r.s.cfg.NodeLeases, io.cr.r.settings.StoreTimeout
	io.ctx.PipeToSelf(func(c context.Context) Message {
		c, cancel := context.WithTimeout(c, timeout)
		defer cancel()
		res := downResult{call: call}
		if call.down {
			res.err = leases.DownNode(c, call.node)
		} else {
			res.expired, res.err = leases.NodeLeaseExpired(c, call.node)
		}
		return res
	})
}

func (io coordinatorIO) rebalanced(n int) { io.cr.r.m.Rebalanced(n) }

func (io coordinatorIO) log(level slog.Level, msg string, args ...any) {
	io.cr.r.s.log.Log(context.Background(), level, msg, append([]any{"entity_type", io.cr.r.typ}, args...)...)
}

// maxHeldSteps bounds the steps whose messages wait for a store that
// fails (the stash's default capacity, which bounded them before the
// pipeline): past it the store has been down too long, and the
// coordinator stops rather than grow without end; its successor rebuilds
// from the store. While the store answers, however slowly, the steps held
// are those of one commit's time (at most StoreTimeout): a burst of them
// is load, not an outage (a stream of StopShards stopped the coordinator
// of TestFastPathFallsBackWhileShardsHandOff 1 run in 50).
const maxHeldSteps = 4096

// write writes batch b on a goroutine of its own, never on the entity
// worker that runs the coordinator (a slow commit would hold up every
// entity queued behind it), bounded by StoreTimeout and by the runner's
// life: a coordinator that stops (lease lost, deposed, terminated)
// cancels it. Its outcome comes back as a batchWritten.
func (cr *coordinatorRunner) write(ctx entity.Context[Message], b *writeBatch) {
	store, typ, epoch, timeout := cr.store, cr.r.typ, cr.epoch, cr.r.settings.StoreTimeout
	seq, changes := b.seq, b.changes
	ctx.PipeToSelf(func(c context.Context) Message {
		c, cancel := context.WithTimeout(c, timeout)
		defer cancel()
		return batchWritten{seq: seq, err: store.Update(c, typ, epoch, changes)}
	})
}

// retryStoreWrites makes a coordinator try its failed store writes again.
type retryStoreWrites struct{}

// batchWritten is the outcome of writing batch seq.
type batchWritten struct {
	seq uint64
	err error
}

func (retryStoreWrites) ProtocolMessage() {}
func (batchWritten) ProtocolMessage()     {}

// storeBackOff paces the retries of a coordinator's store: its writes, and
// its restarts when it cannot acquire the store.
func storeBackOff(st Settings) *backoff.ExponentialBackOff {
	return backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(st.RetryInterval),
		backoff.WithMaxInterval(30*time.Second),
		backoff.WithMaxElapsedTime(0))
}
