package sharding

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/internal/metrics"
	"github.com/shoal-dev/shoal/internal/runtime"
	"github.com/shoal-dev/shoal/sharding/internal/bridge"
	"github.com/shoal-dev/shoal/sharding/internal/protocol"
	"github.com/shoal-dev/shoal/sharding/internal/remote"
	"github.com/shoal-dev/shoal/timers"
	"go.opentelemetry.io/otel/trace"
)

// Region routes the messages of one entity type on one node and hosts the
// shards allocated to it. It is the runner of a regionCore, which decides;
// the runner owns what the core must not: the lock, the transport, the
// clock, the shards and the control entity that takes protocol messages
// one at a time. A data message for an entity already running here goes
// straight to its mailbox with no lock (fastpath.go); else, for a shard
// whose home is known and that holds no buffer, it takes a read-locked
// path to the shard (or to the home's region); everything else steps the
// core under the write lock, and its effects are carried out before the
// lock is released, so that they happen in the order the core decided
// them.
type Region[C any] struct {
	s        *Sharding
	typ      string
	ent      Entity[C]
	settings Settings
	self     address
	proxy    bool
	clock    timers.Clock
	m        *metrics.ShardingType // nil when metrics are off

	mu      regionLock // the data path read-locks one stripe
	core    regionCore[C, *shard[C]]
	fast    fastPath[C]   // what the data path reads with no lock
	routes  routeCache    // the data path's routes to other nodes (routecache.go)
	leftAll chan struct{} // closed on regLeft
	gone    chan struct{} // closed on regGone
	tick    timers.Timer  // the armed retry tick
	// registerTick is the armed early re-registration (regArmRegister).
	registerTick timers.Timer
	// fx carries out the core's effects (region_effects.go).
	fx regionEffects[C, *shard[C]]

	ctl      *entity.Cell[Message]
	unlisten func()
	// queued counts the messages from the transport that inbound left in
	// the control entity's mailbox and it has not finished yet: while any
	// is, no message from the transport overtakes it (inbound.go).
	queued atomic.Int64

	// regionLink hands package bridge what reminders need (bridge.go).
	regionLink
}

func newRegion[C any](s *Sharding, e Entity[C]) *Region[C] {
	settings := s.downingSettings(e.Key.Name(), e.Settings).withDefaults()
	r := &Region[C]{
		s: s, typ: e.Key.Name(), ent: e, settings: settings,
		self:  address{Node: s.self, Type: e.Key.Name()},
		proxy: !s.selfMember().HasRole(e.Role),
		clock: s.sys.Clock(), gone: make(chan struct{}), m: s.m.Type(e.Key.Name()),
	}
	r.regionLink = bridge.LinkRegion(regionBridge[C]{r})
	cfg := regionCoreConfig{self: s.self, proxy: r.proxy, bufferSize: settings.BufferSize, tickInterval: r.tickInterval()}
	cfg.registerRetry = max(100*time.Millisecond, settings.RetryInterval/8)
	if idle := settings.PassivateIdleAfter; idle > 0 {
		cfg.idleTicks = uint64((idle + cfg.tickInterval - 1) / cfg.tickInterval)
	}
	// A fence lost with a broken link, or a hand-over the region only
	// guesses it awaits, is waited for as long as a hand-off may take.
	cfg.waitTicks = uint64((settings.HandOffTimeout + cfg.tickInterval - 1) / cfg.tickInterval)
	r.core.init(cfg)
	r.fx = regionEffects[C, *shard[C]]{core: &r.core, env: regionIO[C]{r}, typ: r.typ, self: s.self}
	r.fast.entities.init()
	return r
}

func (r *Region[C]) typeName() string { return r.typ }

// metricsReport is the region's buffer and shard sizes, for a scrape.
func (r *Region[C]) metricsReport() metrics.RegionReport {
	r.mu.RLock()
	buffered := r.core.buffered
	r.mu.RUnlock()
	return metrics.RegionReport{Type: r.typ, Buffered: buffered, Shards: r.Stats()}
}

// idleTickNow is the passivation clock; r.mu is held.
func (r *Region[C]) idleTickNow() uint64 { return r.core.idleTick }

// isStopped reports whether the region stopped or terminated.
func (r *Region[C]) isStopped() bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.core.stopped
}

