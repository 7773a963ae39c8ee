package sharding

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/shoal-dev/shoal/cluster/lease"
	"github.com/shoal-dev/shoal/entity"
)

// The region's runner also hosts the type's coordinator while this node is
// the oldest with the role: it starts it, stops it when the node no longer
// is, and restarts one that stopped by itself after a back-off.

// hostCoordinatorIfOldest starts this node's coordinator when the node is
// the oldest with the role, and stops it when it no longer is.
func (r *Region[C]) hostCoordinatorIfOldest() {
	r.coordinated.Lock()
	defer r.coordinated.Unlock()
	stopping := r.isStopped()
	oldest := r.coordinatorNode() == r.s.self && !stopping
	r.reapFailedCoordinatorLocked()
	switch {
	case oldest && r.coord == nil && !r.clock.Now().Before(r.coordNext):
		r.startCoordinator()
	case !oldest && r.coord != nil:
		r.stopCoordinatorLocked()
	}
}

// restartFailedCoordinator, on the retry tick, starts again a coordinator
// that stopped by itself, once its back-off has passed. It never waits:
// the tick runs on one of the node's workers, which the coordinator may
// need in order to stop (with one worker, waiting would deadlock). So it
// skips its turn while a start or stop is under way, and leaves stopping a
// coordinator to membership changes and shutdown.
func (r *Region[C]) restartFailedCoordinator() {
	if !r.coordinated.TryLock() {
		return
	}
	defer r.coordinated.Unlock()
	stopping := r.isStopped()
	r.reapFailedCoordinatorLocked()
	if r.coord == nil && !stopping && r.coordinatorNode() == r.s.self && !r.clock.Now().Before(r.coordNext) {
		r.startCoordinator()
	}
}

// reapFailedCoordinatorLocked forgets a coordinator that stopped by itself
// (it could not acquire or write its store) and schedules its restart:
// without one, no shard would be allocated again.
func (r *Region[C]) reapFailedCoordinatorLocked() {
	if r.coord == nil {
		return
	}
	select {
	case <-r.coord.Done():
	default:
		return
	}
	r.unlistenCo()
	r.coord = nil
	now := r.clock.Now()
	if r.coordRestarts == nil {
		r.coordRestarts = backoff.NewExponentialBackOff(
			backoff.WithInitialInterval(r.settings.RetryInterval),
			backoff.WithMaxInterval(30*time.Second),
			backoff.WithMaxElapsedTime(0))
	} else if now.Sub(r.coordStarted) > 30*time.Second {
		r.coordRestarts.Reset() // it ran a while: a new failure, not a loop
	}
	wait := r.coordRestarts.NextBackOff()
	r.coordNext = now.Add(wait)
	r.s.log.Warn("sharding: coordinator stopped; restarting it after a back-off", "type", r.typ, "after", wait)
}

func (r *Region[C]) stopCoordinator() {
	r.coordinated.Lock()
	defer r.coordinated.Unlock()
	r.stopCoordinatorLocked()
}

func (r *Region[C]) stopCoordinatorLocked() {
	if r.coord == nil {
		return
	}
	r.unlistenCo()
	// In mailbox order, so that what regions already sent it (the last
	// ShardStopped of a graceful leave) is recorded before it goes.
	if err := r.coord.Tell(stopCoordinator{}); err != nil {
		r.coord.StopNow()
	}
	<-r.coord.Done()
	r.coord = nil
}

func (r *Region[C]) startCoordinator() {
	addr := Address{Node: r.s.self, Type: r.typ, Coordinator: true}
	props := &entity.Props[Message]{
		LocalOnly: true,
		Key:       entity.NewTypeKey[Message]("sharding-coordinator-" + r.typ),
		Create: func(ctx entity.Context[Message]) entity.Behavior[Message] {
			return newCoordinatorRunner(ctx, r)
		},
	}
	cell := entity.Spawn(r.s.sys, props, addr.String())
	stop, err := r.s.cfg.Transport.Listen(addr, func(m Message) error { return cell.Tell(m) })
	if err != nil {
		r.s.log.Error("sharding: cannot listen as coordinator", "type", r.typ, "err", err)
		cell.StopNow()
		return
	}
	r.coord, r.unlistenCo, r.coordStarted = cell, stop, r.clock.Now()
	_ = cell.Tell(membersChanged{members: r.s.cfg.Membership.Members()})
}

// stopCoordinator stops a coordinator after the messages queued before it.
type stopCoordinator struct{}

func (stopCoordinator) protocolMessage() {}

