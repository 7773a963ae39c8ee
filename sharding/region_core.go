package sharding

import (
	"errors"
	"fmt"
	"github.com/shoal-dev/shoal/cluster"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/shoal-dev/shoal/sharding/internal/protocol"
	"go.opentelemetry.io/otel/trace"
)

// errHandOverTooLate refuses the mail of a HandOver that came from a home
// already gone, after the shard started without it, here or at the next
// home this region's own mail went to (see handedOver).
var errHandOverTooLate = errors.New("sharding: hand-over from a home already gone came after the shard started without it")

// regionCore is a region's routing bookkeeping as a pure state machine, in
// the style of coordinatorCore and shardCore: each input (a message for an
// entity, a protocol message, a membership change, the retry tick, a shard
// that finished its hand-off, a request to leave or stop) changes its state
// and queues effects (send this, forward that, host or hand off a shard,
// deliver to a local shard, arm the tick, log) for the runner to carry out
// in order. It holds no lock, starts no goroutine, reads no clock and does
// no IO.
//
// S is the runner's handle on a shard hosted here; the core only stores it
// (see attach), so that the runner's data path finds it in one lookup.
type regionCore[C any, S comparable] struct {
	cfg      regionCoreConfig
	shards   map[string]*regionShard[C, S]
	buffered int // messages in every shard's buffer
	epoch    uint64
	// oldest is the coordinator's node in the membership, as the runner
	// last told; coordinator the one this region registered with ("" for
	// oldest).
	oldest, coordinator cluster.UniqueAddress
	live                map[cluster.UniqueAddress]bool // nodes in the membership view, but those down; nil: not told yet
	// down are the nodes in the view that the coordinator holds Down
	// (MembersDown): they count as gone from it.
	down map[cluster.UniqueAddress]bool
	// departed are the nodes a view held and a later one did not: gone
	// for good (a node incarnation never comes back), so kept for the
	// region's life, one name per node that left. A node no view has
	// held yet is not gone, but newer than this region's view.
	departed   map[cluster.UniqueAddress]bool
	registered bool
	// regEpoch is the epoch of the coordinator this region last
	// registered with (see forwardsHeld).
	regEpoch uint64
	// announcer is a coordinator that made itself known (ShardHomes) from
	// another node than the one this region registers with: the region
	// registers with it too until it registers somewhere (see register).
	announcer    cluster.UniqueAddress
	stopped      bool
	leaving      bool
	leaveAcked   bool // the coordinator allocates nothing to us any more
	awaitingLeft bool // regLeft is still to be emitted
	awaitingGone bool // stopped: RegionStopped waits for hosted shards to stop
	idleTick     uint64
	// leaveWaited counts the ticks a leaving region has waited for its
	// buffer to go on; past 2×waitTicks it leaves without (the shards may
	// have nowhere to go: the last region of the type leaves). It counts
	// only while no other node is in the view (see alone): another may be
	// a region the buffer goes to once a partition heals, which can
	// outlast any bound (a bound would drop the buffer before the heal). It starts
	// again when the coordinator places a shard the region buffers for
	// anew (see pushedHome).
	leaveWaited uint64
	// handOverSeq numbers the HandOvers this region sends (see handOver).
	handOverSeq uint64
	// flushes are the nodes a leaving region may have forwarded to without
	// knowing yet that those forwards arrived: each with the Seq of the
	// Flush sent there after the last of them, 0 while none was (see
	// flushed). flushSeq numbers the Flushes.
	flushes  map[cluster.UniqueAddress]uint64
	flushSeq uint64
	// registerWait is the wait before the next early re-registration (see
	// registerSoon), 0 while none is armed; registerGen tells the armed
	// one from those it replaced.
	registerWait time.Duration
	registerGen  uint64

	out []regionEffect[C, S]
}

// regionCoreConfig is what a region's decisions depend on.
type regionCoreConfig struct {
	self         cluster.UniqueAddress // this region's node
	proxy        bool                  // routes only: never hosts a shard
	bufferSize   int                   // messages held while homes are unknown or hand-offs run
	tickInterval time.Duration
	// registerRetry is the first wait before a Register that no
	// RegisterAck answered is sent again, doubling up to tickInterval
	// (see registerSoon); 0 leaves it to the tick.
	registerRetry time.Duration
	idleTicks     uint64 // ticks after which an entity is idle; 0 for no idle passivation
	// waitTicks bounds, in ticks, a wait for a hand-over this region only
	// guesses (see pushedHome), and a leaving region's wait for its buffer
	// to go on while it is alone; 0 for no bound. Fences and a hand-over a
	// HostShard names are not bounded: they are re-sent (see resendFences,
	// handOver).
	waitTicks uint64
}

// regionShard is what a region knows of one shard.
type regionShard[C any, S comparable] struct {
	home       cluster.UniqueAddress // node of the hosting region; zero while unknown
	hosted     bool                  // hosted here: local is its handle once attached
	local      S
	buffer     []pending[C]
	handingOff bool
	requested  bool // GetShardHome sent, unanswered
	// handOver: this region was the shard's home and holds mail for the
	// next one (in buffer), which it sends there once it learns of it.
	handOver bool
	// awaiting is the previous home whose HandOver this region waits for
	// before it starts the shard allocated to it; handedIn, the regions
	// whose HandOver came before the HostShard.
	awaiting cluster.UniqueAddress
	handedIn map[cluster.UniqueAddress]bool
	// guessed: the wait for awaiting is this region's guess, without a
	// HostShard or a HandOff naming it (see pushedHome; a HandOff of a
	// coordinator that predates MailHeldBy names none). The coordinator may have
	// placed the shard here because that home is dead to it (its lease
	// expired) while this region's view still lists it, so the wait is
	// bounded by waitTicks; a named one is not (see handOver).
	guessed bool
	// then is the home awaited once awaiting has handed over, when the
	// shard came back here meanwhile; its mail goes behind the first
	// thenAt messages of buffer.
	then   cluster.UniqueAddress
	thenAt int
	// hostFrom is the From of the last HostShard, until the shard is
	// handed off from here: the coordinator sends it again to a home that
	// asks (its HostShard may have been lost), and one that came after
	// From's mail is no reason to wait for it again (that wait would never end).
	hostFrom cluster.UniqueAddress
	// relays tell awaiting of HandOvers from homes before it that came
	// here instead (see handedOver), re-sent each tick until it hands over.
	relays []protocol.HandOver
	// handedSeq is, per sender, the Seq of the last HandOver taken for
	// the shard: a re-sent one is acknowledged again and dropped.
	handedSeq map[cluster.UniqueAddress]uint64
	// handedFront counts the messages at the front of buffer that came in
	// HandOvers, in the order they came: the next one goes behind them,
	// ahead of the region's own.
	handedFront int
	// owesHandOver: this region stopped the shard (as its home, or as the
	// home the coordinator named) and has not yet sent a HandOver to the
	// next home. It sends one when it learns that home, empty if it holds
	// nothing: a next home whose HostShard was lost does not know whether
	// we hold mail, and waits for it (see pushedHome).
	owesHandOver bool
	// handOverTo is the node this region sent the shard's mail to, until
	// that node acknowledges it (ShardStarted): a leaving region stays
	// until then, so that it never leaves the view ahead of its mail.
	// sent is that HandOver, re-sent each tick until then.
	handOverTo cluster.UniqueAddress
	sent       protocol.HandOver
	// sentCopies counts the copies of sent given to the transport, and
	// sentRefused those it refused at once (nothing listened at
	// handOverTo): while they are equal, no copy can have reached that
	// node, and the mail is still this region's alone to deliver.
	sentCopies, sentRefused int
	// hostAfter: the shard is allocated here while handOverTo, another
	// node, has not yet acknowledged the mail this region sent it; the
	// shard starts here once it does, or is gone (see setHome).
	hostAfter bool
	// fences are the Fences for the shard that arrived here, each of
	// its region and hand-off; stopWaits, while stopping, the regions
	// whose fence of the HandOff's hand-off the HandOff awaits before the
	// shard stops. A fence of another hand-off counts for nothing.
	fences    map[fenceKey]bool
	stopWaits []cluster.UniqueAddress
	stopping  bool // HandOff received, waiting for fences
	// handOffEpoch and handOffSeq name the hand-off of the last
	// BeginHandOff, handOffTold that the HandOff of a hosted shard came: a
	// hand-off begun by a coordinator that is gone before its HandOff is
	// abandoned once a newer one homes the shard here (see setHome).
	handOffEpoch, handOffSeq uint64
	handOffTold              bool
	// fencedAt is the home this region fenced at for that hand-off: the
	// Fence goes there again each tick while the hand-off runs (a broken
	// link may have lost it, and the home waits for it without a bound).
	fencedAt cluster.UniqueAddress
	// fenceOwed is a home this region forwarded the shard's messages to
	// and then forgot (a ShardHomes left the shard out while its hand-off
	// ran, before this region heard of it): what it forwarded may still
	// be on its way there, so the next BeginHandOff fences there.
	fenceOwed cluster.UniqueAddress
	// stopEpoch and stopSeq name the hand-off of the last HandOff,
	// doneEpoch and doneSeq the last one this region finished: asked again
	// (its ShardStopped was lost), it reports again at once, without
	// waiting for fences used up.
	stopEpoch, doneEpoch, stopSeq, doneSeq uint64
	waited                                 uint64 // ticks spent waiting for a hand-over or fences
	// placed is the last home the coordinator pushed for the shard; an
	// unreachable home is forgotten (home ""), not this.
	placed cluster.UniqueAddress
}

