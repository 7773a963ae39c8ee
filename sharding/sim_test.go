package sharding

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/cluster/lease"
	"github.com/shoal-dev/shoal/sharding/internal/protocol"
)

// The deterministic sharding simulator (docs/DESIGN.md, "Simulation and
// scenario tests"), FoundationDB style: one seed drives one
// PRNG, which drives everything — the workload (senders, joins, graceful
// leaves, the oldest's too, StopShards, passivation, entity failures,
// remember-entities), the faults (message delay, link breaks, partitions,
// crashes, divergent membership views, clock drift, store failures) and
// the real cores' own randomness. Several nodes run the real region, shard
// and coordinator cores (sim_node_test.go) over the simulated network
// (sim_world_test.go). Invariants are checked on every step:
//
//   - one incarnation: at most one active incarnation per entity, cluster-wide;
//   - at-most-once: no message reaches an entity twice, and none that Tell refused;
//   - order: per sender, an entity gets its messages in send order;
//
// and at the end of the run:
//
//   - liveness: once every fault has healed, and the last node downed
//     before the heal has fenced itself (within a node lease of the heal,
//     or the run fails), each message sent is delivered within
//     livenessBound of virtual time;
//   - no loss: every message Tell accepted is delivered, unless a fault
//     lost it: it was in flight on a link that broke or across a partition
//     (alone or inside a protocol message), or held by a node that crashed.
//
// Each fault class is a flag; TestSimulation documents how to pick them.

// simType is the simulated entity type's name.
const simType = "Sim"

// The fault classes.
const (
	faultDelay      = "delay"      // random per-message delay: order only per link
	faultBreaks     = "breaks"     // link breaks lose what is in flight (alone: every message takes 1 ms)
	faultPartitions = "partitions" // network partitions, views split to match
	faultCrashes    = "crashes"    // nodes die without a word
	faultViews      = "views"      // views lag and drop live members for a while
	faultStore      = "store"      // coordinator and remember store calls fail
	faultDrift      = "drift"      // each node's clock runs up to 5% fast or slow
	faultPauses     = "pauses"     // a node freezes, every timer and goroutine, past its lease, then resumes
	// Found by a review that drove several real nodes over a scripted
	// transport:
	faultSlow     = "slow"     // a link slow for seconds, up to tens of them; a break delays what it carries instead of losing it
	faultDups     = "dups"     // control messages arrive twice
	faultOneWay   = "oneway"   // every other node suspects one, which sees them all, for up to 30 s
	faultLostAcks = "lostacks" // a store call commits, then reports failure
)

// simAllFaults lists every fault class, in the order reports print them.
var simAllFaults = []string{faultDelay, faultBreaks, faultPartitions, faultCrashes, faultViews, faultStore, faultDrift, faultPauses,
	faultSlow, faultDups, faultOneWay, faultLostAcks}

type simConfig struct {
	seed   uint64
	faults map[string]bool
	trace  bool
	// Sabotage, for the simulator's own tests: a network that delivers
	// every forwarded message twice, or a region that loses some.
	duplicate bool
	dropSome  bool
	// strict also counts as lost what a leaving region still buffered when
	// it stopped (it logs them as undelivered), unless no other node was
	// up to take it: the last region of the type that leaves has nowhere
	// to hand its buffer to, and gives up after 2×HandOffTimeout (else a
	// Shutdown without a deadline would wait for ever).
	strict bool
}

// simResult is what one run found.
type simResult struct {
	seed      uint64
	strict    bool
	failure   string // "" when every invariant held
	invariant string // the invariant that failed
	focus     string // an entity the failure concerns, for the trace excerpt
	focusMsg  string // and a message, as the trace prints it
	at        time.Duration
	steps     int
	trace     []string
	delivered int
	accepted  int
	messages  int // protocol messages sent
}

type simSend struct {
	entityID    string
	at          time.Duration
	inTell      bool // Tell has not returned yet
	accepted    bool
	delivered   bool
	deliveredAt time.Duration
	// droppedAtStop: its sender's region stopped with it in its buffer;
	// nowhere: no other node was up to host its shard then (the others
	// had crashed or fenced themselves, or were leaving too).
	droppedAtStop, nowhere bool
	// faultLost: a fault lost it (a message carrying it, or a node holding it).
	faultLost bool
}

type simWorld struct {
	cfg   simConfig
	rng   simRand
	clock simClock
	net   *simNet

	settings      Settings
	shardCfg      shardCoreConfig
	leaveDeadline time.Duration
	leaseTiming   lease.Settings
	leases        *lease.MemoryStore // node leases
	nodeLeases    simNodeLeases
	coordStore    *MemoryCoordinatorStore // allocations and coordinator leases
	remember      *MemoryRememberStore
	storeFail     float64         // chance that a store call fails, now
	storeLostAck  float64         // chance that a store call commits and then reports failure, now
	storeCut      map[string]bool // nodes a partition cut off from the store
	lastFence     time.Duration   // when a node last fenced itself, or stopped past its leave deadline

	nodes    map[string]*simNode
	order    []string // node names, in join order
	truth    map[string]cluster.Member
	hidden   map[string]map[string]bool // observer → members missing from its view
	joins    uint64
	entities []string

	live    map[string]*simInc // entity → its active incarnation
	serials int
	sends   map[simCmd]*simSend
	last    map[[2]string]int // (sender, entity) → last seq delivered
	senders int

	healAt, sendEnd, end time.Duration
	res                  simResult
}

