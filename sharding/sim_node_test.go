package sharding

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/cluster/lease"
	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/sharding/internal/protocol"
	"github.com/shoal-dev/shoal/stash"
)

// A simulated node: the real regionCore, shardCores and coordinatorCore,
// the runners' shipped effect switches and shard delivery (*_effects.go),
// the coordinator's shipped lease life (coordinatorLife), and around them
// runners that do what region.go, shard.go and coordinator_host.go do, on
// the simulator's clock and network instead of goroutines, timers and a
// transport. Every asynchronous hop of the real runners (a control
// mailbox, an entity's Stopped report, a store call) is an event here.
// As in production (node.go, lease.Holder, coordinator_runner.go), each
// node holds a node lease, renewed on its own drifting clock, and fences
// itself (stops everything at once, as a crash) when it cannot renew in
// time or the store refuses it; the coordinator acts only while it holds
// the coordinator lease, and downs failed members through the store,
// moving their shards once their lease expired in the store's time.

// simCmd is the simulated entity type's command: a numbered message from a sender.
type simCmd struct {
	Sender string
	Seq    int
}

type simNodeState uint8

const (
	nodeUp simNodeState = iota
	nodeLeaving
	nodeGone // left, or crashed
)

type simNode struct {
	w        *simWorld
	name     string
	state    simNodeState
	crashed  bool
	rate     float64 // clock drift: a local duration d takes d×rate of virtual time
	view     []cluster.Member
	viewLast time.Duration // per-node FIFO of membership views
	// viewSeq numbers the views published to the node, viewApplied is
	// the last one it took: a view never replaces a newer one.
	viewSeq, viewApplied uint64
	region               *regionCore[simCmd, *simShard]
	fx                   regionEffects[simCmd, *simShard] // the runner's effect switch
	stopped              bool                             // the region stopped and no longer listens
	// stoppedLate: its leave ran past the deadline (Shutdown's context)
	// and stopped it: what is still on its way to it is lost, as to a
	// node that crashed.
	stoppedLate bool
	leftAt      time.Duration // when its leave began
	// regionGone: the region reported itself gone (regGone), once the
	// entities of its terminated shards stopped.
	regionGone bool

	// The node lease (lease.Holder in production): held from the join,
	// renewed every RenewEvery; by the Keeper, on the node's own clock,
	// the node fences itself when it could not renew in time or the store
	// refused (it was downed).
	lease    *lease.Keeper
	renewing bool

	coord        *simCoord
	coordSerial  int
	coordNext    time.Duration // a failed coordinator restarts no earlier
	coordRestart int           // back-offs since the last reset
	downing      *downing      // the coordinator's downing machine, kept across coordinators (coordinatorHost.downing)
	coordStarted time.Duration

	// frozenUntil: the node is paused (faultPauses) until then; what
	// comes for it meanwhile waits (later), each source in its order.
	frozenUntil time.Duration
	laterLast   map[string]time.Duration
}

// frozen reports whether the node is paused now.
func (n *simNode) frozen() bool { return n.w.clock.now < n.frozenUntil }

// later runs fn once the node resumes, after what the same source (a
// link, the views, the timers) queued before it, at a time of the PRNG's
// choosing among the other sources'. A node that no longer holds its
// lease then fences first, and fn finds it gone.
func (n *simNode) later(source string, fn func()) {
	if n.laterLast == nil {
		n.laterLast = map[string]time.Duration{}
	}
	at := max(n.frozenUntil+n.w.rng.between(0, time.Millisecond), n.laterLast[source])
	n.laterLast[source] = at
	n.w.clock.after(at-n.w.clock.now, func() {
		// Resumed: whatever runs first finds the lease gone, if it is:
		// the node's transport and journal refuse by the holder's clock
		// (node.leasedTransport, journal/postgres.Fence), so the first
		// thing a node resumed past its lease does is fence.
		if !n.frozen() {
			n.holdsLease() // fences it if not: then fn finds it gone
		}
		fn()
	})
}

// awake runs fn now, or once the node resumes (later), unless the node is
// gone by then.
func (n *simNode) awake(source string, fn func()) {
	switch {
	case n.state == nodeGone:
	case n.frozen():
		n.later(source, func() { n.awake(source, fn) })
	default:
		fn()
	}
}

// now is the node's own clock, with its drift.
func (n *simNode) now() time.Time {
	return simBase.Add(time.Duration(float64(n.w.clock.now) / n.rate))
}

// after runs fn after the local duration d, unless the node is gone by then.
func (n *simNode) after(d time.Duration, fn func()) {
	n.w.clock.after(time.Duration(float64(d)*n.rate), func() {
		n.awake("timers", fn)
	})
}

