package sharding

import (
	"context"
	"errors"
	"time"

	"github.com/cenkalti/backoff/v4"

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

// newCoordinatorRunner acquires the coordinator role in the store and
// returns the behavior that steps the core and does its IO.
func newCoordinatorRunner[C any](ctx entity.Context[Message], r *Region[C]) entity.Behavior[Message] {
	store := r.s.cfg.CoordinatorStore
	storeCtx, cancel := context.WithTimeout(context.Background(), r.settings.StoreTimeout)
	epoch, shards, err := store.Acquire(storeCtx, r.typ, r.s.self)
	cancel()
	if err != nil {
		r.s.log.Error("sharding: cannot acquire the coordinator role", "type", r.typ, "err", err)
		return entity.Stopped[Message]()
	}
	core := newCoordinatorCore(r.s.self, epoch, shards, r.settings.Strategy, r.settings.MinMembers)
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
		core.startShards(remembered)
	}
	ctx.Timers().StartTimerWithFixedDelay("rebalance", rebalanceTick{}, r.settings.RebalanceInterval, r.settings.RebalanceInterval)
	return entity.Receive(func(ctx entity.Context[Message], m Message) entity.Behavior[Message] {
		if _, ok := m.(stopCoordinator); ok {
			return entity.Stopped[Message]()
		}
		changes, out := core.step(m)
		for _, c := range changes {
			storeCtx, cancel := context.WithTimeout(context.Background(), r.settings.StoreTimeout)
			var err error
			if c.region == "" {
				err = store.Deallocate(storeCtx, r.typ, epoch, c.shard)
			} else {
				err = store.Allocate(storeCtx, r.typ, epoch, c.shard, c.region)
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
		for _, o := range out {
			if err := r.s.cfg.Transport.Send(Address{Node: o.to, Type: r.typ}, o.msg); err != nil {
				r.s.log.Debug("sharding: coordinator could not reach region", "type", r.typ, "node", o.to, "err", err)
			}
		}
		return entity.Same[Message]()
	})
}