// Phases of a run, in virtual time.
const (
	simChaos      = 90 * time.Second // faults and membership changes happen before this
	simCalm       = 30 * time.Second // then only traffic, for this long
	livenessBound = 60 * time.Second // a message sent after the heal arrives within this
	simDrain      = 3 * time.Second  // senders on a node stop this long before it leaves
)

func newSimWorld(cfg simConfig) *simWorld {
	w := &simWorld{
		cfg: cfg, rng: simRand{rand.New(rand.NewPCG(cfg.seed, 0x5eed))},
		nodes: map[string]*simNode{}, truth: map[string]cluster.Member{}, hidden: map[string]map[string]bool{}, storeCut: map[string]bool{},
		live: map[string]*simInc{}, sends: map[simCmd]*simSend{}, last: map[[2]string]int{},
	}
	w.res.seed, w.res.strict = cfg.seed, cfg.strict
	w.net = &simNet{w: w, last: map[simLink]time.Duration{}, gen: map[simLink]uint64{}, cut: map[simLink]bool{},
		hold: map[simLink]time.Duration{}, held: map[simLink][]func(){}, slow: map[simLink]simSlow{}, duplicate: cfg.duplicate}
	switch {
	case cfg.faults[faultDelay]:
		w.net.maxDelay = 300 * time.Millisecond
	case cfg.faults[faultBreaks]:
		// Something must be in flight for a break to lose it.
		w.net.fixedDelay = simMinDelay
	}
	if cfg.faults[faultSlow] && w.rng.chance(0.3) {
		// The whole network slow until the heal: every message takes up
		// to seconds, in order on its link.
		w.net.slowAll = w.rng.between(time.Second, 15*time.Second)
		w.net.slowUntil = simChaos + w.net.slowAll // the heal
	}
	idle := time.Duration(-1)
	if w.rng.chance(0.5) {
		idle = 20 * time.Second
	}
	w.settings = Settings{
		NumberOfShards: 3 + w.rng.IntN(10), StopTimeout: 5 * time.Second, HandOffTimeout: 10 * time.Second,
		RebalanceInterval: 5 * time.Second, RetryInterval: time.Second, PassivateIdleAfter: idle,
		RememberEntities: w.rng.chance(0.35), RecoveryRate: w.rng.IntN(3),
		RestartBackoffMin: 200 * time.Millisecond, RestartBackoffMax: 5 * time.Second,
	}.withDefaults()
	w.shardCfg = shardCoreConfig{
		hasStopMessage: w.rng.chance(0.9), remember: w.settings.RememberEntities,
		stopTimeout: w.settings.StopTimeout, handOffTimeout: w.settings.HandOffTimeout,
		restartBackoffMin: w.settings.RestartBackoffMin, restartBackoffMax: w.settings.RestartBackoffMax,
		recoveryRate: w.settings.RecoveryRate, recoveryInterval: w.settings.RecoveryInterval,
		bufferLimit: entityBufferLimit(w.settings),
	}
	w.leaveDeadline = 60 * time.Second
	w.leaseTiming = lease.DefaultSettings()
	w.leases = lease.NewMemoryStore(w.storeNow)
	w.nodeLeases = simNodeLeases{w.leases}
	w.coordStore = NewMemoryCoordinatorStoreAt(w.storeNow)
	w.remember = NewMemoryRememberStore()
	for i := range 6 + w.rng.IntN(14) {
		w.entities = append(w.entities, fmt.Sprintf("e%02d", i))
	}
	w.healAt = simChaos
	w.sendEnd = w.healAt + simCalm
	w.end = w.sendEnd + livenessBound
	return w
}

func (w *simWorld) tracef(format string, args ...any) {
	if w.cfg.trace {
		w.res.trace = append(w.res.trace, fmt.Sprintf("%9.3fs ", w.clock.now.Seconds())+fmt.Sprintf(format, args...))
	}
}

// failAbout is fail naming the entity the failure concerns.
func (w *simWorld) failAbout(entityID, invariant, format string, args ...any) {
	if !w.failed() {
		w.res.focus = entityID
		w.fail(invariant, format, args...)
	}
}

// fail records the first violated invariant; the run stops there.
func (w *simWorld) fail(invariant, format string, args ...any) {
	if w.res.failure != "" {
		return
	}
	w.res.invariant = invariant
	w.res.failure = fmt.Sprintf(format, args...)
	w.res.at = w.clock.now
	w.tracef("FAIL %s: %s", invariant, w.res.failure)
}

func (w *simWorld) failed() bool { return w.res.failure != "" }

// run plays the whole schedule and returns what it found.
func (w *simWorld) run() (res simResult) {
	defer func() {
		if p := recover(); p != nil {
			w.fail("panic", "panic: %v", p)
		}
		w.res.steps = w.clock.steps
		res = w.res
	}()
	w.schedule()
	w.clock.runUntil(w.end, w.failed)
	if !w.failed() {
		w.finalChecks()
	}
	return
}