// at runs fn once the node's clock reads t (rounding can make after
// early by a nanosecond: a fence check must not run before its time),
// unless the node is gone by then.
func (n *simNode) at(t time.Time, fn func()) {
	n.after(t.Sub(n.now()), func() {
		if n.now().Before(t) {
			n.w.clock.after(time.Nanosecond, func() { n.at(t, fn) })
			return
		}
		fn()
	})
}

// local runs fn as a hop through one of the node's mailboxes.
func (n *simNode) local(fn func()) { n.after(n.w.localDelay(), fn) }

func (n *simNode) oldest() string {
	v, err := cluster.NewView(n.view...)
	if err != nil {
		panic(err)
	}
	m, _ := v.Oldest("")
	return addrName(m.Address)
}

// ---- the region runner (region.go) ----

// regionInput steps the region core and carries out its effects.
func (n *simNode) regionInput(fn func(c *regionCore[simCmd, *simShard])) {
	fn(n.region)
	n.applyRegion()
}

// applyRegion carries out the core's effects with the runner's own
// effect switch (regionEffects), on the simulated world (simRegionIO).
func (n *simNode) applyRegion() {
	for len(n.region.out) > 0 {
		n.fx.runUnlocked(n.fx.applyLocked())
	}
}

// tell is EntityRef.Tell on this node, past its fast path.
func (n *simNode) tell(entityID string, msg simCmd) error {
	shardID := n.w.settings.ShardID(entityID)
	p := pending[simCmd]{entityID: entityID, msg: msg}
	v, e := n.region.route(shardID, p)
	err := n.fx.sendRouted(v, e, shardID, p, false, false)
	n.applyRegion()
	return err
}

// simRegionIO is a simulated node's regionEnv: the simulator's network,
// clock and shard runners, each asynchronous hop an event.
type simRegionIO struct{ n *simNode }

// send is the transport's Send: a node that left or died refuses a
// region's own hand-over (the runner reports it); the rest goes on the
// network, which loses it on its way to a node that is gone.
func (io simRegionIO) send(to Address, msg Message) error {
	n := io.n
	if h, ok := msg.(protocol.HandOver); ok && !h.Relayed && !n.w.reachable(addrName(to.Node)) {
		n.w.tracef("%s -> %s refused (node gone): %s", n.name, to.Node, simShow(msg))
		return ErrUnreachable
	}
	if _, ok := msg.(protocol.Flush); ok && !n.w.reachable(addrName(to.Node)) {
		n.w.tracef("%s -> %s refused (node gone): %s", n.name, to.Node, simShow(msg))
		return ErrUnreachable
	}
	n.w.net.send(n.name, addrName(to.Node), to.Coordinator, msg)
	return nil
}

// forward is Region.forward: a home that left or died refuses it.
func (io simRegionIO) forward(home cluster.UniqueAddress, shardID string, p pending[simCmd]) error {
	n := io.n
	if !n.w.reachable(addrName(home)) {
		return ErrUnreachable
	}
	n.w.net.send(n.name, addrName(home), false, p.deliver(shardID))
	return nil
}

func (io simRegionIO) newShard(shardID string) *simShard { return io.n.newShard(shardID) }

func (io simRegionIO) hosted(shardID string) (*simShard, bool) { return io.n.region.local(shardID) }

func (io simRegionIO) armTick(after time.Duration) { io.n.after(after, io.n.tick) }

func (io simRegionIO) armRegister(after time.Duration, gen uint64) {
	n := io.n
	n.after(after, func() {
		if !n.stopped {
			n.regionInput(func(c *regionCore[simCmd, *simShard]) { c.retryRegister(gen) })
		}
	})
}

func (io simRegionIO) left() {
	n := io.n
	n.local(func() {
		if n.state == nodeLeaving && !n.stopped {
			n.finishLeave(false)
		}
	})
}

func (io simRegionIO) gone() {
	io.n.regionGone = true
	io.n.maybeGone()
}

func (io simRegionIO) deadLetter(err error, p pending[simCmd], from cluster.UniqueAddress, reason string) {
	n := io.n
	if sender := n.w.nodes[addrName(from)]; !from.IsZero() && errors.Is(err, errHandOverTooLate) && sender != nil && (sender.crashed || sender.stoppedLate) {
		// The mail of a node a fault took: lost with it.
		n.w.tracef("%s refuses %+v from %s: %v", n.name, p.msg, from, err)
		n.w.lostToFault(p.msg)
		return
	}
	n.w.lost(p, "%s: %s: %v", n.name, reason, err)
}

func (io simRegionIO) note(_ slog.Level, note string, args []any) {
	io.n.w.tracef("%s note: %s %v", io.n.name, note, args)
}

func (io simRegionIO) handOff(sh *simShard, shardID string) {
	io.n.w.tracef("%s hands off shard %s", io.n.name, shardID)
	sh.core.handOff()
	sh.apply()
}