// newCoordinatorRunner returns the behavior that holds the coordinator
// lease, steps the core and does its IO.
func newCoordinatorRunner[C any](ctx entity.Context[Message], r *Region[C]) entity.Behavior[Message] {
	cr := &coordinatorRunner[C]{r: r, store: r.s.cfg.CoordinatorStore, timing: r.s.cfg.CoordinatorLease}
	if r.s.cfg.NodeLeases != nil {
		cr.down = newDowning()
	}
	return cr.tryAcquire(ctx)
}

// coordinatorRunner is a coordinator's runner (DESIGN §8): it acts only
// while it holds the type's coordinator lease. Until it gets the lease it
// retries every RetryInterval and drops what it is sent (regions retry);
// once it holds it, a Holder renews it, and the runner stops at once,
// sending nothing more, when the Holder says it no longer holds it. Every
// store write carries the lease's epoch, which the store checks.
type coordinatorRunner[C any] struct {
	r      *Region[C]
	store  CoordinatorStore
	timing lease.Timing

	epoch  uint64
	holder *lease.Holder // nil until the lease is held
	core   *coordinatorCore
	down   *downing // nil without Config.NodeLeases
	view   []Member // the latest membership view, unfiltered
}

// coordinatorFenced is the Holder's word that the lease is lost.
type coordinatorFenced struct{ err error }

func (coordinatorFenced) protocolMessage() {}

// acquireTick retries the acquisition of a lease someone else holds.
type acquireTick struct{}

func (acquireTick) protocolMessage() {}

// tryAcquire acquires the lease and starts acting, or waits for it while
// another node holds it; any other failure stops the coordinator, which
// the region restarts after a back-off.
func (cr *coordinatorRunner[C]) tryAcquire(ctx entity.Context[Message]) entity.Behavior[Message] {
	r := cr.r
	storeCtx, cancel := context.WithTimeout(context.Background(), r.settings.StoreTimeout)
	start := time.Now() // the Holder's clock: its fence counts from before the call
	epoch, shards, err := cr.store.Acquire(storeCtx, r.typ, r.s.self, cr.timing.Length)
	cancel()
	if errors.Is(err, ErrLeaseHeld) {
		r.s.log.Debug("sharding: coordinator lease held elsewhere; waiting", "type", r.typ, "err", err)
		ctx.Timers().StartSingleTimer("acquire", acquireTick{}, r.settings.RetryInterval)
		return cr
	}
	if err != nil {
		r.s.log.Error("sharding: cannot acquire the coordinator role", "type", r.typ, "err", err)
		return entity.Stopped[Message]()
	}
	self := ctx.Self()
	holder, err := lease.Hold(cr.timing, start, func(c context.Context) error {
		return cr.store.Renew(c, r.typ, epoch, cr.timing.Length)
	}, func(err error) { _ = self.Tell(coordinatorFenced{err: err}) })
	if err != nil { // the timing was validated by New
		r.s.log.Error("sharding: cannot hold the coordinator lease", "type", r.typ, "err", err)
		return entity.Stopped[Message]()
	}
	cr.epoch, cr.holder = epoch, holder
	cr.core = newCoordinatorCore(r.s.self, epoch, shards, r.settings.Strategy, r.settings.MinMembers)
	if r.settings.RememberEntities {
		// Shards with remembered entities start without waiting for a
		// message, so their entities come back after the cluster restarts.
		storeCtx, cancel := context.WithTimeout(context.Background(), r.settings.StoreTimeout)
		remembered, err := r.s.cfg.RememberStore.Shards(storeCtx, r.typ)
		cancel()
		if err != nil {
			r.s.log.Error("sharding: cannot read the shards of remembered entities", "type", r.typ, "err", err)
			return entity.Stopped[Message]()
		}
		cr.core.startShards(remembered)
	}
	ctx.Timers().StartTimerWithFixedDelay("rebalance", rebalanceTick{}, r.settings.RebalanceInterval, r.settings.RebalanceInterval)
	if cr.down != nil {
		every := max(r.settings.RetryInterval/4, time.Millisecond)
		ctx.Timers().StartTimerWithFixedDelay("downing", downingTick{}, every, every)
	}
	if next := cr.act(ctx, membersChanged{members: r.s.cfg.Membership.Members()}); next != entity.Same[Message]() {
		return next
	}
	return cr
}

// Receive implements entity.Behavior.
func (cr *coordinatorRunner[C]) Receive(ctx entity.Context[Message], m Message) entity.Behavior[Message] {
	switch m := m.(type) {
	case stopCoordinator:
		cr.release()
		return entity.Stopped[Message]()
	case coordinatorFenced:
		cr.r.s.log.Error("sharding: coordinator lease lost; stopping the coordinator", "type", cr.r.typ, "epoch", cr.epoch, "err", m.err)
		return entity.Stopped[Message]()
	case acquireTick:
		if cr.holder == nil {
			return cr.tryAcquire(ctx)
		}
		return entity.Same[Message]()
	}
	if cr.holder == nil {
		return entity.Same[Message]() // not the coordinator (yet): regions retry
	}
	return cr.act(ctx, m)
}