// localDelay is one hop through a node's mailbox.
func (w *simWorld) localDelay() time.Duration {
	if w.cfg.faults[faultDelay] {
		return w.rng.between(0, 2*time.Millisecond)
	}
	return 0
}

func (w *simWorld) storeLatency() time.Duration {
	return w.rng.between(time.Millisecond, 20*time.Millisecond)
}

// stopDuration is how long an entity takes to stop after its stop
// message: mostly quick, sometimes slow, now and then past its timeout.
func (w *simWorld) stopDuration() time.Duration {
	switch r := w.rng.Float64(); {
	case r < 0.8:
		return w.rng.between(0, 300*time.Millisecond)
	case r < 0.95:
		return w.rng.between(300*time.Millisecond, 3*time.Second)
	default:
		return w.rng.between(w.settings.StopTimeout, 3*w.settings.StopTimeout)
	}
}

// backoff is exponential from lo (×1.5 a step) to hi, ±50%.
func (w *simWorld) backoff(lo, hi time.Duration, attempt int) time.Duration {
	d := float64(lo)
	for range attempt {
		d = min(d*backoffMultiplier, float64(hi))
	}
	return time.Duration(d * (0.5 + w.rng.Float64()))
}

// ---- the workload ----

func (w *simWorld) schedule() {
	if w.net.slowAll > 0 {
		w.tracef("every link slow (up to %v more) until the heal", w.net.slowAll)
	}
	for range 2 + w.rng.IntN(3) {
		w.clock.after(w.rng.between(0, 100*time.Millisecond), w.join)
	}
	var chaos func()
	chaos = func() {
		if w.clock.now >= w.healAt {
			return
		}
		w.chaosAction()
		w.clock.after(w.rng.between(2*time.Second, 8*time.Second), chaos)
	}
	w.clock.after(w.rng.between(time.Second, 5*time.Second), chaos)
	w.clock.after(w.healAt, w.heal)
}

// chaosAction picks one membership change or fault among those enabled.
func (w *simWorld) chaosAction() {
	type action struct {
		weight int
		do     func()
	}
	actions := []action{{3, w.join}, {3, w.leaveOne}, {1, w.stopShards}}
	f := w.cfg.faults
	if f[faultCrashes] {
		actions = append(actions, action{2, w.crashOne})
	}
	if f[faultBreaks] {
		actions = append(actions, action{3, w.breakOne})
	}
	if f[faultPartitions] {
		actions = append(actions, action{1, w.partition})
	}
	if f[faultViews] {
		actions = append(actions, action{3, w.suspect})
	}
	if f[faultStore] {
		actions = append(actions, action{2, w.storeOutage})
	}
	if f[faultPauses] {
		actions = append(actions, action{2, w.pauseOne})
	}
	if f[faultSlow] {
		actions = append(actions, action{2, w.slowOne})
	}
	if f[faultOneWay] {
		actions = append(actions, action{1, w.suspectOneWay})
	}
	if f[faultLostAcks] {
		actions = append(actions, action{1, w.lostAcks})
	}
	total := 0
	for _, a := range actions {
		total += a.weight
	}
	r := w.rng.IntN(total)
	for _, a := range actions {
		if r < a.weight {
			a.do()
			return
		}
		r -= a.weight
	}
}

// up lists the nodes that are up and not leaving, in join order.
func (w *simWorld) up() []*simNode {
	var out []*simNode
	for _, name := range w.order {
		if n := w.nodes[name]; n.state == nodeUp && !n.frozen() {
			out = append(out, n)
		}
	}
	return out
}

func (w *simWorld) join() {
	if len(w.up()) >= 6 {
		return
	}
	w.joins++
	name := fmt.Sprintf("n%d", w.joins)
	n := &simNode{w: w, name: name, rate: 1}
	if w.cfg.faults[faultDrift] {
		n.rate = 0.95 + 0.1*w.rng.Float64()
	}
	n.region = newRegionCore[simCmd, *simShard](w.regionConfig(name))
	n.fx = regionEffects[simCmd, *simShard]{core: n.region, env: simRegionIO{n}, typ: simType, self: addr(name)}
	if err := n.holdLease(); err != nil {
		w.fail("runner", "%s: acquire the node lease: %v", name, err)
		return
	}
	w.nodes[name] = n
	w.order = append(w.order, name)
	w.truth[name] = cluster.Member{Address: addr(name), JoinOrder: w.joins, Status: cluster.Up}
	w.tracef("%s joins", name)
	n.view = w.viewOf(name)
	n.viewLast = w.clock.now
	n.applyView(n.view)
	n.tick()
	w.publishViews(name)
	for range 1 + w.rng.IntN(2) {
		w.senders++
		w.startSender(n, fmt.Sprintf("s%d@%s", w.senders, name))
	}
}

