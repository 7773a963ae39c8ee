package sharding

import (
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/internal/metrics"
	"github.com/shoal-dev/shoal/timers"
)

// coordinatorHost hosts one entity type's coordinator on this node while
// the node is the oldest Up, reachable member with the type's role (see
// docs/DESIGN.md, "Cores and runners"): it watches the view, starts the
// coordinator, whose runner takes the type's coordinator lease and runs
// the coordinator core and its downing, tells it to stop when the node no
// longer is the oldest, and restarts one that stopped by itself after a
// back-off. The Sharding value owns one per entity type, beside the type's
// Region, which routes and hosts shards and knows the coordinator only as
// an address.
type coordinatorHost struct {
	s         *Sharding
	typ       string
	role      string
	settings  Settings
	clock     timers.Clock
	tickEvery time.Duration         // how often a coordinator that stopped is looked after
	m         *metrics.ShardingType // nil when metrics are off

	mu sync.Mutex // serializes start and stop; guards what follows
	// coord is the coordinator, while this node hosts it; unlisten stops
	// its address listening.
	coord    *entity.Cell[Message]
	unlisten func()
	stopping bool // coord was told to stop; it is forgotten once done
	// A coordinator that stopped by itself (its store failed) is started
	// again after a back-off, not before next.
	restarts *backoff.ExponentialBackOff
	started  time.Time
	next     time.Time
	// downing is the coordinator's downing machine, kept across its
	// runners; created by start, then used only by the one runner that
	// runs (newCoordinatorRunner).
	downing *downing
	stopped bool         // the node's sharding stopped: no coordinator starts again
	tick    timers.Timer // the armed upkeep tick
}

func newCoordinatorHost(s *Sharding, typ, role string, settings Settings, tickEvery time.Duration) *coordinatorHost {
	return &coordinatorHost{s: s, typ: typ, role: role, settings: settings, clock: s.sys.Clock(), tickEvery: tickEvery,
		m: s.m.Type(typ), unlisten: func() {}}
}

// run hosts the coordinator if this node is the oldest, and starts the
// upkeep tick.
func (h *coordinatorHost) run() {
	h.membershipChanged()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.armTickLocked()
}

func (h *coordinatorHost) armTickLocked() {
	if !h.stopped {
		h.tick = h.clock.AfterFunc(h.tickEvery, h.upkeep)
	}
}

// upkeep runs on the tick: it restarts a coordinator that stopped by
// itself, and arms the next tick.
func (h *coordinatorHost) upkeep() {
	h.restartFailed()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.armTickLocked()
}

// oldestNode is where the type's coordinator runs: the oldest Up,
// reachable member with the type's role; zero when there is none.
func (h *coordinatorHost) oldestNode() cluster.UniqueAddress {
	m, _ := h.s.view.Load().Oldest(h.role)
	return m.Address
}

// membershipChanged hosts or stops the coordinator as the new view says,
// and shows the coordinator the view.
func (h *coordinatorHost) membershipChanged() {
	h.hostIfOldest()
	h.mu.Lock() // the upkeep tick may restart the coordinator meanwhile
	if h.coord != nil {
		_ = h.coord.Tell(membersChanged{members: h.s.members()})
	}
	h.mu.Unlock()
}

// hostIfOldest starts this node's coordinator when the node is the oldest
// with the role, and tells it to stop when it no longer is. It runs in
// membership callbacks, so it never waits: a coordinator stops after its
// writes in flight and its lease's Release, store calls that may take up
// to StoreTimeout each. One that is still stopping when the node is the
// oldest again is replaced on an upkeep tick once it is done.
func (h *coordinatorHost) hostIfOldest() {
	h.mu.Lock()
	defer h.mu.Unlock()
	oldest := h.oldestNode() == h.s.self && !h.stopped
	h.reapLocked()
	switch {
	case oldest && h.coord == nil && !h.clock.Now().Before(h.next):
		h.startLocked()
	case !oldest && h.coord != nil:
		h.tellToStopLocked()
	}
}