func (io simRegionIO) passivateIdle(sh *simShard, tick, ticks uint64) {
	sh.core.passivateIdle(tick, ticks)
	sh.apply()
}

// terminate: the shard's entities stop at once and its remember writes
// die; the region hears of it after a mailbox hop.
func (io simRegionIO) terminate(sh *simShard, _ string) {
	n := io.n
	sh.terminated, sh.writes = true, nil
	sh.core.terminate()
	sh.apply()
	n.local(func() {
		sh.core.forgetAll()
		sh.gone = true
		n.regionInput(func(c *regionCore[simCmd, *simShard]) { c.shardTerminated(sh.id) })
	})
}

// tick is the region's retry tick (retryTick in region.go).
func (n *simNode) tick() {
	if n.stopped {
		return
	}
	n.restartFailedCoordinator()
	n.regionInput(func(c *regionCore[simCmd, *simShard]) { c.tick() })
}

// applyView takes a new membership view (Sharding.membershipChanged).
func (n *simNode) applyView(view []cluster.Member) {
	n.view = view
	n.w.tracef("%s view %s", n.name, simShowView(view))
	n.hostCoordinatorIfOldest()
	oldest := n.oldest()
	var live []string
	for _, m := range view {
		if m.Status != cluster.Down {
			live = append(live, addrName(m.Address))
		}
	}
	n.regionInput(func(c *regionCore[simCmd, *simShard]) { c.membership(addr(oldest), addrs(live...)) })
	if c := n.coord; c != nil {
		c.deliver(membersChanged{members: slices.Clone(view)})
	}
}

// arrive takes a protocol message for the region.
func (n *simNode) arrive(from string, msg Message) {
	if n.stopped {
		n.w.tracef("%s -> %s dropped (region stopped): %s", from, n.name, simShow(msg))
		if n.stoppedLate {
			n.w.lostToFault(msg)
		}
		return
	}
	n.w.tracef("%s -> %s: %s", from, n.name, simShow(msg))
	n.regionInput(func(c *regionCore[simCmd, *simShard]) { c.step(msg) })
}

// leave is Sharding.Shutdown: the region hands its shards off, then stops;
// past the deadline its entities stop at once.
func (n *simNode) leave() {
	n.state, n.leftAt = nodeLeaving, n.w.clock.now
	n.w.tracef("%s leaves (oldest=%v)", n.name, n.oldest() == n.name)
	oldest := n.oldest()
	n.regionInput(func(c *regionCore[simCmd, *simShard]) { c.leave(addr(oldest)) })
	n.after(n.w.leaveDeadline, func() {
		if n.state == nodeLeaving && !n.stopped {
			n.finishLeave(true)
		}
	})
}

// finishLeave stops the region (Region.shutdown): past the deadline the
// core terminates what it still hosts and reports itself gone once those
// entities stopped; the coordinator stops after what the region sent it,
// and the node leaves the membership once both are done (Sharding.Shutdown).
func (n *simNode) finishLeave(late bool) {
	n.w.tracef("%s stops its region (deadline passed: %v)", n.name, late)
	if late && n.leftAt < n.w.net.slowUntil {
		// A link slower than the deadline allows (a fault) made the
		// leave outlast it: what it holds is lost to that fault.
		n.w.tracef("%s: its leave overlapped a slow link", n.name)
		for _, e := range n.region.shards {
			n.w.lostToFault(e.buffer)
			n.w.lostToFault(e.sent.Msgs)
		}
		n.heldByShards(func(_ string, msg simCmd) { n.w.lostToFault(msg) })
	} else {
		n.w.droppedAtStop(n)
	}
	n.stopped, n.stoppedLate = true, late
	n.regionInput(func(c *regionCore[simCmd, *simShard]) { c.stop() })
	if c := n.coord; c != nil && !c.done {
		if !c.told {
			n.stopCoordinator()
		}
		return // gone once the coordinator has processed what it was sent
	}
	n.coord = nil
	n.maybeGone()
}

// heldByShards visits the mail the node's hosted shards hold rather than
// their entities: the buffers of entities stopping or backing off, and
// what a running hand-off keeps for the next home. A late stop terminates
// the shards and drops it with the region's own buffer.
func (n *simNode) heldByShards(visit func(entityID string, msg simCmd)) {
	for _, id := range n.region.hostedShards() {
		sh, _ := n.region.local(id)
		for _, eid := range sh.core.entityIDs() {
			for _, msg := range sh.core.entities[eid].buffer {
				visit(eid, msg)
			}
		}
		for _, p := range sh.core.leftover {
			if !p.start {
				visit(p.entityID, p.msg)
			}
		}
	}
}