// regionConfig is what newRegion derives from the settings.
func (w *simWorld) regionConfig(self string) regionCoreConfig {
	cfg := regionCoreConfig{self: addr(self), bufferSize: w.settings.BufferSize, tickInterval: w.settings.RetryInterval}
	if idle := w.settings.PassivateIdleAfter; idle > 0 {
		cfg.tickInterval = min(cfg.tickInterval, idle/2)
		cfg.idleTicks = uint64((idle + cfg.tickInterval - 1) / cfg.tickInterval)
	}
	cfg.waitTicks = uint64((w.settings.HandOffTimeout + cfg.tickInterval - 1) / cfg.tickInterval)
	cfg.registerRetry = max(100*time.Millisecond, w.settings.RetryInterval/8)
	return cfg
}

// startSender sends numbered messages through n to random entities, until
// n leaves or the run's sending ends.
func (w *simWorld) startSender(n *simNode, id string) {
	seq := 0
	var send func()
	send = func() {
		if n.state != nodeUp || w.clock.now >= w.sendEnd {
			return
		}
		if n.frozen() { // its client waits for it
			w.clock.after(n.frozenUntil-w.clock.now+w.rng.between(0, time.Millisecond), send)
			return
		}
		seq++
		msg := simCmd{Sender: id, Seq: seq}
		entityID := w.entities[w.rng.IntN(len(w.entities))]
		s := &simSend{entityID: entityID, at: w.clock.now, inTell: true}
		w.sends[msg] = s
		err := n.tell(entityID, msg)
		s.inTell = false
		if err != nil {
			w.tracef("%s tell %s %+v: %v", n.name, entityID, msg, err)
			if s.delivered {
				w.fail("at-most-once", "%v to %s was delivered although Tell refused it: %v", msg, entityID, err)
			}
		} else {
			s.accepted = true
			w.res.accepted++
			w.tracef("%s tell %s %+v", n.name, entityID, msg)
		}
		w.clock.after(w.rng.between(50*time.Millisecond, 400*time.Millisecond), send)
	}
	w.clock.after(w.rng.between(0, 200*time.Millisecond), send)
}

func (w *simWorld) leaveOne() {
	up := w.up()
	if len(up) < 2 {
		return
	}
	n := up[w.rng.IntN(len(up))]
	if w.rng.chance(0.3) {
		n = up[0] // the oldest, coordinator and all
	}
	// As a service drains its requests before it shuts sharding down:
	// the senders stop, then the region leaves.
	n.state = nodeLeaving
	w.tracef("%s drains", n.name)
	n.after(simDrain, n.leave)
}

// pauseOne freezes a node as docker pause, SIGSTOP or a long stop-the-
// world pause would, for longer than its node lease: nothing of it runs
// (timers, message handling, store answers, its clients' calls) while
// its clock and the store's run on; requests it sent before are served
// meanwhile. Memberlist on the others notices after a while. At resume
// what waited runs in an order of the PRNG's choosing (each source's own
// order kept): a message may be handled before the fence check that is
// long overdue, which is the case the node's lease check on the entity
// path (the journal's fence in production) must catch.
func (w *simWorld) pauseOne() {
	up := w.up()
	if len(up) < 2 {
		return
	}
	n := up[w.rng.IntN(len(up))]
	// Resumed by the heal, as every fault ends then: a pause that the
	// heal cuts short of the lease is a harmless one.
	d := min(w.leaseTiming.Node.Length+w.rng.between(0, 2*w.leaseTiming.Node.Length), w.healAt-w.clock.now)
	n.frozenUntil = w.clock.now + d
	w.tracef("%s pauses for %v", n.name, d)
	w.clock.after(w.rng.between(time.Second, 5*time.Second), func() {
		// The failure detector notices, if it is still frozen.
		if m, ok := w.truth[n.name]; ok && !m.Unreachable && n.frozen() {
			w.tracef("%s unreachable in the membership", n.name)
			m.Unreachable = true
			w.truth[n.name] = m
			w.publishViews("")
		}
	})
	w.clock.after(d, func() {
		w.tracef("%s resumes", n.name)
		if m, ok := w.truth[n.name]; ok && m.Unreachable && n.state != nodeGone {
			// It answers probes again and refutes its failure.
			m.Unreachable = false
			w.truth[n.name] = m
			w.publishViews("")
		}
	})
}

func (w *simWorld) crashOne() {
	up := w.up()
	if len(up) < 2 {
		return
	}
	up[w.rng.IntN(len(up))].crash()
}

func (w *simWorld) stopShards() {
	up := w.up()
	if len(up) == 0 {
		return
	}
	n := up[w.rng.IntN(len(up))]
	shard := w.settings.ShardID(w.entities[w.rng.IntN(len(w.entities))])
	w.tracef("%s asks to stop shard %s", n.name, shard)
	n.regionInput(func(c *regionCore[simCmd, *simShard]) { c.toCoordinator(protocol.StopShards{Shards: []string{shard}}) })
}

func (w *simWorld) breakOne() {
	up := w.up()
	if len(up) < 2 {
		return
	}
	a, b := up[w.rng.IntN(len(up))], up[w.rng.IntN(len(up))]
	if a == b {
		return
	}
	if w.cfg.faults[faultSlow] && w.rng.chance(0.5) {
		// As the TCP transport does: it keeps its queue across a broken
		// connection and redials; what was on its way arrives late.
		redial := w.rng.between(time.Second, 15*time.Second)
		w.tracef("link %s-%s breaks, redialled in %v", a.name, b.name, redial)
		w.net.holdLink(a.name, b.name, w.clock.now+redial)
		return
	}
	w.tracef("link %s-%s breaks", a.name, b.name)
	w.net.breakLink(a.name, b.name)
}