// fenceKey is one region's fence for one hand-off (coordinator epoch and
// the coordinator's number for it).
type fenceKey struct {
	from       cluster.UniqueAddress
	epoch, seq uint64
}

type pending[C any] struct {
	entityID string
	msg      C
	start    bool // StartEntity: no message, just make sure it runs
	ask      bool // the command of an ask: its home fails it fast (Deliver.Ask)
	// trace is the trace context msg carries to its handler, nil for none
	// (Deliver.Trace; docs/DESIGN.md, "Tracing").
	trace *trace.SpanContext
}

// regionEffectKind names what the runner is to do.
type regionEffectKind uint8

const (
	// regSend: send msg to node's region, or to its coordinator with coordinator.
	regSend regionEffectKind = iota
	// regForward: send p to the region on node, for shard.
	regForward
	// regHost: start hosting shard, then attach its handle.
	regHost
	// regDeliver: deliver p to the local shard; with accepted the region
	// took it earlier (it was buffered) and the shard must not refuse it
	// for its own buffer limit.
	regDeliver
	// regHandOff: stop the local shard's entities; handedOff reports the end.
	regHandOff
	// regPassivateIdle: the local shard passivates entities idle for more
	// than ticks ticks at tick.
	regPassivateIdle
	// regArmTick: call tick after after.
	regArmTick
	// regArmRegister: call retryRegister(tick) after after, replacing the
	// one armed before.
	regArmRegister
	// regLeft: a leaving region hosts nothing and will be allocated
	// nothing: it may stop.
	regLeft
	// regTerminate: stop the local shard's entities at once, without
	// their stop message; shardTerminated reports when all have stopped.
	regTerminate
	// regGone: the region told the coordinator it is gone: the node may
	// leave the membership.
	regGone
	// regDeadLetter: p, forwarded here by another region, is refused
	// with err: a dead letter, counted and logged.
	regDeadLetter
	// regNote: a log line about something ignored or dropped.
	regNote
)

// regionEffect is one thing for the runner to do; which fields matter
// depends on kind.
type regionEffect[C any, S comparable] struct {
	kind        regionEffectKind
	node        cluster.UniqueAddress
	coordinator bool
	msg         Message
	shard       string
	p           pending[C]
	accepted    bool
	tick, ticks uint64
	after       time.Duration
	err         error // regDeadLetter
	// handOver: msg is this region's HandOver (regSend); the runner
	// reports a send the transport refused with handOverRefused.
	handOver bool
	level    slog.Level // regNote
	note     string
	args     []any
}

// routeVerdict tells the runner what became of a message for an entity.
type routeVerdict uint8

const (
	routeLocal   routeVerdict = iota // deliver it to the returned shard's local handle
	routeRemote                      // forward it to the returned shard's home
	routeHeld                        // buffered until the shard's home is known
	routeStopped                     // refused: the region stopped
	routeFull                        // refused: the region's buffer is full
)

func newRegionCore[C any, S comparable](cfg regionCoreConfig) *regionCore[C, S] {
	c := &regionCore[C, S]{}
	c.init(cfg)
	return c
}

// init readies a zero core, for a runner that holds the core by value.
func (c *regionCore[C, S]) init(cfg regionCoreConfig) {
	c.cfg, c.shards = cfg, make(map[string]*regionShard[C, S])
}

func (c *regionCore[C, S]) emit(e regionEffect[C, S]) { c.out = append(c.out, e) }

func (c *regionCore[C, S]) notef(level slog.Level, note string, args ...any) {
	c.emit(regionEffect[C, S]{kind: regNote, level: level, note: note, args: args})
}

// routable is the shard's entry when a message for it goes straight to
// its home (no buffer to keep order with, no hand-off): the runner's data
// path, under its read lock. It changes nothing.
//
// A leaving region forwards only through route, which notes the home (see
// forwarded): its leave waits until each home it forwarded to has
// everything (see flushed).
func (c *regionCore[C, S]) routable(shardID string) *regionShard[C, S] {
	if e := c.shards[shardID]; e != nil && e.direct() && !c.stopped && (e.hosted || !c.forwardsHeld() && !c.leaving) {
		return e
	}
	return nil
}

// forwardsHeld reports whether the region holds what it would forward to
// other nodes: a coordinator newer than the one it registered with (or
// the first, for a region that never registered) made itself known, and
// the region has not registered with it yet. That coordinator fences
// only the regions registered with it, and may hand shards off around
// this one once its wait for our registration runs out (a slow link can
// outlast it): forwarded meanwhile with the homes it announced, a
// message could reach an old home after the shard moved on. A region
// whose coordinator is merely gone, with no newer one in sight, routes
// on with the homes it knows; a leaving region, which never registers,
// too (see docs/DESIGN.md, "Routing").
func (c *regionCore[C, S]) forwardsHeld() bool {
	return !c.registered && c.epoch > c.regEpoch && !c.leaving
}

// releaseHeld forwards what forwardsHeld kept back, once it no longer
// does (the region registered, or began to leave).
func (c *regionCore[C, S]) releaseHeld() {
	if c.forwardsHeld() || c.stopped {
		return
	}
	for _, id := range slices.Sorted(maps.Keys(c.shards)) {
		e := c.shards[id]
		if len(e.buffer) > 0 && !e.home.IsZero() && e.home != c.cfg.self && !e.hosted && !e.handingOff && e.awaiting.IsZero() && !e.hostAfter {
			c.drain(id, e)
		}
	}
}

// direct reports whether a message for the shard goes straight to its
// home: the home is known, and no hand-off, awaited hand-over, hand-over
// to that home still unacknowledged, or buffered message must go first.
func (e *regionShard[C, S]) direct() bool {
	return !e.home.IsZero() && !e.handingOff && e.awaiting.IsZero() && e.handOverTo != e.home && !e.hostAfter && len(e.buffer) == 0
}

// attach records the handle of a shard a regHost started.
func (c *regionCore[C, S]) attach(shardID string, local S) {
	if e := c.shards[shardID]; e != nil && e.hosted {
		e.local = local
	}
}

// local is the handle of a hosted shard.
func (c *regionCore[C, S]) local(shardID string) (S, bool) {
	if e := c.shards[shardID]; e != nil && e.hosted {
		return e.local, true
	}
	var none S
	return none, false
}

func (c *regionCore[C, S]) entry(shardID string) *regionShard[C, S] {
	e := c.shards[shardID]
	if e == nil {
		e = &regionShard[C, S]{}
		c.shards[shardID] = e
	}
	return e
}

// route takes a message for an entity of shardID: it goes to the shard's
// home when known and nothing waits ahead of it, else it waits in the
// shard's buffer (bounded by bufferSize over all shards), and the
// coordinator is asked for the home once.
func (c *regionCore[C, S]) route(shardID string, p pending[C]) (routeVerdict, *regionShard[C, S]) {
	if c.stopped {
		return routeStopped, nil
	}
	e := c.entry(shardID)
	if e.direct() && e.hosted {
		return routeLocal, e
	}
	if e.direct() && !c.forwardsHeld() {
		c.forwarded(e.home)
		return routeRemote, e
	}
	if c.buffered >= c.cfg.bufferSize {
		return routeFull, nil
	}
	e.buffer = append(e.buffer, p)
	c.buffered++
	// Asked once registered, as in Akka: a coordinator that has not seen
	// this region yet would place the shard without it.
	if e.home.IsZero() && !e.handingOff && !e.requested && c.mayAsk() {
		e.requested = true
		c.askHome(shardID, e)
	}
	return routeHeld, e
}

// mayAsk reports whether the region may ask the coordinator for homes:
// once registered (as in Akka: a coordinator that has not seen this region
// yet would place the shard without it), or while it leaves, since a
// leaving region never registers. A coordinator that took over during the
// leave knows nothing of it, pushes it no home, and its buffered messages
// would wait until the leave gives up on them, and be lost. Nothing is
// placed on a region that is not registered.
func (c *regionCore[C, S]) mayAsk() bool { return c.registered || c.leaving && !c.stopped }

// askHome asks the coordinator where a shard lives.
func (c *regionCore[C, S]) askHome(shardID string, e *regionShard[C, S]) {
	c.toCoordinator(protocol.GetShardHome{Shard: shardID, Region: c.cfg.self, HandOver: e.handOver})
}

// unreachable reports that the transport could not carry a message to
// home: the region forgets that home, unless a newer one replaced it
// meanwhile. The shard's messages wait from now on, and the retry tick,
// not each of them, asks the coordinator again: it may well answer the
// same home until the membership drops it.
func (c *regionCore[C, S]) unreachable(shardID string, home cluster.UniqueAddress) {
	if e := c.shards[shardID]; e != nil && e.home == home && !e.hosted && !c.stopped {
		c.notef(slog.LevelInfo, "sharding: shard home unreachable; asking again", "shard_id", shardID, "home", home)
		e.home, e.requested = cluster.UniqueAddress{}, true
	}
}

// toCoordinator sends m to the coordinator; without one in view, the retry
// tick sends again.
func (c *regionCore[C, S]) toCoordinator(m Message) {
	if node := c.coordinatorNode(); !node.IsZero() {
		c.emit(regionEffect[C, S]{kind: regSend, node: node, coordinator: true, msg: m})
	}
}