// EntityRefFor addresses entity id through this region.
func (r *Region[C]) EntityRefFor(id string) EntityRef[C] {
	return EntityRef[C]{region: r, id: id, hash: r.fast.entities.hash(id)}
}

// ShardID is the shard entity id belongs to.
func (r *Region[C]) ShardID(entityID string) string { return r.settings.ShardID(entityID) }

// listen starts the region's control entity and listens at its address;
// run then starts routing.
func (r *Region[C]) listen() error {
	r.ctl = entity.Spawn(r.s.sys, &entity.Props[Message]{
		LocalOnly: true,
		Key:       entity.NewTypeKey[Message]("sharding-region-" + r.typ),
		Create:    func(entity.Context[Message]) entity.Behavior[Message] { return entity.Receive(r.receive) },
	}, r.self.String())
	deliver := func(d protocol.Deliver) error {
		if d.Trace == nil { // the common case, without a copy of d
			return r.inboundDeliver(&d)
		}
		d, span := r.traceInbound(r.s.remote.OwnDeliver(d)) // the span keeps the entity id
		err := r.inboundDeliver(&d)
		if span != nil {
			endSpan(span, err)
		}
		return err
	}
	stop, err := r.s.remote.ListenDelivers(r.self, r.queueInbound, deliver)
	if err != nil {
		r.ctl.StopNow()
		return err
	}
	r.unlisten = stop
	return nil
}

// run makes the region register with the coordinator and starts its
// retry tick.
func (r *Region[C]) run() error {
	r.membershipChanged()
	return r.ctl.Tell(retryTick{})
}

// retryTick re-sends what is unanswered and drives idle passivation. It
// and the region's other ticks are its own: left behind when the control
// entity stops, they are no dead letters.
type retryTick struct{ runtime.OwnTick }

func (retryTick) ProtocolMessage() {}

// registerRetry re-sends a Register no RegisterAck answered yet (see
// regionCore.registerSoon).
type registerRetry struct {
	runtime.OwnTick
	gen uint64
}

func (registerRetry) ProtocolMessage() {}

// coordinatorMoved makes the region register with the current coordinator.
type coordinatorMoved struct{ runtime.OwnTick }

func (coordinatorMoved) ProtocolMessage() {}

// shardHandedOff reports that a local shard's entities have all stopped;
// leftover are the messages it held for entities that were stopping.
type shardHandedOff[C any] struct {
	shard    string
	leftover []pending[C]
}

func (shardHandedOff[C]) ProtocolMessage() {}

func (r *Region[C]) membershipChanged() { _ = r.ctl.Tell(coordinatorMoved{}) }

// coordinatorNode is where the type's coordinator runs: the oldest Up,
// reachable member with the type's role; zero when there is none.
func (r *Region[C]) coordinatorNode() cluster.UniqueAddress {
	m, _ := r.s.view.Load().Oldest(r.ent.Role)
	return m.Address
}

func (r *Region[C]) tickInterval() time.Duration {
	d := r.settings.RetryInterval
	if idle := r.settings.PassivateIdleAfter; idle > 0 && idle/2 < d {
		d = idle / 2
	}
	return d
}