// slowOne makes a link slow, both ways, for a while: each message on it
// takes up to tens of seconds (longer than HandOffTimeout), in order.
// It ends by the heal; what it carries then still arrives late.
func (w *simWorld) slowOne() {
	up := w.up()
	if len(up) < 2 {
		return
	}
	a, b := up[w.rng.IntN(len(up))], up[w.rng.IntN(len(up))]
	if a == b {
		return
	}
	until := min(w.clock.now+w.rng.between(2*time.Second, 20*time.Second), w.healAt)
	worst := w.rng.between(time.Second, 25*time.Second)
	w.tracef("link %s-%s slow (up to %v) until %v", a.name, b.name, worst, until)
	for _, l := range []simLink{{a.name, b.name}, {b.name, a.name}} {
		w.net.slow[l] = simSlow{until: until, worst: worst}
	}
	w.net.slowUntil = max(w.net.slowUntil, until+worst)
}

// suspectOneWay makes every other node's view hold one node unreachable
// while its own view holds them all reachable (a one-way failure of its
// outgoing probes' answers, say), for up to 30 s: often the oldest, whose
// coordinator keeps the lease and sees every region, while they take the
// next node for the oldest.
func (w *simWorld) suspectOneWay() {
	up := w.up()
	if len(up) < 3 {
		return
	}
	x := up[w.rng.IntN(len(up))]
	if w.rng.chance(0.6) {
		x = up[0]
	}
	d := w.rng.between(5*time.Second, 30*time.Second)
	w.tracef("every node suspects %s, one way, for %v", x.name, d)
	var observers []string
	for _, o := range up {
		if o != x {
			observers = append(observers, o.name)
			w.hide(o.name, x.name)
		}
	}
	w.publishViews(x.name)
	w.clock.after(d, func() {
		for _, o := range observers {
			w.unhide(o, x.name)
		}
		w.publishViews(x.name)
	})
}

// lostAcks makes store calls commit and then report failure for a while
// (the answer lost with the connection, a timeout after the commit).
func (w *simWorld) lostAcks() {
	w.storeLostAck = 0.3
	w.tracef("store answers start getting lost")
	w.clock.after(w.rng.between(time.Second, 8*time.Second), func() {
		w.storeLostAck = 0
		w.tracef("store answers get through again")
	})
}

// partition splits the live nodes in two for a while; after a detection
// delay each side's views hold the other unreachable. Now and then one
// side is cut off from the store too: its nodes must fence themselves.
func (w *simWorld) partition() {
	var live []string
	for _, name := range w.order {
		if w.nodes[name].state != nodeGone {
			live = append(live, name)
		}
	}
	if len(live) < 2 {
		return
	}
	var side []string
	for len(side) == 0 || len(side) == len(live) {
		side = side[:0]
		for _, name := range live {
			if w.rng.chance(0.5) {
				side = append(side, name)
			}
		}
	}
	w.tracef("partition %v | rest", side)
	var cutOff []string
	if w.rng.chance(0.3) {
		cutOff = side
		if w.rng.chance(0.5) {
			cutOff = slices.DeleteFunc(slices.Clone(live), func(n string) bool { return slices.Contains(side, n) })
		}
		w.tracef("%v cut off from the store", cutOff)
		for _, name := range cutOff {
			w.storeCut[name] = true
		}
	}
	var pairs [][2]string
	for _, a := range side {
		for _, b := range live {
			if !slices.Contains(side, b) {
				pairs = append(pairs, [2]string{a, b})
				w.net.cut[simLink{a, b}], w.net.cut[simLink{b, a}] = true, true
				w.net.breakLink(a, b)
			}
		}
	}
	w.clock.after(w.rng.between(time.Second, 3*time.Second), func() {
		for _, p := range pairs {
			if w.net.cut[simLink{p[0], p[1]}] {
				w.hide(p[0], p[1])
				w.hide(p[1], p[0])
			}
		}
		w.publishViews("")
	})
	w.clock.after(w.rng.between(3*time.Second, 15*time.Second), func() {
		w.tracef("partition %v heals", side)
		for _, name := range cutOff {
			delete(w.storeCut, name)
		}
		for _, p := range pairs {
			delete(w.net.cut, simLink{p[0], p[1]})
			delete(w.net.cut, simLink{p[1], p[0]})
			w.unhide(p[0], p[1])
			w.unhide(p[1], p[0])
		}
		w.publishViews("")
	})
}

// suspect makes one node's view hold a live member unreachable for a while.
func (w *simWorld) suspect() {
	up := w.up()
	if len(up) < 2 {
		return
	}
	o, x := up[w.rng.IntN(len(up))], up[w.rng.IntN(len(up))]
	if w.rng.chance(0.4) {
		x = up[0] // the oldest: two coordinators
	}
	if o == x {
		return
	}
	w.tracef("%s suspects %s", o.name, x.name)
	w.hide(o.name, x.name)
	w.publishView(o)
	w.clock.after(w.rng.between(2*time.Second, 10*time.Second), func() {
		w.unhide(o.name, x.name)
		w.publishView(o)
	})
}