// coordinatorNode is where this region's coordinator is: the one it
// registered with, else the oldest in its view ("" for none).
func (c *regionCore[C, S]) coordinatorNode() cluster.UniqueAddress {
	if !c.coordinator.IsZero() {
		return c.coordinator
	}
	return c.oldest
}

// step takes a protocol message from the coordinator or another region.
func (c *regionCore[C, S]) step(msg Message) {
	switch m := msg.(type) {
	case protocol.RegisterAck:
		if to := c.coordinatorNode(); !to.IsZero() && m.Coordinator != to {
			// From a coordinator the view has moved past since our
			// Register (it stood down, the oldest came back): taken, it
			// would point every Register and GetShardHome at a node with
			// no coordinator until the next view, and the real one hands
			// shards off without fencing us once its wait for our
			// registration runs out, and our forwards to a home that has
			// left meanwhile are lost.
			c.notef(slog.LevelInfo, "sharding: ignoring a registration from a coordinator not in view", "coordinator", m.Coordinator, "expected", to)
			return
		}
		if !c.fresh(m.Epoch) {
			return
		}
		c.coordinator, c.registered, c.announcer, c.regEpoch = m.Coordinator, true, cluster.UniqueAddress{}, m.Epoch
		for _, id := range slices.Sorted(maps.Keys(c.shards)) {
			if e := c.shards[id]; len(e.buffer) > 0 && e.home.IsZero() && !e.handingOff && !e.requested {
				e.requested = true
				c.askHome(id, e)
			}
		}
		c.releaseHeld()
	case protocol.ShardHomes:
		if !c.fresh(m.Epoch) {
			return
		}
		listed := make(map[string]bool)
		for _, region := range slices.SortedFunc(maps.Keys(m.Homes), cluster.UniqueAddress.Compare) {
			for _, s := range m.Homes[region] {
				listed[s] = true
				c.pushedHome(s, region)
			}
		}
		// Every home the coordinator knows: one it does not list was
		// deallocated, perhaps by a coordinator this region never heard
		// from. Forgotten, it is asked for again when a message needs it.
		for _, id := range slices.Sorted(maps.Keys(c.shards)) {
			if e := c.shards[id]; !listed[id] && !e.home.IsZero() && !e.hosted && e.awaiting.IsZero() {
				c.setHome(id, cluster.UniqueAddress{})
			}
		}
		// A new coordinator announces itself with ShardHomes. Not on a
		// stale one: it answers a Register that went to the old
		// coordinator's node (our membership lags), and registering again
		// at once would loop; the retry tick registers.
		c.register()
		if a := m.Coordinator; !a.IsZero() && a != c.coordinatorNode() && !c.registered && a != c.announcer && !c.gone(a) {
			// A coordinator on a node this region's view does not take
			// for the oldest (it holds the oldest unreachable, one way,
			// while the oldest sees everyone): the region registers with
			// it as well, once here and then each tick. Else that
			// coordinator, its wait for our registration run out, hands
			// shards off without fencing us, and what we forward to an
			// old home with the homes we know is lost or comes late.
			c.announcer = a
			c.registerWith(a)
		}
		if c.leaving && !c.stopped {
			// A leaving region is never acked: it names the shards whose
			// mail it holds at once, behind its GracefulShutdownReq, so
			// that the new coordinator, which may place them as soon as
			// another region registers, has the new home wait for that
			// mail (else it places them from the remembered shards, with
			// no previous home, and they start ahead of the mail).
			for _, id := range slices.Sorted(maps.Keys(c.shards)) {
				if e := c.shards[id]; !listed[id] && e.handOver && e.home.IsZero() && !e.hosted {
					c.askHome(id, e)
				}
			}
		}
	case protocol.ShardHome:
		if !c.fresh(m.Epoch) {
			return
		}
		if e := c.entry(m.Shard); m.From == c.cfg.self && m.Region != c.cfg.self && !e.hosted && !e.handOver && e.handOverTo.IsZero() && e.awaiting.IsZero() {
			// The new home waits for our mail, and we hold none (any
			// more): the coordinator kept our name because the shard
			// never reported starting where it went (its ShardStarted
			// was lost, or that home died), so the home gets an empty
			// HandOver, without which it would wait for ever. Also while
			// a hand-off from that home had us buffer: what we buffer is
			// routed mail, not mail we hold.
			e.owesHandOver = true
		}
		c.pushedHome(m.Shard, m.Region)
	case protocol.HostShard:
		if !c.fresh(m.Epoch) {
			return
		}
		e := c.entry(m.Shard)
		repeat := !m.From.IsZero() && m.From == e.hostFrom
		e.hostFrom = m.From
		switch {
		case m.From.IsZero() || m.From == c.cfg.self || e.hosted || e.handedIn[m.From] || c.gone(m.From) || repeat:
		case !e.awaiting.IsZero() && !e.guessed && e.awaiting != m.From:
			// The shard comes back while this region still waits for the
			// mail of a home before it, and From, which had it since,
			// waits for ours (else each would wait for the other). That
			// mail and what this region holds now are older than From's:
			// From is awaited next, and told to hand over (see setHome).
			e.then, e.thenAt = m.From, len(e.buffer)
		default:
			e.awaiting, e.guessed, e.waited, e.relays = m.From, false, 0, nil
		}
		e.doneEpoch = 0 // a new allocation: a HandOff from here on is a new hand-off
		wasHosted := e.hosted
		c.setHome(m.Shard, c.cfg.self)
		if e.awaiting.IsZero() && !e.hostAfter && (wasHosted || !e.hosted) {
			// Hosted already, or not hosted here (a leaving region, a
			// proxy): answered at once. A shard that starts here now was
			// reported by setHome.
			c.toCoordinator(protocol.ShardStarted{Shard: m.Shard, Region: c.cfg.self})
		}
	case protocol.HandOver:
		c.handedOver(m)
	case protocol.MembersDown:
		c.membersDown(m.Nodes)
	case protocol.ShardStarted:
		// The node this region handed a shard's mail to has it.
		// Seq 0: from a node that does not number them; it acknowledges the last.
		if e := c.shards[m.Shard]; e != nil && e.handOverTo == m.Region && (m.Seq == 0 || e.sent.Seq == m.Seq) {
			c.handedOverTo(m.Shard, e)
		}
	case protocol.BeginHandOff:
		if !c.fresh(m.Epoch) {
			return
		}
		// From now on the shard's messages wait here; only then is the
		// hand-off acknowledged, so nothing this region routes can reach
		// the old home after the coordinator hears every ack. The fence
		// follows, on the same link, whatever this region forwarded there.
		e := c.entry(m.Shard)
		repeat := e.handOffEpoch == m.Epoch && e.handOffSeq == m.Seq && !e.fencedAt.IsZero()
		e.handingOff, e.handOffEpoch, e.handOffSeq = true, m.Epoch, m.Seq
		switch {
		case repeat && !e.hosted:
			// Asked again: the fence stays where this region forwarded,
			// even if it forgot that home since (a ShardHomes during the
			// hand-off leaves the shard out); named no more, the home
			// would stop the shard ahead of forwards still on their way.
		case !e.home.IsZero() && e.home != c.cfg.self && !e.hosted:
			e.fencedAt = e.home
		case e.home.IsZero() && !e.fencedAt.IsZero() && !e.hosted:
			// A later hand-off (its coordinator replaced) of the shard
			// this region fenced for and has no home for since: fenced
			// again, under this hand-off.
		case e.home.IsZero() && !e.fenceOwed.IsZero() && !e.hosted:
			e.fencedAt = e.fenceOwed
		default:
			e.fencedAt = cluster.UniqueAddress{}
		}
		if !e.fencedAt.IsZero() {
			e.fenceOwed = cluster.UniqueAddress{}
			c.emit(regionEffect[C, S]{kind: regSend, node: e.fencedAt, msg: e.fence(m.Shard, c.cfg.self)})
		}
		c.toCoordinator(protocol.BeginHandOffAck{Shard: m.Shard, Region: c.cfg.self, FencedAt: e.fencedAt, Epoch: m.Epoch, Seq: m.Seq})
	case protocol.Fence:
		e := c.entry(m.Shard)
		if e.fences == nil {
			e.fences = make(map[fenceKey]bool)
		}
		e.fences[fenceKey{m.From, m.Epoch, m.Seq}] = true
		c.maybeStop(m.Shard, e)
	case protocol.HandOff:
		if !c.fresh(m.Epoch) {
			return
		}
		e := c.entry(m.Shard)
		if e.hosted && e.handOffTold && !e.stopping {
			return // asked again: the shard's entities are stopping; ShardStopped follows
		}
		if !e.hosted && e.doneEpoch == m.Epoch && e.doneSeq == m.Seq {
			c.toCoordinator(protocol.ShardStopped{Shard: m.Shard, Region: c.cfg.self, Held: e.handOver, Epoch: m.Epoch, Seq: m.Seq})
			return
		}
		if e.stopping && e.stopEpoch == m.Epoch && e.stopSeq == m.Seq {
			return // asked again while waiting for fences: the wait goes on, bounded from its start
		}
		switch held := m.MailHeldBy; {
		case e.hosted || e.hostFrom != (cluster.UniqueAddress{}) || c.cfg.proxy:
			// Hosted, or its HostShard came: what the region waits for,
			// if anything, is known already.
		case m.MailHeldByKnown && (e.awaiting.IsZero() || e.guessed):
			// This region learns that it is the shard's home only from
			// the HandOff (its HostShard lost): the coordinator names the
			// region whose mail the allocation still counts as on its
			// way here. The next home waits only for ours, so ours goes
			// once that mail is in and ahead of it (see docs/DESIGN.md,
			// "Hand-over, not carry"). A fact, not a guess, and waited
			// for as a HostShard's From is: until it hands over or is
			// gone, with no time bound. A guess is replaced by it: the
			// home guessed may owe nothing (the shard went through a home
			// this region never heard of), and the one named may be on a
			// link slower than any bound.
			e.awaiting, e.guessed, e.waited, e.relays = cluster.UniqueAddress{}, false, 0, nil
			if !held.IsZero() && held != c.cfg.self && !e.handedIn[held] && !c.gone(held) {
				e.awaiting = held
			}
		case e.awaiting.IsZero() && e.placed != c.cfg.self && !e.home.IsZero() && e.home != c.cfg.self &&
			!e.handedIn[e.home] && c.isLive(e.home):
			// The same, from a coordinator that predates MailHeldBy: the
			// home this region knew before may hold that mail. Guessed,
			// as in pushedHome, so bounded by waitTicks.
			e.awaiting, e.guessed, e.waited, e.relays = e.home, true, 0, nil
		}
		if e.awaiting.IsZero() {
			// A wait for a previous home's hand-over keeps its start: the
			// next home's wait for ours begins after it, so ours must end
			// first (restarted here, the next home's bounded wait could
			// give up just before this region's mail came).
			e.waited = 0
		}
		e.handingOff, e.stopping, e.stopWaits, e.handOffTold = true, true, m.Fences, true
		e.stopEpoch, e.stopSeq = m.Epoch, m.Seq
		c.maybeStop(m.Shard, e)
	case protocol.Flush:
		// Everything m.From forwarded here before it is in: taken by the
		// core, or in its entity's mailbox (the runner hands a link's
		// messages over in order, and no Deliver overtakes one queued
		// before it).
		c.emit(regionEffect[C, S]{kind: regSend, node: m.From, msg: protocol.FlushAck{Region: c.cfg.self, Seq: m.Seq}})
	case protocol.FlushAck:
		if seq, ok := c.flushes[m.Region]; ok && seq != 0 && seq == m.Seq {
			delete(c.flushes, m.Region)
			c.checkLeft()
		}
	case protocol.LeaveAck:
		if c.fresh(m.Epoch) && c.leaving {
			c.leaveAcked = true
			c.checkLeft()
		}
	case protocol.Deliver:
		p, ok := c.fromDeliver(m)
		if !ok {
			return
		}
		switch v, e := c.route(m.Shard, p); v {
		case routeLocal:
			c.emit(regionEffect[C, S]{kind: regDeliver, shard: m.Shard, p: p})
		case routeRemote:
			c.emit(regionEffect[C, S]{kind: regForward, node: e.home, shard: m.Shard, p: p})
		case routeStopped, routeFull:
			// Its sender's Tell returned long ago.
			c.emit(regionEffect[C, S]{kind: regDeadLetter, shard: m.Shard, p: p, err: verdictError(v)})
		}
	}
}

