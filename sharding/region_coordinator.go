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
		r.coordRestarts = storeBackOff(r.settings)
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
	w := &coordinatorWrites{store: store, typ: r.typ, epoch: epoch, timeout: r.settings.StoreTimeout,
		retries: storeBackOff(r.settings), send: func(o outbound) {
			if err := r.s.cfg.Transport.Send(Address{Node: o.to, Type: r.typ}, o.msg); err != nil {
				r.s.log.Debug("sharding: coordinator could not reach region", "type", r.typ, "node", o.to, "err", err)
			}
		}}
	return entity.Receive(func(ctx entity.Context[Message], m Message) entity.Behavior[Message] {
		switch m.(type) {
		case stopCoordinator:
			return entity.Stopped[Message]()
		case retryStoreWrites:
			if !w.waiting() {
				return entity.Same[Message]()
			}
		case rebalanceTick:
			if w.waiting() {
				return entity.Same[Message]() // periodic: the next one comes
			}
			w.take(core.step(m))
		default:
			if w.waiting() {
				// After the decisions waiting for the store, in order.
				if err := ctx.Stash().Stash(m); err != nil {
					r.s.log.Error("sharding: coordinator store down too long; stopping coordinator", "type", r.typ, "err", err)
					return entity.Stopped[Message]()
				}
				return entity.Same[Message]()
			}
			w.take(core.step(m))
		}
		switch err := w.flush(); {
		case err == nil:
			ctx.Stash().UnstashAll()
		case errors.Is(err, ErrStaleEpoch):
			// Deposed: it must not announce what it could not record; its
			// successor rebuilds from the store.
			r.s.log.Error("sharding: coordinator deposed; stopping it", "type", r.typ, "err", err)
			return entity.Stopped[Message]()
		default:
			// Retried, not abandoned: stopping would lose the decisions
			// (a hand-off's end, shards waiting for a home), and a
			// successor would meet the same store.
			after := w.retries.NextBackOff()
			r.s.log.Warn("sharding: coordinator store write failed; retrying", "type", r.typ, "retry_in", after, "err", err)
			ctx.Timers().StartSingleTimer("store-retry", retryStoreWrites{}, after)
		}
		return entity.Same[Message]()
	})
}

// retryStoreWrites makes a coordinator try its failed store writes again.
type retryStoreWrites struct{}

func (retryStoreWrites) protocolMessage() {}

// coordinatorWrites holds one step's decisions until the store has them:
// its changes are written in order, and its messages sent only once all
// are; while they wait, the coordinator takes no other message.
type coordinatorWrites struct {
	store   CoordinatorStore
	typ     string
	epoch   uint64
	timeout time.Duration
	send    func(outbound)
	retries *backoff.ExponentialBackOff
	changes []change
	out     []outbound
}

func (w *coordinatorWrites) waiting() bool { return len(w.changes) > 0 }

// take queues a step's decisions; nothing may be waiting.
func (w *coordinatorWrites) take(changes []change, out []outbound) {
	w.changes, w.out = changes, out
}

// flush writes the waiting changes in order, then sends the messages that
// depend on them. On an error the changes not yet written still wait.
func (w *coordinatorWrites) flush() error {
	for len(w.changes) > 0 {
		c := w.changes[0]
		ctx, cancel := context.WithTimeout(context.Background(), w.timeout)
		var err error
		if c.region == "" {
			err = w.store.Deallocate(ctx, w.typ, w.epoch, c.shard)
		} else {
			err = w.store.Allocate(ctx, w.typ, w.epoch, c.shard, c.region)
		}
		cancel()
		if err != nil {
			return err
		}
		w.changes = w.changes[1:]
	}
	w.changes = nil
	w.retries.Reset()
	out := w.out
	w.out = nil
	for _, o := range out {
		w.send(o)
	}
	return nil
}

// storeBackOff paces the retries of a coordinator's store: its writes, and
// its restarts when it cannot acquire the store.
func storeBackOff(st Settings) *backoff.ExponentialBackOff {
	return backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(st.RetryInterval),
		backoff.WithMaxInterval(30*time.Second),
		backoff.WithMaxElapsedTime(0))
}