// OnSignal implements entity.SignalHandler: however the coordinator
// stops, it stops renewing.
func (cr *coordinatorRunner[C]) OnSignal(_ entity.Context[Message], sig entity.Signal) {
	if _, ok := sig.(entity.PostStop); ok && cr.holder != nil {
		cr.holder.Stop()
	}
}

// release gives the lease up on a graceful stop, so that the next
// coordinator need not wait for it to expire.
func (cr *coordinatorRunner[C]) release() {
	if cr.holder == nil {
		return
	}
	cr.holder.Stop()
	if !cr.holder.Holds() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), cr.r.settings.StoreTimeout)
	defer cancel()
	if err := cr.store.Release(ctx, cr.r.typ, cr.epoch); err != nil {
		cr.r.s.log.Warn("sharding: could not release the coordinator lease; the next coordinator waits for it to expire", "type", cr.r.typ, "err", err)
	}
}

// act steps the core with one message while the lease is held, writes
// its changes under the lease's epoch, then sends its output.
func (cr *coordinatorRunner[C]) act(ctx entity.Context[Message], m Message) entity.Behavior[Message] {
	r := cr.r
	if cr.down != nil {
		switch m := m.(type) {
		case membersChanged:
			cr.view = m.members
			cr.down.observe(cr.view, cr.knownRegions())
			cr.startDowning(ctx)
			return cr.step(membersChanged{members: cr.down.filter(cr.view)})
		case downingTick:
			cr.startDowning(ctx)
			return entity.Same[Message]()
		case downResult:
			if m.err != nil {
				r.s.log.Warn("sharding: downing store call failed; retrying", "type", r.typ, "node", m.call.node, "down", m.call.down, "err", m.err)
			}
			if !cr.down.result(m) {
				return entity.Same[Message]()
			}
			r.s.log.Info("sharding: the node lease of a failed node expired; its shards move", "type", r.typ, "node", m.call.node)
			return cr.step(membersChanged{members: cr.down.filter(cr.view)})
		}
	}
	return cr.step(m)
}

func (cr *coordinatorRunner[C]) step(m Message) entity.Behavior[Message] {
	r := cr.r
	changes, out := cr.core.step(m)
	for _, c := range changes {
		storeCtx, cancel := context.WithTimeout(context.Background(), r.settings.StoreTimeout)
		var err error
		if c.region == "" {
			err = cr.store.Deallocate(storeCtx, r.typ, cr.epoch, c.shard)
		} else {
			err = cr.store.Allocate(storeCtx, r.typ, cr.epoch, c.shard, c.region)
		}
		cancel()
		if err != nil {
			// A deposed or failing coordinator must not announce what it
			// could not record; its successor rebuilds from the store.
			r.s.log.Error("sharding: coordinator store write failed; stopping coordinator", "type", r.typ,
				"deposed", errors.Is(err, ErrStaleEpoch), "err", err)
			return entity.Stopped[Message]()
		}
	}
	if len(out) > 0 && !cr.holder.Holds() {
		// The lease ran out (by this node's clock) while the writes ran: a
		// successor may be acting already.
		r.s.log.Error("sharding: coordinator lease lost; stopping the coordinator", "type", r.typ, "epoch", cr.epoch)
		return entity.Stopped[Message]()
	}
	for _, o := range out {
		if err := r.s.cfg.Transport.Send(Address{Node: o.to, Type: r.typ}, o.msg); err != nil {
			r.s.log.Debug("sharding: coordinator could not reach region", "type", r.typ, "node", o.to, "err", err)
		}
	}
	return entity.Same[Message]()
}

// knownRegions is every region the core knows of: registered, or named by
// an allocation.
func (cr *coordinatorRunner[C]) knownRegions() []string {
	known := cr.core.everyone()
	for r := range cr.core.byRegion {
		if !slices.Contains(known, r) {
			known = append(known, r)
		}
	}
	return known
}

// startDowning starts the store calls the downing machine asks for; each
// answers with a downResult.
func (cr *coordinatorRunner[C]) startDowning(ctx entity.Context[Message]) {
	leases, timeout := cr.r.s.cfg.NodeLeases, cr.r.settings.StoreTimeout
	for _, call := range cr.down.due() {
		ctx.PipeToSelf(func(c context.Context) Message {
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
}