func (w *simWorld) storeOutage() {
	w.storeFail = 0.3
	w.tracef("store starts failing")
	w.clock.after(w.rng.between(time.Second, 8*time.Second), func() {
		w.storeFail = 0
		w.tracef("store recovers")
	})
}

// heal ends every fault: from here on, liveness is owed.
func (w *simWorld) heal() {
	w.tracef("heal")
	for _, name := range w.order { // crashes are detected by now: Down for good
		if m, ok := w.truth[name]; ok && w.nodes[name].crashed {
			m.Status, m.Unreachable = cluster.Down, true
			w.truth[name] = m
		}
	}
	clear(w.net.cut)
	clear(w.hidden)
	clear(w.storeCut)
	w.storeFail, w.storeLostAck = 0, 0
	w.publishViews("")
}

// ---- membership ----

func (w *simWorld) hide(observer, member string) {
	if w.hidden[observer] == nil {
		w.hidden[observer] = map[string]bool{}
	}
	w.hidden[observer][member] = true
}

func (w *simWorld) unhide(observer, member string) { delete(w.hidden[observer], member) }

// viewOf is observer's view of the cluster now, sorted by name: every
// member, those it cannot reach marked unreachable (memberlist keeps a
// failed member Unreachable until it comes back or is declared Down).
func (w *simWorld) viewOf(observer string) []cluster.Member {
	var view []cluster.Member
	for _, name := range slices.Sorted(maps.Keys(w.truth)) {
		m := w.truth[name]
		if name != observer && w.hidden[observer][name] {
			m.Unreachable = true
		}
		view = append(view, m)
	}
	return view
}

// publishViews sends every live node (but skip) its current view.
func (w *simWorld) publishViews(skip string) {
	for _, name := range w.order {
		if n := w.nodes[name]; name != skip && n.state != nodeGone {
			w.publishView(n)
		}
	}
}

// publishView hands n its view after a lag: at once, or up to 3 s with
// the views fault. Views reach a node in the order they were taken. The
// heal ends the lag with every other fault: from then on a view reaches
// its node at once, and the lagging ones taken before it are dropped (the
// membership has converged), else a view from before the heal would
// still drive decisions seconds after it.
func (w *simWorld) publishView(n *simNode) {
	view := w.viewOf(n.name)
	lag := time.Duration(0)
	if w.cfg.faults[faultViews] && w.clock.now < w.healAt {
		lag = w.rng.between(0, 3*time.Second)
	}
	at := max(w.clock.now+lag, n.viewLast)
	if w.clock.now >= w.healAt {
		at = w.clock.now
	}
	n.viewLast = max(at, n.viewLast)
	n.viewSeq++
	seq := n.viewSeq
	w.clock.after(at-w.clock.now, func() {
		n.awake("views", func() {
			if seq < n.viewApplied {
				return // superseded by a view taken after the heal
			}
			n.viewApplied = seq
			n.applyView(view)
		})
	})
}

// removeMember takes a node out of the membership after delay.
func (w *simWorld) removeMember(name string, delay time.Duration) {
	w.clock.after(delay, func() {
		if _, ok := w.truth[name]; !ok {
			return
		}
		w.tracef("%s removed from the membership", name)
		delete(w.truth, name)
		w.publishViews("")
	})
}

// failMember makes a node that crashed or fenced itself unreachable in
// every view, once the failure detector noticed (after delay).
func (w *simWorld) failMember(name string, delay time.Duration) {
	w.clock.after(delay, func() {
		m, ok := w.truth[name]
		if !ok || m.Unreachable {
			return
		}
		w.tracef("%s unreachable in the membership", name)
		m.Unreachable = true
		w.truth[name] = m
		w.publishViews("")
	})
}

// ---- the network's far end ----

func (w *simWorld) arrive(from, to string, coordinator bool, msg Message) {
	w.res.messages++
	n := w.nodes[to]
	if n == nil || n.state == nodeGone {
		w.tracef("%s -> %s%s dropped (node gone): %s", from, to, coordSuffix(coordinator), simShow(msg))
		sender := w.nodes[from]
		if n != nil && (n.crashed || n.stoppedLate) || sender != nil && (sender.crashed || sender.stoppedLate || sender.frozen() && w.leaseEnded(sender)) {
			// Or its sender died (a pause past its lease is death to the
			// protocol) or its leave ran out of time: a hand-off went on
			// without its fence, and what it still had on its way found
			// the old home gone.
			// A leave that outlasted its deadline (only a fault, such as
			// a link slower than the deadline allows, makes it) ends as
			// a crash does for what is still on its way.
			w.lostToFault(msg)
		}
		return
	}
	if n.frozen() {
		n.later("from "+from+coordSuffix(coordinator), func() { w.arrive(from, to, coordinator, msg) })
		return
	}
	if coordinator {
		n.arriveCoordinator(from, msg)
		return
	}
	if d, ok := msg.(protocol.Deliver); ok && w.cfg.dropSome && w.rng.chance(0.2) {
		w.tracef("%s -> %s: sabotage drops %v", from, to, d.Msg)
		return
	}
	n.arrive(from, msg)
}