// restartFailed, on the upkeep tick, starts again a coordinator that
// stopped by itself, once its back-off has passed, or that stopped when
// told while the node became the oldest again. It never waits: it skips
// its turn while a start or stop is under way, and leaves stopping a
// coordinator to membership changes and shutdown.
func (h *coordinatorHost) restartFailed() {
	if !h.mu.TryLock() {
		return
	}
	defer h.mu.Unlock()
	h.reapLocked()
	if h.coord == nil && !h.stopped && h.oldestNode() == h.s.self && !h.clock.Now().Before(h.next) {
		h.startLocked()
	}
}

// reapLocked forgets a coordinator that stopped: one told to stop, and
// one that stopped by itself (it could not acquire or write its store),
// whose restart it schedules: without one, no shard would be allocated
// again.
func (h *coordinatorHost) reapLocked() {
	if h.coord == nil {
		return
	}
	select {
	case <-h.coord.Done():
	default:
		return
	}
	told := h.stopping
	h.forgetLocked()
	if told {
		return
	}
	now := h.clock.Now()
	if h.restarts == nil {
		h.restarts = storeBackOff(h.settings)
	} else if now.Sub(h.started) > 30*time.Second {
		h.restarts.Reset() // it ran a while: a new failure, not a loop
	}
	wait := h.restarts.NextBackOff()
	h.next = now.Add(wait)
	h.s.log.Warn("sharding: coordinator stopped; restarting it after a back-off", "entity_type", h.typ, "after", wait)
}

// forgetLocked forgets the coordinator, which is done.
func (h *coordinatorHost) forgetLocked() {
	h.unlisten()
	h.coord, h.stopping = nil, false
}

// stopCoordinator stops the coordinator and waits until it is done,
// without holding h.mu meanwhile, so that membership callbacks never wait
// for it.
func (h *coordinatorHost) stopCoordinator() {
	h.mu.Lock()
	co := h.coord
	if co != nil {
		h.tellToStopLocked()
	}
	h.mu.Unlock()
	if co == nil {
		return
	}
	<-co.Done()
	h.mu.Lock()
	if h.coord == co {
		h.forgetLocked()
	}
	h.mu.Unlock()
}

// stop ends the hosting for good, after the type's region left: the
// coordinator on this node goes last (Sharding.Shutdown), and no other
// starts here again.
func (h *coordinatorHost) stop() {
	h.mu.Lock()
	h.stopped = true
	if h.tick != nil {
		h.tick.Stop()
	}
	h.mu.Unlock()
	h.stopCoordinator()
}

// terminate stops the coordinator at once, as a crash would.
func (h *coordinatorHost) terminate() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stopped = true
	if h.tick != nil {
		h.tick.Stop()
	}
	if h.coord != nil {
		h.unlisten()
		h.coord.StopNow()
		<-h.coord.Done()
		h.coord = nil
	}
}

// tellToStopLocked unlistens the coordinator and tells it to stop, once;
// it is forgotten when done (reapLocked).
func (h *coordinatorHost) tellToStopLocked() {
	if h.stopping {
		return
	}
	h.stopping = true
	h.unlisten()
	h.unlisten = func() {} // unlistened once: the address may be another's next
	// In mailbox order, so that what regions already sent it (the last
	// ShardStopped of a graceful leave) is recorded before it goes.
	if err := h.coord.Tell(stopCoordinator{}); err != nil {
		h.coord.StopNow()
	}
}

func (h *coordinatorHost) startLocked() {
	if h.s.cfg.NodeLeases != nil && h.downing == nil {
		h.downing = newDowning(h.s.self, h.role, h.settings.DowningStableAfter)
	}
	addr := address{Node: h.s.self, Type: h.typ, Coordinator: true}
	props := &entity.Props[Message]{
		LocalOnly: true,
		Key:       entity.NewTypeKey[Message]("sharding-coordinator-" + h.typ),
		Create: func(ctx entity.Context[Message]) entity.Behavior[Message] {
			return newCoordinatorRunner(ctx, h)
		},
	}
	cell := entity.Spawn(h.s.sys, props, addr.String())
	stop, err := h.s.remote.Listen(addr, func(m Message) error { return cell.Tell(m) })
	if err != nil {
		h.s.log.Error("sharding: cannot listen as coordinator", "entity_type", h.typ, "err", err)
		cell.StopNow()
		return
	}
	h.coord, h.unlisten, h.started, h.stopping = cell, stop, h.clock.Now(), false
	_ = cell.Tell(membersChanged{members: h.s.members()})
}