// maybeGone leaves the membership once the stopped region is gone and the
// coordinator, if any, has stopped.
func (n *simNode) maybeGone() {
	if n.stopped && n.regionGone && n.coord == nil && n.state != nodeGone {
		n.gone()
	}
}

func (n *simNode) gone() {
	if n.stoppedLate {
		// What was sent to it until now is lost, as at a fence (senders
		// learn that it is gone only now): liveness is owed from here
		// (sim_test.go finalChecks).
		n.w.lastFence = max(n.w.lastFence, n.w.clock.now)
	}
	n.state = nodeGone
	n.releaseLease()
	n.w.removeMember(n.name, 0)
}

// crash kills the node: entities stop at once, nothing is reported, what
// is in flight to or from it is lost; its lease is left to expire.
func (n *simNode) crash() {
	n.w.tracef("%s crashes", n.name)
	n.halt()
}

// fence is the node lease's fence (node.fence): the node stops every
// entity at once and stops gossiping, as a crash would.
func (n *simNode) fence(why string) {
	if n.state == nodeGone {
		return
	}
	w := n.w
	w.tracef("%s fences itself: %s", n.name, why)
	w.lastFence = w.clock.now
	if w.clock.now > w.healAt+w.leaseTiming.Node.Length {
		// Downed before the heal, a node fences at its next renewal:
		// later, it was downed without a fault.
		w.fail("liveness", "%s fences itself %v after the heal: %s", n.name, w.clock.now-w.healAt, why)
	}
	n.halt()
}

// halt stops the node as a crash does: what it held is lost, and the
// others' failure detectors notice after a while.
func (n *simNode) halt() {
	for _, e := range n.region.shards {
		n.w.lostToFault(e.buffer)
		// A hand-over not yet acknowledged: its mail is this node's to
		// re-send, or to take back when no copy arrived; it dies with it.
		n.w.lostToFault(e.sent.Msgs)
	}
	for _, id := range n.region.hostedShards() {
		sh, _ := n.region.local(id)
		for _, inc := range sh.incs() {
			n.w.kill(inc)
		}
		for _, e := range sh.core.entities {
			n.w.lostToFault(e.buffer)
		}
		n.w.lostToFault(sh.core.leftover)
		n.w.lostToFault(sh.leftover)
		sh.gone = true
	}
	if c := n.coord; c != nil {
		n.w.lostToFault(c.life.pipe.drop()) // decisions waiting for the store
		c.done = true
	}
	n.state, n.crashed, n.stopped, n.coord = nodeGone, true, true, nil
	for _, other := range n.w.order {
		n.w.net.breakLink(n.name, other)
	}
	n.w.failMember(n.name, n.w.rng.between(time.Second, 5*time.Second))
}

// ---- the node lease (node.Start, lease.Holder) ----

// holdsLease is the node's lease check on the entity path, for a node
// that resumes from a pause with its fence check overdue and a message
// handled first: by its own clock it no longer holds its lease, so it
// fences at once and its entity does not act. In production the journal
// refuses the write by the same check (journal/postgres.Fence); here every
// message an entity gets counts as acting.
func (n *simNode) holdsLease() bool {
	if n.state == nodeGone {
		return false
	}
	if n.lease == nil || n.lease.Holds(n.now()) {
		return true
	}
	n.fence("no lease renewal in time (found on the entity path)")
	return false
}

// holdLease acquires the node lease, before the node hosts anything.
func (n *simNode) holdLease() error {
	w := n.w
	n.lease = lease.NewKeeper(w.leaseTiming.Node)
	start := n.now()
	if err := w.leases.AcquireNode(context.Background(), simAddr(n.name), w.leaseTiming.Node.Length); err != nil {
		return err
	}
	n.leaseGranted(start)
	return nil
}

// leaseGranted records a successful acquisition or renewal sent at start
// and arms the next renewal and the fence check.
func (n *simNode) leaseGranted(start time.Time) {
	if !n.lease.Granted(start, n.now()) {
		n.fence("the lease renewal came too late")
		return
	}
	n.after(n.lease.RenewAt().Sub(n.now()), n.renewLease)
	n.at(n.lease.FenceAt(), func() {
		if n.lease.Fenced(n.now()) {
			n.fence("no lease renewal in time")
		}
	})
}

// renewLease renews the node lease; a failed call is retried every
// RenewEvery/4, a refusal fences at once.
func (n *simNode) renewLease() {
	if n.renewing || n.lease.Fenced(n.now()) {
		return
	}
	n.renewing = true
	w, start := n.w, n.now()
	w.storeCall(n, func() error {
		return w.leases.RenewNode(context.Background(), simAddr(n.name), w.leaseTiming.Node.Length)
	}, func(err error) {
		n.renewing = false
		switch {
		case err == nil:
			n.leaseGranted(start)
		case lease.Refused(err):
			n.lease.Refused()
			n.fence(err.Error())
		default:
			w.tracef("%s lease renewal failed, retrying: %v", n.name, err)
			n.after(w.leaseTiming.Node.RenewEvery/4, n.renewLease)
		}
	})
}