// tell is the data path of EntityRef.Tell, h being entityID's hash on the
// fast path (r.fast.entities.hash); with start, msg and h are ignored and
// the entity is only started. With failFast, a local entity that is backing
// off after a failure refuses msg (UnavailableError) instead of holding it.
// parent, nil for none, is the trace context msg carries to its handler.
func (r *Region[C]) tell(entityID string, h uint64, msg C, start, failFast bool, parent *trace.SpanContext) error {
	if entityID == "" {
		return ErrInvalidEntityID
	}
	if !start {
		// A route of the current epoch first: its shard is another node's
		// in this epoch, so the fast path's table could not route it (a
		// shard stamped routable here in this epoch is hosted here), and
		// its look-up is spared. The epoch read before the lock only
		// skips a stale route; the check that counts is the one under it
		// (see docs/DESIGN.md, "Routing").
		if rt := r.routes.load(entityID, h); rt != nil && rt.epoch == r.mu.epoch.Load() {
			rt.stripe.RLock()
			if rt.epoch == r.mu.epoch.Load() {
				return r.forwardRLocked(rt.stripe, rt.home, rt.shardID, pending[C]{entityID, msg, start, failFast, parent})
			}
			rt.stripe.RUnlock()
		}
		if ok, err := r.tellFast(entityID, h, msg, parent); ok {
			return err
		}
	}
	shardID := r.settings.ShardID(entityID)
	stripe := r.mu.RLockShard(shardID)
	if e := r.core.routable(shardID); e != nil {
		if e.hosted {
			e.local.routed(r.mu.epoch.Load())
			err := e.local.deliver(entityID, msg, start, failFast, false, parent)
			stripe.RUnlock()
			return err
		}
		if !start {
			r.routes.store(entityID, h, shardID, stripe, e.home, r.mu.epoch.Load())
		}
		return r.forwardRLocked(stripe, e.home, shardID, pending[C]{entityID, msg, start, failFast, parent})
	}
	stripe.RUnlock()

	r.mu.Lock()
	p := pending[C]{entityID, msg, start, failFast, parent}
	v, e := r.core.route(shardID, p)
	err := r.fx.sendRouted(v, e, shardID, p, failFast, false)
	idle := r.applyLocked()
	r.mu.Unlock()
	r.runUnlocked(idle)
	return err
}

// forwardRLocked forwards p to home under stripe, the read-locked stripe
// of shardID, and unlocks it. Forwarding under the read lock is what
// orders it before a hand-off: BeginHandOff takes the write lock before
// this region acknowledges it, so nothing this region forwards can reach
// the old home after its hand-off began.
func (r *Region[C]) forwardRLocked(stripe *sync.RWMutex, home cluster.UniqueAddress, shardID string, p pending[C]) error {
	err := r.forward(home, shardID, p)
	stripe.RUnlock()
	if errors.Is(err, ErrUnreachable) {
		r.step(func(c *regionCore[C, *shard[C]]) { c.unreachable(shardID, home) })
	}
	return err
}

// forward sends p to the region on home. A traced p goes in a
// "shoal.remote.send" span, whose context the Deliver carries.
func (r *Region[C]) forward(home cluster.UniqueAddress, shardID string, p pending[C]) error {
	var d protocol.Deliver
	p.fill(&d, shardID)
	var err error
	if p.trace != nil && r.s.sys.Tracing() {
		span := r.startRemote("shoal.remote.send", trace.SpanKindProducer, *p.trace, home.String(), p.entityID)
		setTrace(&d, span.SpanContext())
		err = r.s.remote.SendDeliver(address{Node: home, Type: r.typ}, &d)
		endSpan(span, err)
	} else {
		err = r.s.remote.SendDeliver(address{Node: home, Type: r.typ}, &d)
	}
	if err != nil {
		return fmt.Errorf("sharding: forward to %s: %w", home, err)
	}
	return nil
}

// receive handles protocol messages on the region's control entity.
func (r *Region[C]) receive(_ entity.Context[Message], m Message) entity.Behavior[Message] {
	switch m := m.(type) {
	case queuedInbound:
		r.receive(nil, m.msg)
		r.queued.Add(-1)
	case retryTick:
		r.step(func(c *regionCore[C, *shard[C]]) { c.tick() })
	case registerRetry:
		r.step(func(c *regionCore[C, *shard[C]]) { c.retryRegister(m.gen) })
	case coordinatorMoved:
		oldest := r.coordinatorNode()
		var live []cluster.UniqueAddress
		for _, m := range r.s.members() {
			if m.Status != cluster.Down {
				live = append(live, m.Address)
			}
		}
		r.step(func(c *regionCore[C, *shard[C]]) { c.membership(oldest, live) })
	case shardHandedOff[C]:
		r.step(func(c *regionCore[C, *shard[C]]) { c.handedOff(m.shard, m.leftover) })
	case protocol.GetRegionStats:
		entity.Reply(r.s.sys, m.ReplyTo, r.Stats())
	default:
		r.step(func(c *regionCore[C, *shard[C]]) { c.step(m) })
	}
	return entity.Same[Message]()
}

// step feeds the core one input under the write lock and carries out its effects.
func (r *Region[C]) step(input func(c *regionCore[C, *shard[C]])) {
	r.mu.Lock()
	input(&r.core)
	later := r.applyLocked()
	r.mu.Unlock()
	r.runUnlocked(later)
}