// maybeStop stops a shard told to hand off once every region named in
// the HandOff has fenced its forwards here, or left the view: the
// entities stop after every message forwarded before the hand-off.
func (c *regionCore[C, S]) maybeStop(shardID string, e *regionShard[C, S]) {
	if !e.stopping {
		return
	}
	for _, r := range e.stopWaits {
		if !e.fences[fenceKey{r, e.stopEpoch, e.stopSeq}] && !c.gone(r) {
			return
		}
	}
	e.stopping, e.stopWaits, e.fences = false, nil, nil
	if e.hosted {
		c.emit(regionEffect[C, S]{kind: regHandOff, shard: shardID})
		return
	}
	// Not hosted here after all (the HostShard never came, or the shard
	// was waiting for its hand-over): what the region holds for it, and
	// a hand-over yet to come, go to the next home, the latter first: the
	// next home waits for this region's mail, and this region sends it
	// once the mail it awaits is in (see setHome).
	e.home, e.handOver, e.doneEpoch, e.doneSeq, e.hostFrom = cluster.UniqueAddress{}, len(e.buffer) > 0 || !e.awaiting.IsZero(), e.stopEpoch, e.stopSeq, cluster.UniqueAddress{}
	e.owesHandOver, e.hostAfter = true, false
	c.toCoordinator(protocol.ShardStopped{Shard: shardID, Region: c.cfg.self, Held: e.handOver, Epoch: e.stopEpoch, Seq: e.stopSeq})
}

// verdictError names a refusal for notes; the runner wraps the sentinel.
func verdictError(v routeVerdict) error {
	if v == routeStopped {
		return ErrRegionStopped
	}
	return ErrBufferFull
}

// fromDeliver is the entity message a Deliver carries.
func (c *regionCore[C, S]) fromDeliver(d protocol.Deliver) (pending[C], bool) {
	msg, ok := d.Msg.(C)
	if !ok && !d.Start {
		c.notef(slog.LevelError, "sharding: message of the wrong type for entity type", "got", fmt.Sprintf("%T", d.Msg))
		return pending[C]{}, false
	}
	return pending[C]{entityID: d.EntityID, msg: msg, start: d.Start, ask: d.Ask, trace: traceOf(&d)}, true
}

// fromDelivers is the entity messages a HandOver carries, in order,
// without those of the wrong type.
func (c *regionCore[C, S]) fromDelivers(ds []protocol.Deliver) []pending[C] {
	ps := make([]pending[C], 0, len(ds))
	for _, d := range ds {
		if p, ok := c.fromDeliver(d); ok {
			ps = append(ps, p)
		}
	}
	return ps
}

// fresh reports whether a coordinator message's epoch is current, and
// adopts a newer one.
func (c *regionCore[C, S]) fresh(epoch uint64) bool {
	if epoch < c.epoch {
		c.notef(slog.LevelWarn, "sharding: ignoring message from a stale coordinator", "epoch", epoch, "current", c.epoch)
		return false
	}
	if epoch > c.epoch {
		// A new coordinator, even on the same node: it knows this region
		// only once it registers again.
		c.registered = false
	}
	c.epoch = epoch
	return true
}

// membership takes a new membership view: the coordinator's node ("" when
// no member can host it) and every node in the view. A shard that waits
// for the hand-over of a node no longer in the view starts without it.
func (c *regionCore[C, S]) membership(oldest cluster.UniqueAddress, live []cluster.UniqueAddress) {
	c.oldest = oldest
	previous := c.live
	c.live = make(map[cluster.UniqueAddress]bool, len(live))
	for _, n := range live {
		c.live[n] = true
	}
	for _, held := range []map[cluster.UniqueAddress]bool{previous, c.down} { // the last view held both
		for n := range held {
			if !c.live[n] {
				if c.departed == nil {
					c.departed = make(map[cluster.UniqueAddress]bool)
				}
				c.departed[n] = true
			}
		}
	}
	// A node gone from the view needs no word of its own any more.
	maps.DeleteFunc(c.down, func(n cluster.UniqueAddress, _ bool) bool { return !c.live[n] })
	for n := range c.down {
		delete(c.live, n)
	}
	c.forgetGone()
	if c.announcer == oldest || c.gone(c.announcer) {
		c.announcer = cluster.UniqueAddress{}
	}
	if c.coordinator != oldest {
		c.coordinator, c.registered = oldest, false
	}
	c.checkLeft() // a leaving region may have lost its last coordinator
	c.register()
	if !c.registered {
		c.registerSoon()
	}
}

// registerSoon arms early re-registrations after a Register to a new
// coordinator: registerRetry, then twice as long each time, until a
// RegisterAck comes or the wait reaches the tick, which re-registers from
// then on (Akka's region does the same, from 250 ms). A coordinator that
// took over from a crashed one starts once its own node's view made it
// the oldest; this region's view may have done so first, and its Register
// is then dropped: waiting a whole tick to send it again would add that
// much to the failover (docs/DESIGN.md, "Leases and self-fencing").
func (c *regionCore[C, S]) registerSoon() {
	if c.cfg.registerRetry <= 0 || c.cfg.registerRetry >= c.cfg.tickInterval || c.stopped {
		return
	}
	c.registerWait = c.cfg.registerRetry
	c.registerGen++
	c.emit(regionEffect[C, S]{kind: regArmRegister, after: c.registerWait, tick: c.registerGen})
}

// retryRegister is the early re-registration armed as gen (see
// registerSoon).
func (c *regionCore[C, S]) retryRegister(gen uint64) {
	if gen != c.registerGen || c.registerWait == 0 {
		return // replaced, or ended
	}
	if c.registered || c.stopped {
		c.registerWait = 0
		return
	}
	c.register()
	if c.registerWait *= 2; c.registerWait >= c.cfg.tickInterval {
		c.registerWait = 0
		return
	}
	c.registerGen++
	c.emit(regionEffect[C, S]{kind: regArmRegister, after: c.registerWait, tick: c.registerGen})
}

// membersDown takes the coordinator's word that nodes are Down (see
// protocol.MembersDown): they count as gone from the view.
func (c *regionCore[C, S]) membersDown(nodes []cluster.UniqueAddress) {
	for _, n := range nodes {
		if n == c.cfg.self {
			continue // it fences itself, by its own clock
		}
		if c.down == nil {
			c.down = make(map[cluster.UniqueAddress]bool)
		}
		c.down[n] = true
		if c.live != nil {
			delete(c.live, n)
		}
	}
	c.forgetGone()
	c.checkLeft()
}