// releaseLease ends the lease of a node that left gracefully, so that
// nothing waits for it to expire (node.Shutdown).
func (n *simNode) releaseLease() {
	if err := n.w.storeErr(n.name); err != nil {
		n.w.tracef("%s cannot release its lease: %v", n.name, err)
		return
	}
	if err := n.w.leases.ReleaseNode(context.Background(), simAddr(n.name)); err != nil {
		n.w.fail("runner", "%s: release the node lease: %v", n.name, err)
	}
}

// ---- the coordinator (coordinator_host.go, coordinator_runner.go) ----

// simCoord is a coordinator on a simulated node: the shipped lease life
// (coordinatorLife) on the simulated world (simCoordIO), where its timers
// and store calls are events and its mailbox a small inbox, drained after
// each event so that what it unstashes comes before later mail.
type simCoord struct {
	n      *simNode
	serial int
	life   *coordinatorLife
	done   bool // stopped: by itself, or when told
	told   bool // told to stop (unlistened): it takes only what its own node sent before

	inbox    []Message
	draining bool
	stash    *stash.Buffer[Message]
	timers   map[string]uint64 // the armed timer's generation, per key
	timerGen uint64
	attempts int // failed writes in a row
}

// simStopCoord stops a coordinator after the messages its node queued for
// it (coordinatorHost.tellToStopLocked).
type simStopCoord struct{ Serial int }

func (simStopCoord) ProtocolMessage() {}

func (n *simNode) hostCoordinatorIfOldest() {
	oldest := n.oldest() == n.name && !n.stopped
	n.reapFailedCoordinator()
	switch {
	case oldest && n.coord == nil && n.w.clock.now >= n.coordNext:
		n.startCoordinator()
	case !oldest && n.coord != nil && !n.coord.told:
		n.stopCoordinator()
	}
}

func (n *simNode) restartFailedCoordinator() {
	n.reapFailedCoordinator()
	if n.coord == nil && !n.stopped && n.oldest() == n.name && n.w.clock.now >= n.coordNext {
		n.startCoordinator()
	}
}

// reapFailedCoordinator forgets a coordinator that stopped by itself and
// schedules its restart after a back-off.
func (n *simNode) reapFailedCoordinator() {
	if n.coord == nil || !n.coord.done {
		return
	}
	n.coord = nil
	if n.w.clock.now-n.coordStarted > 30*time.Second {
		n.coordRestart = 0
	}
	wait := n.w.backoff(n.w.settings.RetryInterval, 30*time.Second, n.coordRestart)
	n.coordRestart++
	n.coordNext = n.w.clock.now + wait
	n.w.tracef("%s coordinator failed; restart after %v", n.name, wait)
}

func (n *simNode) stopCoordinator() {
	c := n.coord
	c.told = true
	n.w.net.send(n.name, n.name, true, simStopCoord{Serial: c.serial})
}

func (n *simNode) startCoordinator() {
	w := n.w
	n.coordSerial++
	if n.downing == nil {
		n.downing = newDowning(addr(n.name), "", w.settings.DowningStableAfter)
	}
	c := &simCoord{n: n, serial: n.coordSerial, timers: map[string]uint64{}}
	c.stash = stash.New(0, func(ms []Message) { c.inbox = append(slices.Clone(ms), c.inbox...) })
	c.life = newCoordinatorLife(coordinatorLifeConfig{typ: simType, self: addr(n.name), settings: w.settings,
		timing: w.leaseTiming.Coordinator, store: w.coordStore, remember: w.remember})
	c.life.down = n.downing.resume()
	n.coord, n.coordStarted = c, w.clock.now
	w.tracef("%s coordinator starts", n.name)
	c.life.start(simCoordIO{c})
	c.deliver(membersChanged{members: slices.Clone(n.view)}) // the view coordinatorHost.startLocked sends
}

// deliver puts m in the coordinator's inbox and, unless it is taking one
// already, takes what the inbox holds, in order.
func (c *simCoord) deliver(m Message) {
	if c.done {
		return
	}
	c.inbox = append(c.inbox, m)
	if c.draining {
		return
	}
	c.draining = true
	for len(c.inbox) > 0 && !c.done {
		m := c.inbox[0]
		c.inbox = c.inbox[1:]
		if c.life.receive(simCoordIO{c}, m) {
			c.stopped()
		}
	}
	c.draining = false
}