// ---- invariants ----

// checkLease: a node acts on entities only while the store says its node
// lease has not expired (it fences itself first), else its shards could
// be running elsewhere.
func (w *simWorld) checkLease(n *simNode, what string) {
	expired, err := w.leases.NodeLeaseExpired(context.Background(), simAddr(n.name))
	if err != nil || expired {
		w.fail("lease", "%s %s while its node lease is expired in the store (%v)", n.name, what, err)
	}
}

// leaseEnded reports whether n's node lease has expired in the store.
func (w *simWorld) leaseEnded(n *simNode) bool {
	expired, err := w.leases.NodeLeaseExpired(context.Background(), simAddr(n.name))
	return err == nil && expired
}

// start records a new incarnation: no other may be active anywhere.
func (w *simWorld) start(sh *simShard, entityID string) *simInc {
	w.checkLease(sh.n, "starts "+entityID)
	w.serials++
	inc := &simInc{serial: w.serials, entityID: entityID, sh: sh}
	if old := w.live[entityID]; old != nil && !w.leaseEnded(old.sh.n) {
		// An incarnation on a node whose lease ended in the store is
		// frozen or fenced: it never acts again (checkLease).
		w.failAbout(entityID, "one incarnation", "%s started as #%d on %s while #%d is active on %s",
			entityID, inc.serial, sh.n.name, old.serial, old.sh.n.name)
	}
	w.live[entityID] = inc
	w.tracef("%s starts %s#%d in shard %s", sh.n.name, entityID, inc.serial, sh.id)
	return inc
}

// kill records that inc stopped.
func (w *simWorld) kill(inc *simInc) {
	inc.dead = true
	if w.live[inc.entityID] == inc {
		delete(w.live, inc.entityID)
	}
	w.tracef("%s#%d stops on %s", inc.entityID, inc.serial, inc.sh.n.name)
}

// received checks and records one delivery, then lets the entity act:
// now and then it asks to passivate, fails, or stops by itself.
func (w *simWorld) received(inc *simInc, msg simCmd) {
	s := w.sends[msg]
	w.tracef("%s#%d on %s receives %+v", inc.entityID, inc.serial, inc.sh.n.name, msg)
	id := inc.entityID
	switch {
	case inc.dead:
		w.failAbout(id, "runner", "%v told to stopped incarnation %s#%d", msg, id, inc.serial)
	case s == nil || s.entityID != id:
		w.failAbout(id, "at-most-once", "%v reached %s, which it was not sent to", msg, id)
	case s.delivered:
		w.failAbout(id, "at-most-once", "%v reached %s twice (first at %v)", msg, id, s.deliveredAt)
	case !s.accepted && !s.inTell:
		w.failAbout(id, "at-most-once", "%v reached %s although Tell refused it", msg, id)
	}
	w.checkLease(inc.sh.n, fmt.Sprintf("delivers %v to %s", msg, id))
	if w.failed() {
		return
	}
	k := [2]string{msg.Sender, inc.entityID}
	if last := w.last[k]; msg.Seq < last {
		w.failAbout(id, "order", "%s got %v after %s:%d", inc.entityID, msg, msg.Sender, last)
		return
	}
	w.last[k] = msg.Seq
	s.delivered, s.deliveredAt = true, w.clock.now
	w.res.delivered++
	sh, n := inc.sh, inc.sh.n
	switch r := w.rng.Float64(); {
	case r < 0.03:
		n.local(func() {
			if !inc.dead && !sh.gone {
				w.tracef("%s#%d asks to passivate", inc.entityID, inc.serial)
				sh.core.passivate(inc.entityID, inc)
				sh.apply()
			}
		})
	case r < 0.035:
		n.local(func() { sh.die(inc, errSimFailure) })
	case r < 0.037:
		n.local(func() { sh.die(inc, nil) })
	}
}

// lostToFault marks the entity messages in v (a protocol message, a
// buffer) as lost by a fault: a link break, a partition or a crash.
func (w *simWorld) lostToFault(v any) {
	simCmds(reflect.ValueOf(v), func(c simCmd) {
		if s := w.sends[c]; s != nil && !s.delivered {
			s.faultLost = true
		}
	})
}

// droppedAtStop marks the messages n's region still buffers as it stops.
func (w *simWorld) droppedAtStop(n *simNode) {
	// Judged by the stopping region's view, as the region judges it (see
	// regionCore.alone): a node that joined after that view was taken
	// (views lag) is out of its sight, and a leave that waited for every
	// such node would never end.
	nowhere := !slices.ContainsFunc(w.order, func(name string) bool {
		o := w.nodes[name]
		return o != n && o.state == nodeUp && n.region.live[addr(name)]
	})
	for _, id := range slices.Sorted(maps.Keys(n.region.shards)) {
		e := n.region.shards[id]
		for _, p := range e.buffer {
			if s := w.sends[p.msg]; s != nil && !p.start {
				s.droppedAtStop, s.nowhere = true, nowhere
				w.tracef("%s stops with %+v for %s in its buffer (no other node up: %v)", n.name, p.msg, p.entityID, nowhere)
			}
		}
		// And the mail of a hand-over not yet acknowledged (a leave past
		// its deadline): it is this region's to re-send, or to take back.
		for _, d := range e.sent.Msgs {
			if c, ok := d.Msg.(simCmd); ok {
				if s := w.sends[c]; s != nil && !s.delivered {
					s.droppedAtStop, s.nowhere = true, nowhere
					w.tracef("%s stops with %+v for %s in an unacknowledged hand-over (no other node up: %v)", n.name, c, d.EntityID, nowhere)
				}
			}
		}
	}
	// And what its shards hold for entities that were stopping (the
	// shards are terminated with the region).
	n.heldByShards(func(entityID string, msg simCmd) {
		if s := w.sends[msg]; s != nil && !s.delivered {
			s.droppedAtStop, s.nowhere = true, nowhere
			w.tracef("%s stops with %+v for %s held in its shard (no other node up: %v)", n.name, msg, entityID, nowhere)
		}
	})
}