// forgetGone ends what waits for a node gone from the view: a hand-off's
// fences and a hand-over's acknowledgement from it, and a shard's wait
// for its mail, which then starts without it.
func (c *regionCore[C, S]) forgetGone() {
	for _, id := range slices.Sorted(maps.Keys(c.shards)) {
		e := c.shards[id]
		c.maybeStop(id, e) // a region it awaits a fence from may be gone
		if to := e.handOverTo; !to.IsZero() && c.gone(to) && len(e.sent.Msgs) > 0 && e.sentRefused == e.sentCopies {
			// Gone, and the transport refused every copy of our mail:
			// none reached it, so the mail is ours still. It goes to the
			// shard's home, ahead of what came since: this region's own
			// shard when it is the home (which waited for this), a live
			// other home at once, else the home the tick asks for.
			c.reclaimHandOver(e)
			if !e.home.IsZero() && e.home != c.cfg.self && !c.isLive(e.home) {
				e.home, e.requested = cluster.UniqueAddress{}, false // never sent to a node gone
			}
			e.hostAfter = false
			if !e.home.IsZero() {
				c.setHome(id, e.home)
			}
			c.checkLeft()
		} else if !to.IsZero() && c.gone(to) {
			// Gone before it acknowledged our mail. The shard's next home
			// waits for a HandOver from us all the same (the coordinator
			// names us: the shard never started there), and gets an
			// empty one; not the mail again, which the dead node may
			// have taken (at most once). This region, when it is the
			// home, starts the shard now.
			c.handedOverTo(id, e)
			if e.home != c.cfg.self {
				e.owesHandOver = true
			}
			if !e.home.IsZero() && e.home != to && e.home != c.cfg.self && c.isLive(e.home) {
				e.owesHandOver = false
				c.handOver(id, e, e.home, nil)
			}
		}
		if !e.awaiting.IsZero() && c.gone(e.awaiting) {
			c.notef(slog.LevelWarn, "sharding: previous home gone before its hand-over; starting the shard without it",
				"shard_id", id, "from", e.awaiting)
			e.awaiting = cluster.UniqueAddress{}
			c.setHome(id, e.home)
		}
	}
}

func (c *regionCore[C, S]) register() {
	if c.registered || c.stopped {
		return
	}
	if node := c.coordinatorNode(); !node.IsZero() {
		c.registerWith(node)
	}
}

// registerWith sends the coordinator on node this region's registration.
func (c *regionCore[C, S]) registerWith(node cluster.UniqueAddress) {
	var m Message
	switch {
	case c.leaving:
		// A leaving region never registers: a Register that overtook its
		// RegionStopped would have shards allocated to a region that is
		// gone. A coordinator it has not told yet learns that it leaves.
		m = protocol.GracefulShutdownReq{Region: c.cfg.self}
	case c.cfg.proxy:
		m = protocol.RegisterProxy{Region: c.cfg.self}
	default:
		m = protocol.Register{Region: c.cfg.self}
	}
	c.emit(regionEffect[C, S]{kind: regSend, node: node, coordinator: true, msg: m})
}

// tick re-registers, asks again for the homes of shards with waiting
// messages, ages entities for idle passivation, and arms the next tick.
func (c *regionCore[C, S]) tick() {
	c.register()
	if a := c.announcer; !a.IsZero() && !c.registered && !c.stopped && a != c.coordinatorNode() && !c.gone(a) {
		c.registerWith(a)
	}
	if c.mayAsk() { // else asked when the RegisterAck comes
		for _, id := range slices.Sorted(maps.Keys(c.shards)) {
			// Also shards whose hand-off this region heard of: the
			// coordinator that began it may be gone, and its successor
			// answers (one that runs the hand-off ignores the question).
			if e := c.shards[id]; !e.hosted && e.awaiting.IsZero() && (len(e.buffer) > 0 || c.leaving && !e.fencedAt.IsZero()) && (e.home.IsZero() || e.handingOff) {
				c.askHome(id, e)
			}
		}
	}
	c.giveUpWaiting()
	c.releaseHeld()
	c.resendFences()
	c.resendHandOvers()
	c.resendFlushes()
	if c.leaving && c.awaitingLeft && c.buffered > 0 && c.cfg.waitTicks > 0 && c.alone() {
		if c.leaveWaited++; c.leaveWaited == 2*c.cfg.waitTicks {
			c.notef(slog.LevelWarn, "sharding: leaving with buffered messages no home took in time", "count", c.buffered)
			c.checkLeft()
		}
	}
	c.checkLeft() // held back for forwards that have gone by now
	c.idleTick++
	if c.cfg.idleTicks > 0 {
		for _, id := range c.hostedShards() {
			c.emit(regionEffect[C, S]{kind: regPassivateIdle, shard: id, tick: c.idleTick, ticks: c.cfg.idleTicks})
		}
	}
	c.emit(regionEffect[C, S]{kind: regArmTick, after: c.cfg.tickInterval})
}

// giveUpWaiting ages the guessed waits for hand-overs, and ends those
// past waitTicks (see pushedHome). The wait for fences is not bounded
// (docs/DESIGN.md, "Fence on the data link"): a link may be slow for
// longer than any bound and deliver what the fence follows late, behind
// newer mail; a fence lost with a broken link comes again (resendFences).
func (c *regionCore[C, S]) giveUpWaiting() {
	if c.cfg.waitTicks == 0 {
		return
	}
	for _, id := range slices.Sorted(maps.Keys(c.shards)) {
		e := c.shards[id]
		if e.awaiting.IsZero() || !e.guessed {
			continue
		}
		if e.waited++; e.waited < c.cfg.waitTicks {
			continue
		}
		c.notef(slog.LevelWarn, "sharding: no hand-over in time; starting the shard without it", "shard_id", id, "from", e.awaiting)
		e.awaiting = cluster.UniqueAddress{}
		if e.stopping && e.home != c.cfg.self {
			continue // the stop reports what this region holds (see maybeStop)
		}
		c.setHome(id, e.home)
	}
}

// resendFences sends each Fence again while its hand-off runs here (this
// region buffers the shard's messages, and forwards none): the home waits
// for it as long as this region is in its view, and a broken link may
// have lost it. Sent again on the same link, it still follows whatever
// this region forwarded before the hand-off.
//
// The hand-off runs here until the region learns the shard's next home
// (or none). The ShardHome that tells it may be lost, and a region that
// holds nothing for the shard never asks: so it acknowledges the hand-off
// again beside each fence, and a coordinator whose hand-off of the shard
// is over answers with the home, which ends the fence (see
// coordinatorCore.step, BeginHandOffAck). A running hand-off takes the
// repeated acknowledgement as the first.
func (c *regionCore[C, S]) resendFences() {
	for _, id := range slices.Sorted(maps.Keys(c.shards)) {
		if e := c.shards[id]; !e.hosted && !e.fencedAt.IsZero() && !c.gone(e.fencedAt) {
			c.emit(regionEffect[C, S]{kind: regSend, node: e.fencedAt, msg: e.fence(id, c.cfg.self)})
			c.toCoordinator(protocol.BeginHandOffAck{Shard: id, Region: c.cfg.self, FencedAt: e.fencedAt, Epoch: e.handOffEpoch, Seq: e.handOffSeq})
		}
	}
}

// resendFlushes sends each unanswered Flush again (see flushed): a broken
// link may have lost it. On the same link, it still follows every forward
// it answers for.
func (c *regionCore[C, S]) resendFlushes() {
	if c.stopped {
		return
	}
	for _, n := range slices.SortedFunc(maps.Keys(c.flushes), cluster.UniqueAddress.Compare) {
		if seq := c.flushes[n]; seq != 0 && !c.gone(n) {
			c.emit(regionEffect[C, S]{kind: regSend, node: n, msg: protocol.Flush{From: c.cfg.self, Seq: seq}})
		}
	}
}

// fence is the shard's Fence from self for its current hand-off.
func (e *regionShard[C, S]) fence(shardID string, self cluster.UniqueAddress) protocol.Fence {
	return protocol.Fence{Shard: shardID, From: self, Epoch: e.handOffEpoch, Seq: e.handOffSeq}
}

// resendHandOvers sends again each HandOver not yet acknowledged (see
// handOver): the link it took may have broken.
func (c *regionCore[C, S]) resendHandOvers() {
	for _, id := range slices.Sorted(maps.Keys(c.shards)) {
		e := c.shards[id]
		if !e.handOverTo.IsZero() {
			e.sentCopies++
			c.emit(regionEffect[C, S]{kind: regSend, node: e.handOverTo, msg: e.sent, handOver: true})
		}
		if !e.awaiting.IsZero() {
			for _, r := range e.relays {
				c.emit(regionEffect[C, S]{kind: regSend, node: e.awaiting, msg: r})
			}
		}
	}
}