// stopped: the coordinator is done; one told to stop is forgotten at once
// (coordinatorHost.stopCoordinator), one that stopped by itself when its
// node reaps it.
func (c *simCoord) stopped() {
	n := c.n
	c.done, c.inbox = true, nil
	c.life.pipe.drop()
	n.w.tracef("%s coordinator (epoch %d) stopped", n.name, c.life.epoch)
	if c.told && n.coord == c {
		n.coord = nil
		n.maybeGone()
	}
}

// arm starts the timer under key: msg comes once the node's clock read d
// more than now, and then every every, if not zero.
func (c *simCoord) arm(key string, msg Message, d, every time.Duration) {
	n := c.n
	c.timerGen++
	gen := c.timerGen
	c.timers[key] = gen
	n.at(n.now().Add(d), func() {
		if c.done || c.timers[key] != gen {
			return
		}
		if every > 0 {
			c.arm(key, msg, every, every)
		} else {
			delete(c.timers, key)
		}
		c.deliver(msg)
	})
}

// arriveCoordinator takes a message for this node's coordinator.
func (n *simNode) arriveCoordinator(from string, msg Message) {
	c := n.coord
	if stop, ok := msg.(simStopCoord); ok {
		if c != nil && c.serial == stop.Serial {
			c.deliver(stopCoordinator{})
		}
		return
	}
	if c == nil || c.done || c.told && from != n.name {
		n.w.tracef("%s -> %s/coordinator dropped (no coordinator): %s", from, n.name, simShow(msg))
		return
	}
	n.w.tracef("%s -> %s/coordinator: %s", from, n.name, simShow(msg))
	c.deliver(msg)
}

// simCoordIO is a simulated coordinator's coordinatorLifeEnv: the node's
// clock, the simulated network and stores, each timer and store call an
// event.
type simCoordIO struct{ c *simCoord }

func (io simCoordIO) now() time.Time { return io.c.n.now() }

func (io simCoordIO) holds() bool { return io.c.life.holds(io.c.n.now()) }

func (io simCoordIO) startTimer(key string, msg Message, d time.Duration) { io.c.arm(key, msg, d, 0) }

func (io simCoordIO) startTimerEvery(key string, msg Message, every time.Duration) {
	io.c.arm(key, msg, every, every)
}

// call is one store call with its latency and injected failures
// (simWorld.storeCall), answered unless the coordinator stopped by then.
func (io simCoordIO) call(_ time.Duration, do func(context.Context) error, answer func(error) Message) {
	c := io.c
	c.n.w.storeCall(c.n, func() error { return do(context.Background()) }, func(err error) {
		if !c.done {
			c.deliver(answer(err))
		}
	})
}

func (io simCoordIO) stash(m Message) error { return io.c.stash.Stash(m) }

func (io simCoordIO) unstashAll() { io.c.stash.UnstashAll() }

func (io simCoordIO) members() []cluster.Member { return slices.Clone(io.c.n.view) }

func (io simCoordIO) leaseRenewed(time.Duration) {}

func (io simCoordIO) leaseRefused() {}

func (io simCoordIO) leaseFailed() {}

func (io simCoordIO) send(to cluster.UniqueAddress, msg Message) {
	io.c.n.w.net.send(io.c.n.name, addrName(to), false, msg)
}

// write is one batch, one store call.
func (io simCoordIO) write(b *writeBatch) {
	c := io.c
	w := c.n.w
	seq, epoch, batch := b.seq, c.life.epoch, b.changes
	w.tracef("%s coordinator (epoch %d) writes batch %d: %v", c.n.name, epoch, seq, batch)
	io.call(0, func(ctx context.Context) error {
		return w.coordStore.Update(ctx, simType, epoch, batch)
	}, func(err error) Message {
		return batchWritten{seq: seq, err: err}
	})
}

func (io simCoordIO) retryWrites(err error) {
	c := io.c
	w := c.n.w
	wait := w.backoff(w.settings.RetryInterval, 30*time.Second, c.attempts)
	c.attempts++
	w.tracef("%s coordinator (epoch %d) store write failed, retry in %v: %v", c.n.name, c.life.epoch, wait, err)
	io.startTimer("store-retry", retryStoreWrites{}, wait)
}

func (io simCoordIO) writesCommitted() { io.c.attempts = 0 }

func (io simCoordIO) downCall(call downCall) {
	w := io.c.n.w
	res := downResult{call: call}
	w.tracef("%s coordinator: downing call %+v", io.c.n.name, call)
	io.call(0, func(ctx context.Context) (err error) {
		if call.down {
			return w.nodeLeases.DownNode(ctx, addrName(call.node))
		}
		res.expired, err = w.nodeLeases.NodeLeaseExpired(ctx, addrName(call.node))
		return err
	}, func(err error) Message {
		res.err = err
		return res
	})
}

func (io simCoordIO) rebalanced(int) {}