// lost records a message a region accepted and then dropped.
func (w *simWorld) lost(p pending[simCmd], format string, args ...any) {
	w.tracef("LOST %+v: "+format, append([]any{p.msg}, args...)...)
}

// finalChecks: liveness after the heal, and no loss without lossy faults.
func (w *simWorld) finalChecks() {
	keys := slices.SortedFunc(maps.Keys(w.sends), func(a, b simCmd) int {
		return cmpSends(w.sends[a], w.sends[b], a, b)
	})
	for _, k := range keys {
		s := w.sends[k]
		if !s.accepted {
			continue
		}
		late := !s.delivered || s.deliveredAt > s.at+livenessBound
		switch {
		case s.at >= max(w.healAt, w.lastFence) && late:
			w.failAbout(s.entityID, "liveness", "%v to %s, sent at %v after the heal, %s", k, s.entityID, s.at, deliveredWhen(s))
		case !s.delivered && !s.faultLost && (!s.droppedAtStop || w.cfg.strict && !s.nowhere):
			w.failAbout(s.entityID, "no loss", "%v to %s, sent at %v and accepted, never delivered", k, s.entityID, s.at)
		default:
			continue
		}
		w.res.focusMsg = fmt.Sprintf("Sender:%s Seq:%d}", k.Sender, k.Seq)
		return
	}
}

func cmpSends(a, b *simSend, ka, kb simCmd) int {
	if a.at != b.at {
		return int(a.at - b.at)
	}
	return strings.Compare(fmt.Sprint(ka), fmt.Sprint(kb))
}

func deliveredWhen(s *simSend) string {
	if !s.delivered {
		return "never delivered"
	}
	return fmt.Sprintf("delivered only at %v", s.deliveredAt)
}

// ---- stores with injectable failures ----

// The stores live on the store's clock (virtual time, no drift: the
// database's), which each node's lease Keeper never reads. A store call
// from a node that a partition cut off from the store, or made during a
// store outage, fails.

var (
	errSimStore    = errors.New("sim: store unavailable")
	errSimStoreCut = errors.New("sim: node cut off from the store")
	// errSimStoreLostAck: the call committed, its answer was lost.
	errSimStoreLostAck = errors.New("sim: store answer lost")
)

// storeErr is what a store call from node meets now: nil, or the error
// of a store it cannot reach.
func (w *simWorld) storeErr(node string) error {
	if w.storeCut[node] {
		return errSimStoreCut
	}
	if w.storeFails() {
		return errSimStore
	}
	return nil
}

func (w *simWorld) storeFails() bool { return w.storeFail > 0 && w.rng.chance(w.storeFail) }

// storeNow is the store's clock.
func (w *simWorld) storeNow() time.Time { return simBase.Add(w.clock.now) }

// storeCall makes an asynchronous store call from n: the request reaches
// the store after a latency (and acts there even if n died meanwhile, as
// a request in flight does), the answer reaches n after another, unless
// n is gone by then.
func (w *simWorld) storeCall(n *simNode, call func() error, answer func(error)) {
	w.clock.after(w.storeLatency(), func() {
		err := w.storeErr(n.name)
		if err == nil {
			err = call()
			if err == nil && w.storeLostAck > 0 && w.rng.chance(w.storeLostAck) {
				err = errSimStoreLostAck // committed all the same
			}
		}
		w.clock.after(w.storeLatency(), func() {
			n.awake("store", func() { answer(err) })
		})
	})
}

// simAddr is the incarnation a sim node's lease names: sim node names are
// never reused, so one incarnation each.
func simAddr(node string) cluster.UniqueAddress {
	return cluster.UniqueAddress{Node: node, Incarnation: 1}
}

// simNodeLeases is the coordinator's view of the node leases
// (remote.NodeLeases in production).
type simNodeLeases struct{ store *lease.MemoryStore }

func (l simNodeLeases) DownNode(ctx context.Context, node string) error {
	return l.store.DownNode(ctx, simAddr(node))
}

func (l simNodeLeases) NodeLeaseExpired(ctx context.Context, node string) (bool, error) {
	expired, err := l.store.NodeLeaseExpired(ctx, simAddr(node))
	if errors.Is(err, lease.ErrNoLease) {
		return true, nil // never held one: never hosted anything
	}
	return expired, err
}