// applyLocked carries out the core's effects in order; r.mu is held for
// writing. It returns the effects that run once the lock is released
// (see regionEffects.applyLocked).
func (r *Region[C]) applyLocked() []regionEffect[C, *shard[C]] {
	later := r.fx.applyLocked()
	r.fast.tick.Store(r.core.idleTick)
	return later
}

// runUnlocked carries out what applyLocked left for after the lock.
func (r *Region[C]) runUnlocked(later []regionEffect[C, *shard[C]]) { r.fx.runUnlocked(later) }

// deadLetter records a message whose sender's Tell returned already (it
// was buffered here, or forwarded by another region) and that could not be
// delivered: counted and logged, and the local asks it carries fail now.
func (r *Region[C]) deadLetter(err error, p pending[C], reason string) {
	runtime.EntityDeadLetter(r.s.sys, err, r.typ, p.entityID, reason+": "+err.Error(), p.msg)
}

// regionIO is the production regionEnv of a Region: the transport, the
// clock, the shard runners and goroutines.
type regionIO[C any] struct{ r *Region[C] }

func (io regionIO[C]) send(to address, msg Message) error {
	r := io.r
	err := r.s.remote.Send(to, msg)
	if err != nil {
		r.s.log.Debug("sharding: unreachable; will retry", "entity_type", r.typ, "to", to.String(), "err", err)
	}
	return err
}

func (io regionIO[C]) forward(home cluster.UniqueAddress, shardID string, p pending[C]) error {
	return io.r.forward(home, shardID, p)
}

func (io regionIO[C]) newShard(shardID string) *shard[C] { return newShard(io.r, shardID) }

func (io regionIO[C]) hosted(shardID string) (*shard[C], bool) {
	r := io.r
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.core.local(shardID)
}

func (io regionIO[C]) armTick(after time.Duration) {
	r := io.r
	r.tick = r.clock.AfterFunc(after, func() { _ = r.ctl.Tell(retryTick{}) })
}

func (io regionIO[C]) armRegister(after time.Duration, gen uint64) {
	r := io.r
	if r.registerTick != nil {
		r.registerTick.Stop()
	}
	r.registerTick = r.clock.AfterFunc(after, func() { _ = r.ctl.Tell(registerRetry{gen: gen}) })
}

func (io regionIO[C]) left() {
	if r := io.r; r.leftAll != nil {
		close(r.leftAll)
		r.leftAll = nil
	}
}

func (io regionIO[C]) gone() { close(io.r.gone) }

func (io regionIO[C]) deadLetter(err error, p pending[C], _ cluster.UniqueAddress, reason string) {
	io.r.deadLetter(err, p, reason)
}

func (io regionIO[C]) note(level slog.Level, note string, args []any) {
	r := io.r
	r.s.log.Log(context.Background(), level, note, append([]any{"entity_type", r.typ}, args...)...)
}

func (io regionIO[C]) handOff(sh *shard[C], shardID string) {
	r, began := io.r, io.r.clock.Now()
	sh.handOff(func(leftover []pending[C]) {
		r.m.HandedOff(r.clock.Now().Sub(began))
		_ = r.ctl.Tell(shardHandedOff[C]{shard: shardID, leftover: leftover})
	})
}

func (io regionIO[C]) passivateIdle(sh *shard[C], tick, ticks uint64) { sh.passivateIdle(tick, ticks) }

// terminate waits for the entities on a goroutine of its own: an entity
// stuck in its handler may never stop, and Shutdown keeps its deadline.
func (io regionIO[C]) terminate(sh *shard[C], shardID string) {
	r, cells := io.r, sh.forceStopAll()
	go func() {
		for _, c := range cells {
			<-c.Done()
		}
		sh.forgetAll()
		r.step(func(c *regionCore[C, *shard[C]]) { c.shardTerminated(shardID) })
	}()
}

// shutdown leaves gracefully until ctx ends, then stops what still runs.
// The region reports itself gone (and gone closes) once its entities have
// stopped, which may be after shutdown returns.
func (r *Region[C]) shutdown(ctx context.Context) error {
	oldest := r.coordinatorNode()
	left := make(chan struct{})
	r.mu.Lock()
	r.leftAll = left
	r.mu.Unlock()
	r.step(func(c *regionCore[C, *shard[C]]) { c.leave(oldest) })
	var err error
	select {
	case <-left:
	case <-ctx.Done():
		err = fmt.Errorf("hand-off incomplete: %w", ctx.Err())
	}
	r.step(func(c *regionCore[C, *shard[C]]) { c.stop() })
	r.unlisten()
	r.stopControl()
	return err
}