func (io simCoordIO) log(_ slog.Level, msg string, args ...any) {
	io.c.n.w.tracef("%s coordinator (epoch %d): %s %v", io.c.n.name, io.c.life.epoch, msg, args)
}

// ---- the shard runner (shard.go) ----

type simShard struct {
	n      *simNode
	id     string
	core   *shardCore[simCmd, *simInc]
	fx     shardEffects[simCmd, *simInc] // the runner's effect switch
	timers map[uint64]bool               // armed generations
	gone   bool                          // handed off, terminated, or its node is gone
	// terminated by a late shutdown: its remember writes die with it
	terminated bool

	writes  []rememberWrite // remember-entities writes, in order
	writing bool
	drained func()
	// leftover of a finished hand-off, on its way to the region
	leftover []pending[simCmd]
}

// simInc is one incarnation of an entity.
type simInc struct {
	serial   int
	entityID string
	sh       *simShard
	dead     bool
	stopping bool
}

func (n *simNode) newShard(id string) *simShard {
	w := n.w
	sh := &simShard{n: n, id: id, timers: map[uint64]bool{}}
	sh.core = newShardCore[simCmd, *simInc](w.shardCfg, w.rng.Float64)
	sh.fx = shardEffects[simCmd, *simInc]{core: sh.core, env: simShardIO{sh}}
	w.tracef("%s hosts shard %s", n.name, id)
	if w.settings.RememberEntities {
		sh.readRemembered(0)
	}
	return sh
}

// incs lists the shard's live incarnations.
func (sh *simShard) incs() []*simInc {
	var out []*simInc
	for _, id := range sh.core.entityIDs() {
		if inc := sh.core.handle(id); inc != nil && !inc.dead {
			out = append(out, inc)
		}
	}
	return out
}

// deliverPending is shard.deliverPending: the runner's delivery
// (shardEffects.deliver), on the simulated world (simShardIO).
func (sh *simShard) deliverPending(p pending[simCmd], failFast, accepted bool) error {
	return sh.fx.deliver(p.entityID, p.msg, p.start, failFast, accepted, sh.n.region.idleTick, p.trace)
}

// apply is shard.apply: the runner's effect switch (shardEffects), on
// the simulated world (simShardIO).
func (sh *simShard) apply() { sh.fx.apply() }

// simShardIO is a simulated shard's shardEnv: incarnations the world
// records, the node's clock, and the simulated remember store.
type simShardIO struct{ sh *simShard }

// spawn starts an incarnation, unless the node no longer holds its lease:
// then it fenced itself, and what the incarnation was to get is lost.
func (io simShardIO) spawn(entityID string, _ bool, msgs []simCmd) (*simInc, bool) {
	sh := io.sh
	if !sh.n.holdsLease() {
		sh.n.w.lostToFault(msgs)
		return nil, false
	}
	return sh.n.w.start(sh, entityID), true
}

func (io simShardIO) now() time.Time { return io.sh.n.now() }

// acting: a node that no longer holds its lease fences itself, and what
// it was to deliver is lost.
func (io simShardIO) acting(msg simCmd) error {
	if !io.sh.n.holdsLease() {
		io.sh.n.w.lostToFault(msg)
		return ErrEntityUnavailable
	}
	return nil
}

func (io simShardIO) bufferFull(entityID string) error {
	return fmt.Errorf("%w: entity %s/%s", ErrBufferFull, simType, entityID)
}

func (io simShardIO) unavailable(entityID string, until time.Time, cause error) error {
	return &UnavailableError{Type: simType, EntityID: entityID, RetryAfter: max(0, until.Sub(io.sh.n.now())), Cause: cause}
}

// tell: an incarnation that stopped (its Stopped report still on its way)
// takes nothing.
func (io simShardIO) tell(inc *simInc, msg simCmd, _ *trace.SpanContext) error {
	if inc.dead {
		return entity.ErrStopped
	}
	io.sh.n.w.received(inc, msg)
	return nil
}

func (io simShardIO) started(*simInc) {}

func (io simShardIO) deadLetter(err error, entityID string, msg simCmd, reason string) {
	io.sh.n.w.lost(pending[simCmd]{entityID: entityID, msg: msg}, "%s: %s (%v)", io.sh.n.name, reason, err)
}

// sendStop: the incarnation stops a while after its stop message.
func (io simShardIO) sendStop(ef *shardEffect[simCmd, *simInc]) {
	sh := io.sh
	if inc := ef.handle; inc != nil && !inc.dead && !inc.stopping {
		inc.stopping = true
		sh.n.after(sh.n.w.stopDuration(), func() { sh.die(inc, nil) })
	}
}