// hostedShards lists the shards hosted here, sorted.
func (c *regionCore[C, S]) hostedShards() []string {
	var ids []string
	for id, e := range c.shards {
		if e.hosted {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// pushedHome takes a shard's home from a ShardHome or ShardHomes.
//
// A home given by the coordinator ends this region's part in an earlier
// hand-off: a HandOff from now on, even in the same epoch, is a new one,
// whose fences count (else a second hand-off of a shard in one epoch is
// answered as a repeat of the first, without its mail).
//
// This region learns that it is the home without a HostShard when that
// was lost (a broken link, a coordinator that crashed after storing the
// allocation): nobody told it whether the previous home holds mail for
// the shard. It waits for the previous home it knows, which hands over
// (an empty HandOver when it holds nothing, see owesHandOver), leaves the
// view, or is given up after waitTicks; started at once, it would deliver
// what it buffered during the hand-off ahead of the older mail the
// previous home holds.
func (c *regionCore[C, S]) pushedHome(shardID string, home cluster.UniqueAddress) {
	e := c.entry(shardID)
	// The previous home is the one this region routes to or, when a push
	// that left the shard out (its hand-off was running) made the region
	// forget it, the last one the coordinator placed it on (else, the
	// HostShard lost, a new coordinator's ShardHomes would start the
	// shard at once, ahead of the mail that home held).
	prev := e.home
	if prev.IsZero() {
		prev = e.placed
	}
	if home.IsZero() {
		// Deallocated: the hand-off this region fenced for is over.
		e.fencedAt, e.fenceOwed = cluster.UniqueAddress{}, cluster.UniqueAddress{}
	}
	if !home.IsZero() {
		e.doneEpoch = 0
		if home != e.placed && c.leaving && len(e.buffer) > 0 {
			// The shard moved on (its last home crashed and its lease
			// expired): the buffer may go on yet, and the leave waits
			// for it afresh rather than drop it (a shard placed on a
			// crashed node may next be placed on another that crashed
			// too, and only then on a live one).
			c.leaveWaited = 0
		}
		e.placed = home
	}
	if home == c.cfg.self && !e.hosted && e.awaiting.IsZero() && !e.handedIn[prev] && !prev.IsZero() && prev != c.cfg.self &&
		c.isLive(prev) && !c.cfg.proxy && !c.leaving && !c.stopped {
		e.awaiting, e.guessed, e.waited, e.relays = prev, true, 0, nil
	}
	c.setHome(shardID, home)
	c.checkLeft() // a leaving region may have waited for this hand-off to end
}

// setHome records a shard's home, hosts the shard when the home is this
// region, and releases the shard's buffered messages.
func (c *regionCore[C, S]) setHome(shardID string, home cluster.UniqueAddress) {
	e := c.entry(shardID)
	if e.handingOff && e.hosted {
		if e.handOffTold || c.epoch <= e.handOffEpoch || home != c.cfg.self {
			return // our own hand-off is still running
		}
		// The coordinator that began the hand-off is gone before its
		// HandOff, and a newer one homes the shard here: the hand-off is
		// over, and what this region buffered meanwhile is delivered
		// (else it would wait for ever). Fences for the old hand-off
		// count for nothing in a new one.
		c.notef(slog.LevelInfo, "sharding: hand-off abandoned by its coordinator; the shard stays", "shard_id", shardID)
		e.handingOff, e.fences = false, nil
	}
	if !home.IsZero() && !e.handOverTo.IsZero() && e.handOverTo != home && c.gone(e.handOverTo) {
		c.reclaimHandOver(e)
	}
	switch {
	case !home.IsZero():
		// The shard has its next home: the hand-off this region fenced
		// for is over.
		e.fencedAt, e.fenceOwed = cluster.UniqueAddress{}, cluster.UniqueAddress{}
	case !e.home.IsZero() && e.home != c.cfg.self && !e.hosted && e.fencedAt.IsZero():
		e.fenceOwed = e.home
	}
	if home != c.cfg.self {
		e.hostAfter = false
		if e.handOver && !e.awaiting.IsZero() && !home.IsZero() {
			// This region's mail for the shard follows the mail it
			// awaits, which is older: both go on once that is in.
			e.home, e.requested, e.handingOff = home, false, false
			return
		}
		// Moved on before the hand-over came: it follows the shard.
		e.awaiting, e.then = cluster.UniqueAddress{}, cluster.UniqueAddress{}
		if !home.IsZero() {
			// The mail the hand-overs brought goes on with the buffer.
			// With no home known it stays here: should the shard then
			// come here from one of them, that wait is over already.
			e.handedIn = nil
		}
	}
	e.home, e.requested, e.handingOff = home, false, false
	if home.IsZero() { // stopped shard: ask again if anything waits for it
		if len(e.buffer) > 0 {
			e.requested = true
			c.askHome(shardID, e)
		}
		return
	}
	if e.handOver && home != c.cfg.self {
		// The mail this region held as the shard's old home goes to the
		// new one at once, as one message, on the link its forwards take.
		e.handOver, e.owesHandOver = false, false
		msgs := make([]protocol.Deliver, len(e.buffer))
		for i, p := range e.buffer {
			msgs[i] = p.deliver(shardID)
		}
		c.buffered -= len(e.buffer)
		e.buffer, e.handedFront = nil, 0
		c.handOver(shardID, e, home, msgs)
		return
	}
	if e.owesHandOver && home != c.cfg.self {
		// Nothing held, but a next home that missed its HostShard waits
		// for our hand-over all the same: an empty one ends its wait. A
		// leaving region waits for its acknowledgement as for any other
		// hand-over, which would otherwise reach it stopped.
		e.owesHandOver = false
		c.handOver(shardID, e, home, nil)
	}
	if home == c.cfg.self && e.awaiting.IsZero() && !e.then.IsZero() && !e.hosted {
		// The home before is in; the one after waits for ours, which is
		// now this region's own.
		e.awaiting, e.then, e.guessed, e.waited, e.relays = e.then, cluster.UniqueAddress{}, false, 0, nil
		e.handedFront = min(e.thenAt, len(e.buffer))
		if !c.gone(e.awaiting) {
			c.handOver(shardID, e, e.awaiting, nil)
		} else {
			e.awaiting = cluster.UniqueAddress{}
		}
	}
	if home == c.cfg.self && !e.awaiting.IsZero() {
		return // started once the previous home's mail is here
	}
	if home == c.cfg.self && !e.hosted && !e.handOverTo.IsZero() && e.handOverTo != c.cfg.self && len(e.sent.Msgs) > 0 &&
		!c.cfg.proxy && !c.leaving && !c.stopped {
		// Our mail for the shard went to another node, which has not
		// acknowledged it: the shard starts here once it does (that node
		// took the mail before anything this region holds now), or once
		// it is gone, with that mail taken back when no copy reached it
		// (see forgetGone). Started now, newer mail would go first. An
		// empty hand-over holds nothing up.
		e.hostAfter = true
		return
	}
	e.hostAfter = false
	if home == c.cfg.self && !e.hosted {
		if c.cfg.proxy || c.leaving || c.stopped {
			// Keep its messages until the coordinator hands the shard off
			// (a leaving region's shards all are) and homes it elsewhere;
			// routing to ourselves would only loop. Expected when the
			// allocation crossed our GracefulShutdownReq. Mail held for
			// the next home stays so: it goes there as a hand-over.
			c.notef(slog.LevelDebug, "sharding: not hosting a shard allocated to a proxy or a leaving region", "shard_id", shardID)
			e.home, e.requested = cluster.UniqueAddress{}, true // the retry tick asks again
			if c.leaving && !c.stopped {
				// The coordinator may not know that we leave: our
				// GracefulShutdownReq may have been lost with a broken link
				// (else shards are placed here for ever).
				// It takes a repeated one as the first.
				c.toCoordinator(protocol.GracefulShutdownReq{Region: c.cfg.self})
			}
			return
		}
		e.hosted, e.handedIn, e.handOffTold = true, nil, false
		c.emit(regionEffect[C, S]{kind: regHost, shard: shardID})
		// The coordinator keeps the region whose mail a HostShard named
		// with the allocation until the shard runs here: a home dying
		// before that mail came leaves the wait to the next (see
		// coordinatorCore.starting). So only now, and also for a start
		// without a HostShard (lost, a ShardHomes named us).
		c.toCoordinator(protocol.ShardStarted{Shard: shardID, Region: c.cfg.self})
	}
	e.handOver = false // the mail held, if any, is delivered from here
	if home == c.cfg.self {
		e.owesHandOver = false // the next home is this region
	}
	if home != c.cfg.self && e.hosted {
		c.notef(slog.LevelError, "sharding: shard moved without a hand-off", "shard_id", shardID, "to", home)
	}
	c.drain(shardID, e)
}

// handOver sends the mail this region holds for a shard, as its previous
// home, to the next home.
//
// The rule (docs/DESIGN.md, "Hand-over, not carry"): the next home starts the
// shard only once this mail is in, or this region is known dead (gone
// from its view, or Down). A wait that a HostShard names is not bounded
// by time, since a partition or a coordinator failover can outlast any
// bound, and mail let through after the bound arrives behind newer mail.
// So that such a wait ends:
//   - the HandOver is re-sent each tick until its receiver acknowledges it
//     (ShardStarted with its Seq) or leaves the view: a broken link loses
//     it, the heal brings it. Until then this region holds what it routes
//     for the shard, which would otherwise overtake a re-sent copy;
//   - the receiver takes each (sender, Seq) once and acknowledges every
//     copy, whatever it has done with the shard since;
//   - along a chain a → b → c, b handed off before a's mail came sends its
//     own only once a's is in (see setHome), so c's wait for b lasts as
//     long as b's for a. When a's mail goes to c instead, c tells b
//     (a relayed HandOver, see handedOver), and b's wait ends;
//   - a shard back at a region that still waits for an older home awaits
//     the home it came from next (then), and tells it to hand over;
//   - the coordinator sends the HostShard again, From and all, to a home
//     that asks for its own shard before it reported ShardStarted.
//
// A wait this region guesses (pushedHome: told it is the home without a
// HostShard) stays bounded by waitTicks: the coordinator may have placed
// the shard here because the guessed home is dead to it.
func (c *regionCore[C, S]) handOver(shardID string, e *regionShard[C, S], home cluster.UniqueAddress, msgs []protocol.Deliver) {
	c.handOverSeq++
	e.handOverTo, e.sent = home, protocol.HandOver{Shard: shardID, From: c.cfg.self, Seq: c.handOverSeq, Msgs: msgs}
	e.sentCopies, e.sentRefused = 1, 0
	c.emit(regionEffect[C, S]{kind: regSend, node: home, msg: e.sent, handOver: true})
}

// reclaimHandOver takes back the mail of a hand-over whose receiver died
// before acknowledging it, once the shard has a new home: held again, it
// goes there ahead of anything buffered since (else it is re-sent for ever
// to a home that had crashed, while the new home starts without it).
func (c *regionCore[C, S]) reclaimHandOver(e *regionShard[C, S]) {
	front := c.fromDelivers(e.sent.Msgs)
	e.handOverTo, e.sent, e.sentCopies, e.sentRefused = cluster.UniqueAddress{}, protocol.HandOver{}, 0, 0
	c.prepend(e, front)
	e.handOver, e.owesHandOver = true, true
}

// handOverRefused reports that the transport refused a copy of the
// HandOver numbered seq to node at once: nothing listened there, so that
// copy reached nobody (see forgetGone).
func (c *regionCore[C, S]) handOverRefused(shardID string, node cluster.UniqueAddress, seq uint64) {
	if e := c.shards[shardID]; e != nil && e.handOverTo == node && e.sent.Seq == seq && e.sentRefused < e.sentCopies {
		e.sentRefused++
	}
}

// flushRefused reports that the transport refused a Flush to node at once:
// nothing listens there (it left, or never joined this node's view), so
// no answer will come, and what went there before is in or lost with it.
func (c *regionCore[C, S]) flushRefused(node cluster.UniqueAddress) {
	if _, ok := c.flushes[node]; ok {
		delete(c.flushes, node)
		c.checkLeft()
	}
}

// handedOverTo ends the wait for the acknowledgement of a hand-over: what
// this region buffered meanwhile may go on.
func (c *regionCore[C, S]) handedOverTo(shardID string, e *regionShard[C, S]) {
	e.handOverTo, e.sent, e.sentCopies, e.sentRefused = cluster.UniqueAddress{}, protocol.HandOver{}, 0, 0
	if e.hostAfter {
		// The shard allocated here waited for this: it starts now.
		e.hostAfter = false
		c.setHome(shardID, e.home)
	} else if !e.home.IsZero() && !e.handingOff && e.awaiting.IsZero() {
		c.drain(shardID, e)
	}
	c.checkLeft()
}

// drain releases a shard's buffered messages, in arrival order; not to
// the home the mail this region handed over went to while that mail is
// unacknowledged: re-sent, it would arrive behind them (a forward after
// a heal would overtake the HandOver the partition lost). A later home
// takes them: it waits for that home's mail, which goes ahead of them, or
// that home is dead to the coordinator (held back there too, they would
// wait for ever for a crashed home the view still lists).
func (c *regionCore[C, S]) drain(shardID string, e *regionShard[C, S]) {
	if !e.handOverTo.IsZero() && e.handOverTo == e.home && !e.hosted {
		return
	}
	if !e.hosted && c.forwardsHeld() {
		return // until it registers with the coordinator that announced itself
	}
	buf := e.buffer
	e.buffer, e.handedFront = nil, 0
	c.buffered -= len(buf)
	if len(buf) > 0 && !e.hosted {
		c.forwarded(e.home)
	}
	for _, p := range buf {
		if e.hosted {
			c.emit(regionEffect[C, S]{kind: regDeliver, shard: shardID, p: p, accepted: true})
		} else {
			c.emit(regionEffect[C, S]{kind: regForward, node: e.home, shard: shardID, p: p, accepted: true})
		}
	}
	if len(buf) > 0 {
		c.checkLeft()
	}
}

// handedOff reports that a local shard's entities have all stopped;
// leftover are the messages it held for entities that were stopping.
func (c *regionCore[C, S]) handedOff(shardID string, leftover []pending[C]) {
	e := c.entry(shardID)
	var none S
	e.local, e.hosted, e.home, e.handOffTold, e.doneEpoch, e.doneSeq, e.hostFrom = none, false, cluster.UniqueAddress{}, false, e.stopEpoch, e.stopSeq, cluster.UniqueAddress{}
	// Messages the shard held for stopping entities arrived before
	// anything the region buffered since BeginHandOff; both wait here for
	// the next home, which waits for them (see HandOver).
	c.prepend(e, leftover)
	e.handedFront = 0 // mail handed in from now on is older than ours
	e.handOver, e.owesHandOver = len(e.buffer) > 0, true
	c.toCoordinator(protocol.ShardStopped{Shard: shardID, Region: c.cfg.self, Held: e.handOver, Epoch: e.stopEpoch, Seq: e.stopSeq})
	// Only now may a leaving region report RegionStopped: sent first, it
	// would make the coordinator drop the hand-off.
	c.checkLeft()
	c.checkGone()
}

// deliver is p as the protocol carries it.
func (p *pending[C]) deliver(shardID string) protocol.Deliver {
	var d protocol.Deliver
	p.fill(&d, shardID)
	return d
}

// fill sets *d, a zero Deliver, to p as the protocol carries it: in
// place, for a sender that passes d on by pointer (a Deliver is eight
// words, copied at every call that takes it by value).
func (p *pending[C]) fill(d *protocol.Deliver, shardID string) {
	d.Shard, d.EntityID, d.Start, d.Ask = shardID, p.entityID, p.start, p.ask
	if !p.start {
		d.Msg = p.msg
	}
	if p.trace != nil {
		setTrace(d, *p.trace)
	}
}

// prepend puts ps ahead of a shard's buffer. They were accepted already,
// so the buffer limit does not apply.
func (c *regionCore[C, S]) prepend(e *regionShard[C, S], ps []pending[C]) {
	if len(ps) == 0 {
		return
	}
	e.buffer = append(slices.Clone(ps), e.buffer...)
	c.buffered += len(ps)
}

// handedOver takes the mail a shard's previous home held: it goes ahead
// of whatever this region holds for the shard, behind the mail other
// HandOvers brought before, and a shard that waited for it starts now.
//
// A HandOver from another region than the awaited previous home comes
// from a home before it: the shard went a → b → here, b waited for a's
// mail and was handed off first, and a, told the latest home, sent it
// here. a's mail is older than b's, which b held since its fence at a,
// and goes first.
func (c *regionCore[C, S]) handedOver(m protocol.HandOver) {
	e := c.entry(m.Shard)
	if m.Relayed && m.From == c.cfg.self {
		return
	}
	if m.From != c.cfg.self {
		if !m.Relayed {
			// Its sender may leave now, and stops re-sending: the mail is here.
			c.emit(regionEffect[C, S]{kind: regSend, node: m.From, msg: protocol.ShardStarted{Shard: m.Shard, Region: c.cfg.self, Seq: m.Seq}})
		}
		if m.Seq != 0 && m.Seq <= e.handedSeq[m.From] {
			return // a copy re-sent before our acknowledgement reached it
		}
		if e.handedSeq == nil {
			e.handedSeq = make(map[cluster.UniqueAddress]uint64)
		}
		e.handedSeq[m.From] = m.Seq
	}
	front := c.fromDelivers(m.Msgs)
	passedOn := e.awaiting.IsZero() && !e.handingOff && !e.home.IsZero() && e.home != c.cfg.self
	if !m.Relayed && m.From != c.cfg.self && (e.hosted || passedOn) && len(front) > 0 && c.gone(m.From) {
		// From left the view or is Down, and the shard went on without
		// its mail, which a slow link brought only now (its sender
		// crashed, or its leave ran out of time): it started here, or it
		// lives at another home, which waits for From no more. Along a
		// chain From → here → next, this region's own mail went on to
		// next when its wait for From ended. Delivered, or forwarded
		// there behind that mail, it would come after newer mail.
		// Refused, as a crash loses mail.
		for _, p := range front {
			c.emit(regionEffect[C, S]{kind: regDeadLetter, node: m.From, shard: m.Shard, p: p, err: errHandOverTooLate})
		}
		return
	}
	if len(front) > 0 {
		if !e.then.IsZero() && e.handedFront <= e.thenAt {
			e.thenAt += len(front)
		}
		e.buffer = slices.Concat(e.buffer[:e.handedFront], front, e.buffer[e.handedFront:])
		e.handedFront += len(front)
		c.buffered += len(front)
	}
	if !m.Relayed && m.From != c.cfg.self && !e.hosted && e.awaiting != m.From {
		// In before this region knew, from a HostShard or a HandOff
		// naming From, that it waits for it: that wait would never end
		// (From, acknowledged, sends nothing more).
		if e.handedIn == nil {
			e.handedIn = make(map[cluster.UniqueAddress]bool)
		}
		e.handedIn[m.From] = true
	}
	switch {
	case e.awaiting == m.From:
		e.awaiting, e.relays = cluster.UniqueAddress{}, nil
		c.setHome(m.Shard, e.home)
	case !e.awaiting.IsZero():
		// Another region's (an empty one, or mail older than the awaited
		// mail): it waits in the buffer, ahead of the awaited mail. The
		// awaited region, handed off before the mail it awaits came, may
		// wait for this very mail, which came here instead: it learns
		// that it came, until it hands over (else a chain such as
		// n1 → n2 → n3 → n5 waits for ever once n2's mail went to n5).
		r := protocol.HandOver{Shard: m.Shard, From: m.From, Seq: m.Seq, Relayed: true}
		e.relays = append(e.relays, r)
		c.emit(regionEffect[C, S]{kind: regSend, node: e.awaiting, msg: r})
	case len(front) == 0 && e.hosted:
		// An empty hand-over after the shard started here: nothing to do.
	case e.hosted || !e.home.IsZero() && !e.handingOff:
		c.drain(m.Shard, e)
	default:
		// Ahead of its HostShard: nothing to wait for then.
		if e.handedIn == nil {
			e.handedIn = make(map[cluster.UniqueAddress]bool)
		}
		e.handedIn[m.From] = true
	}
}

// leave starts a graceful leave: the coordinator hands off every shard
// hosted here, and regLeft follows once none is left and none can be
// allocated here any more. oldest is the coordinator's node in the
// current membership.
func (c *regionCore[C, S]) leave(oldest cluster.UniqueAddress) {
	c.oldest = oldest
	c.leaving, c.awaitingLeft = true, true
	// Nothing is ever allocated to a proxy: no LeaveAck to wait for, which
	// no coordinator may be there to send.
	c.leaveAcked = c.leaveAcked || c.cfg.proxy
	// Until now the data path forwarded to known homes without the core
	// (see routable): each of them, and a home forgotten with forwards
	// perhaps still on their way there (fenceOwed), may hold some.
	for _, id := range slices.Sorted(maps.Keys(c.shards)) {
		if e := c.shards[id]; !e.hosted {
			c.forwarded(e.home)
			c.forwarded(e.fenceOwed)
		}
	}
	c.releaseHeld()
	c.checkLeft()
	c.toCoordinator(protocol.GracefulShutdownReq{Region: c.cfg.self})
}

// checkLeft emits regLeft once a leaving region hosts nothing.
func (c *regionCore[C, S]) checkLeft() {
	if !c.leaving || !c.awaitingLeft {
		return
	}
	// Without a coordinator in our view (the last node with the role is
	// leaving) no allocation can be on its way, nor can an ack come.
	if !c.leaveAcked && !c.oldest.IsZero() {
		return
	}
	// Nor while it buffers messages it accepted (for a shard being handed
	// off): they go on to the next home first, unless none took them in
	// time (see leaveWaited).
	gaveUp := c.cfg.waitTicks > 0 && c.leaveWaited >= 2*c.cfg.waitTicks
	if c.buffered > 0 && !gaveUp {
		return
	}
	for _, e := range c.shards {
		// Nor before it handed over the mail it holds, and that arrived
		// (mail it holds as the shard's last home is buffered too, and
		// given up on with the rest: the last region of the type to leave
		// has no next home to hand it to); nor while a hand-off it fenced
		// for runs: the home waits for its fence, which a slow link may
		// still carry behind a forward, and would take it for gone once
		// it left the view.
		if e.hosted || e.handOver && !gaveUp || !e.handOverTo.IsZero() || !e.fencedAt.IsZero() && !c.gone(e.fencedAt) {
			return
		}
	}
	// Nor while forwards of this step wait for the runner: one the
	// transport cannot carry comes back into the buffer (see unreachable),
	// and a regLeft emitted now would stop the region with it, and lose
	// it. The next tick looks again.
	if c.forwarding() {
		return
	}
	if !c.flushed() {
		return
	}
	c.awaitingLeft = false
	c.emit(regionEffect[C, S]{kind: regLeft})
}

// forwarded notes, while the region leaves, that it forwards to node: its
// leave waits for node to have those forwards (see flushed). A Flush sent
// there before answers for them no more.
func (c *regionCore[C, S]) forwarded(node cluster.UniqueAddress) {
	if !c.leaving || c.stopped || node.IsZero() || node == c.cfg.self {
		return
	}
	if c.flushes == nil {
		c.flushes = make(map[cluster.UniqueAddress]uint64)
	}
	c.flushes[node] = 0
}

// flushed reports whether every node a leaving region may have forwarded
// to has answered a Flush sent there after those forwards, or is gone; it
// sends a Flush where none follows the last forward yet.
//
// Else the region would leave the view with forwards still on a slow link
// (the transport keeps its queue across a broken connection): a home
// takes a region gone from the view for gone, and stops or hands off the
// shard, or leaves itself, without waiting for it; the forwards would
// come after the shard moved, or find nobody. Per-link order makes the
// answer mean that every forward sent there before the Flush is in. The
// wait, like the fence's, ends on the home being gone (left the view, or
// Down), not on time (docs/DESIGN.md, "Graceful leave").
func (c *regionCore[C, S]) flushed() bool {
	for _, n := range slices.SortedFunc(maps.Keys(c.flushes), cluster.UniqueAddress.Compare) {
		switch {
		case c.gone(n):
			delete(c.flushes, n)
		case c.flushes[n] == 0:
			c.flushSeq++
			c.flushes[n] = c.flushSeq
			c.emit(regionEffect[C, S]{kind: regSend, node: n, msg: protocol.Flush{From: c.cfg.self, Seq: c.flushSeq}})
		}
	}
	return len(c.flushes) == 0
}

// forwarding reports whether the effects not yet carried out include a
// forward.
func (c *regionCore[C, S]) forwarding() bool {
	for i := range c.out {
		if c.out[i].kind == regForward {
			return true
		}
	}
	return false
}

// stop ends a leave, finished or not: the region refuses messages from
// now on and stops at once what it still hosts (the leave ran out of
// time). It tells the coordinator it is gone only once those entities have
// stopped (see shardTerminated): told earlier, the coordinator would start
// their shards elsewhere while they still run.
func (c *regionCore[C, S]) stop() {
	if c.stopped {
		return
	}
	c.stopped, c.awaitingLeft, c.awaitingGone = true, false, true
	if c.buffered > 0 {
		c.notef(slog.LevelWarn, "sharding: region stopped with undelivered buffered messages", "count", c.buffered)
	}
	for _, id := range c.hostedShards() {
		c.emit(regionEffect[C, S]{kind: regTerminate, shard: id})
	}
	c.checkGone()
}

// shardTerminated reports that every entity of a shard stop terminated
// has stopped.
func (c *regionCore[C, S]) shardTerminated(shardID string) {
	if e := c.shards[shardID]; e != nil && e.hosted {
		var none S
		e.local, e.hosted, e.home = none, false, cluster.UniqueAddress{}
	}
	c.checkGone()
}

// checkGone reports a stopped region gone once it hosts nothing.
func (c *regionCore[C, S]) checkGone() {
	if !c.awaitingGone || len(c.hostedShards()) > 0 {
		return
	}
	c.awaitingGone = false
	c.toCoordinator(protocol.RegionStopped{Region: c.cfg.self})
	c.emit(regionEffect[C, S]{kind: regGone})
}

// terminate stops the region as a crash would: buffered messages are
// dropped, and nobody is told.
func (c *regionCore[C, S]) terminate() {
	c.stopped, c.awaitingLeft, c.awaitingGone = true, false, false
	for _, e := range c.shards {
		e.buffer, e.handedFront = nil, 0
	}
	c.buffered = 0
}

// alone reports whether the membership view lists no other node than
// this region's, Down ones aside.
func (c *regionCore[C, S]) alone() bool {
	for n := range c.live {
		if n != c.cfg.self {
			return false
		}
	}
	return true
}

// gone reports whether node left the view, or is Down: its fence, its
// hand-over or its acknowledgement will never come. A node this region's
// view has not held yet may be newer than the view (it joined): its fence
// or hand-over may come, and what it forwarded or held with it (a
// hand-off going on without the fence of a node that had just joined
// would let that node's forward come after the shard moved, behind its
// later messages; a shard started without the mail of a previous home
// the view had not shown yet would deliver it after newer mail). Every
// wait for a node's word ends on this, never on isLive.
func (c *regionCore[C, S]) gone(node cluster.UniqueAddress) bool {
	return c.down[node] || c.departed[node]
}

// isLive reports whether node is in the membership view and not Down.
func (c *regionCore[C, S]) isLive(node cluster.UniqueAddress) bool {
	return !c.down[node] && (c.live == nil || c.live[node])
}

// homes is every shard home this region knows: shard → node.
func (c *regionCore[C, S]) homes() map[string]cluster.UniqueAddress {
	out := make(map[string]cluster.UniqueAddress)
	for id, e := range c.shards {
		if !e.home.IsZero() {
			out[id] = e.home
		}
	}
	return out
}

// shardStates lists, sorted by id, every shard this region knows a home
// for, hands off, or holds messages for while it waits for a home.
func (c *regionCore[C, S]) shardStates() []ShardState {
	var out []ShardState
	for id, e := range c.shards {
		if e.home.IsZero() && !e.handingOff && len(e.buffer) == 0 {
			continue
		}
		out = append(out, ShardState{ID: id, Home: e.home, HandingOff: e.handingOff, Entities: -1})
	}
	sortShardStates(out)
	return out
}