// goneCh is closed once the region has told the coordinator it is gone.
func (r *Region[C]) goneCh() <-chan struct{} { return r.gone }

// stopControl stops the control entity and its tick.
func (r *Region[C]) stopControl() {
	r.ctl.StopNow()
	<-r.ctl.Done()
	r.mu.Lock()
	if r.tick != nil {
		r.tick.Stop()
	}
	if r.registerTick != nil {
		r.registerTick.Stop()
	}
	r.mu.Unlock()
}

// StopShards hands the given shards off without moving them: their
// entities get the stop message, and the shards start again on their next
// message. It returns once the request is sent.
func (r *Region[C]) StopShards(shards ...string) {
	r.step(func(c *regionCore[C, *shard[C]]) { c.toCoordinator(protocol.StopShards{Shards: shards}) })
}

// State is a snapshot of what a region hosts.
type State struct {
	// Shards maps each hosted shard to its entity ids, sorted.
	Shards map[string][]string
}

// State reports the shards this region hosts and their entities.
func (r *Region[C]) State() State {
	r.mu.RLock()
	locals := make(map[string]*shard[C])
	for _, id := range r.core.hostedShards() {
		locals[id], _ = r.core.local(id)
	}
	r.mu.RUnlock()
	st := State{Shards: make(map[string][]string, len(locals))}
	for id, sh := range locals {
		st.Shards[id] = sh.entityIDs()
	}
	return st
}

// Stats counts entities per hosted shard.
func (r *Region[C]) Stats() map[string]int {
	st := r.State()
	out := make(map[string]int, len(st.Shards))
	for id, ids := range st.Shards {
		out[id] = len(ids)
	}
	return out
}

// ShardingStats is the sharding of one entity type over the cluster.
type ShardingStats struct {
	// Regions maps each hosting region (its node) that answered to the
	// number of entities in each of its shards.
	Regions map[cluster.UniqueAddress]map[string]int
	// Failed lists, sorted, the regions that did not answer before the
	// context ended or could not be reached.
	Failed []cluster.UniqueAddress
}

// ClusterStats asks every member that may host this entity type for its
// entities per shard (Akka's GetClusterShardingStats). It returns when all
// have answered or ctx ends; give ctx a deadline.
func (r *Region[C]) ClusterStats(ctx context.Context) ShardingStats {
	var nodes []cluster.UniqueAddress
	for _, m := range r.s.members() {
		if m.HasRole(r.ent.Role) {
			nodes = append(nodes, m.Address)
		}
	}
	type answer struct {
		node  cluster.UniqueAddress
		stats map[string]int
		err   error
	}
	answers := make(chan answer, len(nodes))
	for _, node := range nodes {
		go func() {
			ref := transportRef{t: r.s.remote, to: address{Node: node, Type: r.typ}, sys: r.s.sys}
			st, err := entity.Ask(ctx, entity.Ref[Message](ref), func(to entity.ReplyTo[map[string]int]) Message {
				return protocol.GetRegionStats{ReplyTo: to}
			})
			answers <- answer{node, st, err}
		}()
	}
	out := ShardingStats{Regions: make(map[cluster.UniqueAddress]map[string]int, len(nodes))}
	for range nodes {
		a := <-answers
		if a.err != nil {
			out.Failed = append(out.Failed, a.node)
			continue
		}
		out.Regions[a.node] = a.stats
	}
	slices.SortFunc(out.Failed, cluster.UniqueAddress.Compare)
	return out
}

// transportRef lets entity.Ask address a region through the transport.
type transportRef struct {
	t   *remote.Transport
	to  address
	sys *entity.System
}

func (t transportRef) Tell(m Message) error   { return t.t.Send(t.to, m) }
func (t transportRef) System() *entity.System { return t.sys }

// hostedShards lists local shards, sorted; for tests.
func (r *Region[C]) hostedShards() []string {
	return slices.Sorted(maps.Keys(r.State().Shards))
}