func (io simShardIO) forceStop(ef *shardEffect[simCmd, *simInc]) {
	sh, w := io.sh, io.sh.n.w
	if inc := ef.handle; inc != nil && !inc.dead {
		w.tracef("%s force-stops %s#%d (%d)", sh.n.name, inc.entityID, inc.serial, ef.force)
		if ef.force == forceTerminate {
			w.kill(inc) // the runner waits, then forgets all: no report
		} else {
			sh.die(inc, nil)
		}
	}
}

func (io simShardIO) armTimer(ef *shardEffect[simCmd, *simInc]) {
	sh, n := io.sh, io.sh.n
	kind, id, gen := ef.timer, ef.entityID, ef.gen
	sh.timers[gen] = true
	n.after(ef.after, func() {
		if sh.gone || !sh.timers[gen] {
			return
		}
		delete(sh.timers, gen)
		sh.core.timerFired(kind, id, gen, n.now())
		sh.apply()
	})
}

func (io simShardIO) cancelTimer(gen uint64) { delete(io.sh.timers, gen) }

func (io simShardIO) remember(entityID string, add bool) { io.sh.remember(entityID, add) }

// refuseAsks: refused as unavailable, their callers retry.
func (io simShardIO) refuseAsks(ef *shardEffect[simCmd, *simInc]) { io.sh.n.w.lostToFault(ef.msgs) }

// handedOff: the region hears of it once the remember writes are stored,
// after a mailbox hop.
func (io simShardIO) handedOff(leftover []pending[simCmd]) {
	sh, n, w := io.sh, io.sh.n, io.sh.n.w
	sh.leftover = leftover
	sh.afterWrites(func() {
		n.local(func() {
			w.tracef("%s shard %s handed off, leftover %+v", n.name, sh.id, leftover)
			sh.gone, sh.leftover = true, nil
			n.regionInput(func(c *regionCore[simCmd, *simShard]) { c.handedOff(sh.id, leftover) })
		})
	})
}

var errSimFailure = errors.New("sim: entity failed")

// die stops inc; its Stopped report reaches the shard through a mailbox hop.
func (sh *simShard) die(inc *simInc, err error) {
	if inc.dead {
		return
	}
	sh.n.w.kill(inc)
	sh.n.local(func() {
		if sh.gone {
			return
		}
		sh.core.stopped(inc.entityID, inc, err, sh.n.now())
		sh.apply()
	})
}

// remember queues a remember-entities write; they are stored one at a
// time, in order, each retried until the store takes it.
func (sh *simShard) remember(entityID string, add bool) {
	sh.writes = append(sh.writes, rememberWrite{entityID, add})
	if !sh.writing {
		sh.writing = true
		sh.writeNext(0)
	}
}

func (sh *simShard) writeNext(attempt int) {
	w := sh.n.w
	if len(sh.writes) == 0 || sh.terminated {
		sh.writing, sh.writes = false, nil
		if d := sh.drained; d != nil {
			sh.drained = nil
			d()
		}
		return
	}
	wr := sh.writes[0]
	sh.n.after(w.storeLatency(), func() {
		err := w.storeErr(sh.n.name)
		if err == nil && wr.add {
			err = w.remember.Add(context.Background(), simType, sh.id, wr.entityID)
		} else if err == nil {
			err = w.remember.Remove(context.Background(), simType, sh.id, wr.entityID)
		}
		if err != nil {
			w.tracef("%s remember write %v failed; retrying", sh.n.name, wr)
			sh.n.after(w.backoff(w.settings.RestartBackoffMin, w.settings.RestartBackoffMax, attempt), func() { sh.writeNext(attempt + 1) })
			return
		}
		sh.writes = sh.writes[1:]
		sh.writeNext(0)
	})
}

func (sh *simShard) afterWrites(fn func()) {
	if sh.writing {
		sh.drained = fn
		return
	}
	fn()
}

func (sh *simShard) readRemembered(attempt int) {
	w := sh.n.w
	sh.n.after(w.storeLatency(), func() {
		if sh.gone || sh.core.handingOff {
			return
		}
		err := w.storeErr(sh.n.name)
		var ids []string
		if err == nil {
			ids, err = w.remember.Entities(context.Background(), simType, sh.id)
		}
		if err != nil {
			sh.n.after(w.backoff(w.settings.RestartBackoffMin, w.settings.RestartBackoffMax, attempt), func() { sh.readRemembered(attempt + 1) })
			return
		}
		w.tracef("%s shard %s remembers %v", sh.n.name, sh.id, ids)
		sh.core.remembered(ids)
		sh.apply()
	})
}

func simShowView(view []cluster.Member) string {
	s := "["
	for i, m := range view {
		if i > 0 {
			s += " "
		}
		s += fmt.Sprintf("%s@%d", m.Address, m.JoinOrder)
		switch {
		case m.Status == cluster.Down:
			s += "(down)"
		case m.Unreachable:
			s += "(unreachable)"
		}
	}
	return s + "]"
}
