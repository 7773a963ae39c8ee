package sharding

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/timers"
)

// Region routes the messages of one entity type on one node and hosts the
// shards allocated to it. Data messages take a lock-protected fast path
// straight to the entity; protocol messages are handled one at a time by
// the region's control entity.
type Region[C any] struct {
	s        *Sharding
	typ      string
	ent      Entity[C]
	settings Settings
	self     Address
	proxy    bool
	clock    timers.Clock

	mu       regionLock // the data path read-locks one stripe
	table    map[string]*shardEntry[C]
	buffered int
	epoch    uint64
	// coordinator is the node of the coordinator we registered with ("" if
	// none); written under mu, read without it by toCoordinator, which
	// runs both with and without mu held.
	coordinator atomic.Pointer[string]
	registered  bool
	stopped     bool
	leaving     bool
	leaveAcked  bool          // the coordinator allocates nothing to us any more
	leftAll     chan struct{} // closed when a leaving region holds no shard

	ctl         *entity.Cell[Message]
	coord       *entity.Cell[Message] // the coordinator, while this node hosts it
	unlisten    func()
	unlistenCo  func()
	idleTick    uint64
	coordinated sync.Mutex // serializes coordinator start/stop; guards what follows
	// A coordinator that stopped by itself (its store failed) is started
	// again after a back-off, not before coordNext.
	coordRestarts *backoff.ExponentialBackOff
	coordStarted  time.Time
	coordNext     time.Time
}

type shardEntry[C any] struct {
	home       string // node of the hosting region; "" while unknown
	local      *shard[C]
	buffer     []pending[C]
	handingOff bool
	requested  bool
}

type pending[C any] struct {
	entityID string
	msg      C
	start    bool // StartEntity: no message, just make sure it runs
}

func newRegion[C any](s *Sharding, e Entity[C]) *Region[C] {
	r := &Region[C]{
		s: s, typ: e.Key.Name(), ent: e, settings: e.Settings.withDefaults(),
		self:  Address{Node: s.self, Type: e.Key.Name()},
		proxy: !s.cfg.Membership.Self().HasRole(e.Role),
		clock: s.sys.Clock(),
		table: make(map[string]*shardEntry[C]),
	}
	return r
}

func (r *Region[C]) typeName() string { return r.typ }

// idleTickNow is the passivation clock; r.mu is held.
func (r *Region[C]) idleTickNow() uint64 { return r.idleTick }

// EntityRefFor addresses entity id through this region.
func (r *Region[C]) EntityRefFor(id string) EntityRef[C] { return EntityRef[C]{region: r, id: id} }

// ShardID is the shard entity id belongs to.
func (r *Region[C]) ShardID(entityID string) string { return r.settings.ShardID(entityID) }

func (r *Region[C]) start() error {
	r.ctl = entity.Spawn(r.s.sys, &entity.Props[Message]{
		LocalOnly: true,
		Key:       entity.NewTypeKey[Message]("sharding-region-" + r.typ),
		Create:    func(entity.Context[Message]) entity.Behavior[Message] { return entity.Receive(r.receive) },
	}, r.self.String())
	stop, err := r.s.cfg.Transport.Listen(r.self, func(m Message) error { return r.ctl.Tell(m) })
	if err != nil {
		r.ctl.StopNow()
		return err
	}
	r.unlisten = stop
	r.membershipChanged()
	return r.ctl.Tell(retryTick{})
}

// retryTick re-sends what is unanswered and drives idle passivation.
type retryTick struct{}

func (retryTick) protocolMessage() {}

// coordinatorMoved makes the region register with the current coordinator.
type coordinatorMoved struct{}

func (coordinatorMoved) protocolMessage() {}

func (r *Region[C]) membershipChanged() {
	r.hostCoordinatorIfOldest()
	_ = r.ctl.Tell(coordinatorMoved{})
	r.coordinated.Lock() // the retry tick may restart the coordinator meanwhile
	if r.coord != nil {
		_ = r.coord.Tell(membersChanged{members: r.s.cfg.Membership.Members()})
	}
	r.coordinated.Unlock()
}

func (r *Region[C]) coordinatorNode() string {
	m, ok := Oldest(r.s.cfg.Membership.Members(), r.ent.Role)
	if !ok {
		return ""
	}
	return m.Node
}

// tell is the data path of EntityRef.Tell; with start, msg is ignored and
// the entity is only started. With failFast, a local entity that is backing
// off after a failure refuses msg (UnavailableError) instead of holding it.
func (r *Region[C]) tell(entityID string, msg C, start, failFast bool) error {
	if entityID == "" {
		return ErrInvalidEntityID
	}
	shardID := r.settings.ShardID(entityID)
	stripe := r.mu.RLockShard(shardID)
	if e := r.table[shardID]; e != nil && e.routable() && !r.stopped {
		if e.local != nil {
			err := e.local.deliver(entityID, msg, start, failFast, false)
			stripe.RUnlock()
			return err
		}
		// Forward under the read lock: BeginHandOff takes the write lock
		// before this region acknowledges it, so nothing this region
		// forwards can reach the old home after its hand-off began.
		err := r.forward(e.home, shardID, pending[C]{entityID, msg, start})
		stripe.RUnlock()
		return err
	}
	stripe.RUnlock()

	r.mu.Lock()
	defer r.mu.Unlock()
	return r.route(shardID, pending[C]{entityID, msg, start}, failFast)
}

func (e *shardEntry[C]) routable() bool {
	return e.home != "" && !e.handingOff && len(e.buffer) == 0
}

// route delivers or buffers; r.mu is held for writing.
func (r *Region[C]) route(shardID string, p pending[C], failFast bool) error {
	if r.stopped {
		return fmt.Errorf("%w: %s on %s", ErrRegionStopped, r.typ, r.s.self)
	}
	e := r.entry(shardID)
	if e.routable() {
		if e.local != nil {
			return e.local.deliver(p.entityID, p.msg, p.start, failFast, false)
		}
		return r.forward(e.home, shardID, p)
	}
	if r.buffered >= r.settings.BufferSize {
		return fmt.Errorf("%w: %s holds %d messages for shards without a known home", ErrBufferFull, r.typ, r.buffered)
	}
	e.buffer = append(e.buffer, p)
	r.buffered++
	// Asked once registered, as in Akka: a coordinator that has not seen
	// this region yet would place the shard without it.
	if e.home == "" && !e.handingOff && !e.requested && r.registered {
		e.requested = true
		r.toCoordinator(GetShardHome{Shard: shardID, Region: r.s.self})
	}
	return nil
}

func (r *Region[C]) entry(shardID string) *shardEntry[C] {
	e := r.table[shardID]
	if e == nil {
		e = &shardEntry[C]{}
		r.table[shardID] = e
	}
	return e
}

func (r *Region[C]) forward(home, shardID string, p pending[C]) error {
	err := r.s.cfg.Transport.Send(Address{Node: home, Type: r.typ}, p.deliver(shardID))
	if err != nil {
		return fmt.Errorf("sharding: forward to %s: %w", home, err)
	}
	return nil
}

func (r *Region[C]) toCoordinator(m Message) {
	var node string
	if p := r.coordinator.Load(); p != nil {
		node = *p
	}
	if node == "" {
		node = r.coordinatorNode()
	}
	if node == "" {
		return // retried on the next tick
	}
	if err := r.s.cfg.Transport.Send(Address{Node: node, Type: r.typ, Coordinator: true}, m); err != nil {
		r.s.log.Debug("sharding: coordinator unreachable; will retry", "type", r.typ, "err", err)
	}
}

func (r *Region[C]) toRegion(node string, m Message) {
	if err := r.s.cfg.Transport.Send(Address{Node: node, Type: r.typ}, m); err != nil {
		r.s.log.Debug("sharding: region unreachable", "type", r.typ, "node", node, "err", err)
	}
}

// receive handles protocol messages on the region's control entity.
func (r *Region[C]) receive(ctx entity.Context[Message], m Message) entity.Behavior[Message] {
	switch m := m.(type) {
	case retryTick:
		r.restartFailedCoordinator()
		r.retry()
		ctx.Timers().StartSingleTimer("retry", retryTick{}, r.tickInterval())
	case coordinatorMoved:
		r.mu.Lock()
		node := r.coordinatorNode()
		if p := r.coordinator.Load(); p == nil || *p != node {
			r.coordinator.Store(&node)
			r.registered = false
		}
		r.checkLeft() // a leaving region may have lost its last coordinator
		r.mu.Unlock()
		r.register()
	case RegisterAck:
		var ask []string
		r.mu.Lock()
		if r.fresh(m.Epoch) {
			r.coordinator.Store(&m.Coordinator)
			r.registered = true
			for id, e := range r.table {
				if len(e.buffer) > 0 && e.home == "" && !e.handingOff && !e.requested {
					e.requested = true
					ask = append(ask, id)
				}
			}
		}
		r.mu.Unlock()
		r.askHomes(ask)
	case ShardHomes:
		r.mu.Lock()
		fresh := r.fresh(m.Epoch)
		if fresh {
			for region, shards := range m.Homes {
				for _, s := range shards {
					r.setHome(s, region)
				}
			}
		}
		r.mu.Unlock()
		if fresh {
			// A new coordinator announces itself with ShardHomes. Not on
			// a stale one: it answers a Register that went to the old
			// coordinator's node (our membership lags), and registering
			// again at once would loop; the retry tick registers.
			r.register()
		}
	case ShardHome:
		r.mu.Lock()
		if r.fresh(m.Epoch) {
			r.setHome(m.Shard, m.Region)
		}
		r.mu.Unlock()
	case HostShard:
		r.mu.Lock()
		ok := r.fresh(m.Epoch)
		if ok {
			r.adoptBuffered(m.Shard, m.Buffered)
			r.setHome(m.Shard, r.s.self)
		}
		r.mu.Unlock()
		if ok {
			r.toCoordinator(ShardStarted{Shard: m.Shard, Region: r.s.self})
		}
	case BeginHandOff:
		r.mu.Lock()
		ok := r.fresh(m.Epoch)
		if ok {
			r.entry(m.Shard).handingOff = true
		}
		r.mu.Unlock()
		if ok {
			r.toCoordinator(BeginHandOffAck{Shard: m.Shard, Region: r.s.self})
		}
	case LeaveAck:
		r.mu.Lock()
		if r.fresh(m.Epoch) && r.leaving {
			r.leaveAcked = true
			r.checkLeft()
		}
		r.mu.Unlock()
	case HandOff:
		r.handOff(m)
	case shardHandedOff:
		r.finishHandOff(m)
	case GetRegionStats:
		entity.Reply(r.s.sys, m.ReplyTo, r.Stats())
	case Deliver:
		msg, ok := m.Msg.(C)
		if !ok && !m.Start {
			r.s.log.Error("sharding: message of the wrong type for entity type", "type", r.typ, "got", fmt.Sprintf("%T", m.Msg))
			break
		}
		r.mu.Lock()
		if err := r.route(m.Shard, pending[C]{m.EntityID, msg, m.Start}, false); err != nil {
			r.s.log.Warn("sharding: forwarded message not delivered", "type", r.typ, "entity", m.EntityID, "err", err)
		}
		r.mu.Unlock()
	}
	return entity.Same[Message]()
}

// fresh reports whether a coordinator message's epoch is current, and
// adopts a newer one. r.mu is held.
func (r *Region[C]) fresh(epoch uint64) bool {
	if epoch < r.epoch {
		r.s.log.Warn("sharding: ignoring message from a stale coordinator", "type", r.typ, "epoch", epoch, "current", r.epoch)
		return false
	}
	if epoch > r.epoch {
		// A new coordinator, even on the same node: it knows this region
		// only once it registers again.
		r.registered = false
	}
	r.epoch = epoch
	return true
}

func (r *Region[C]) register() {
	r.mu.RLock()
	done, leaving := r.registered || r.stopped, r.leaving
	r.mu.RUnlock()
	switch {
	case done:
		return
	case leaving:
		// A leaving region never registers: a Register that overtook its
		// RegionStopped would have shards allocated to a region that is
		// gone. A coordinator it has not told yet learns that it leaves.
		r.toCoordinator(GracefulShutdownReq{Region: r.s.self})
	case r.proxy:
		r.toCoordinator(RegisterProxy{Region: r.s.self})
	default:
		r.toCoordinator(Register{Region: r.s.self})
	}
}

func (r *Region[C]) tickInterval() time.Duration {
	d := r.settings.RetryInterval
	if idle := r.settings.PassivateIdleAfter; idle > 0 && idle/2 < d {
		d = idle / 2
	}
	return d
}

// retry re-registers, re-asks for the homes of shards with waiting
// messages, and ages entities for idle passivation.
func (r *Region[C]) retry() {
	r.register()
	r.mu.Lock()
	var ask []string
	for id, e := range r.table {
		// Also shards whose hand-off this region heard of: the coordinator
		// that began it may be gone, and its successor answers (one that
		// runs the hand-off ignores the question).
		if e.local == nil && len(e.buffer) > 0 && (e.home == "" || e.handingOff) {
			ask = append(ask, id)
		}
	}
	if !r.registered {
		ask = nil // asked when the RegisterAck comes
	}
	r.idleTick++
	tick := r.idleTick
	locals := make([]*shard[C], 0)
	for _, e := range r.table {
		if e.local != nil {
			locals = append(locals, e.local)
		}
	}
	r.mu.Unlock()
	r.askHomes(ask)
	if idle := r.settings.PassivateIdleAfter; idle > 0 {
		ticks := uint64((idle + r.tickInterval() - 1) / r.tickInterval())
		for _, sh := range locals {
			sh.passivateIdle(tick, ticks)
		}
	}
}

// askHomes asks the coordinator for the homes of shards, in shard order.
func (r *Region[C]) askHomes(shards []string) {
	slices.Sort(shards)
	for _, id := range shards {
		r.toCoordinator(GetShardHome{Shard: id, Region: r.s.self})
	}
}

// setHome records a shard's home, starts the shard when the home is this
// region, and releases the shard's buffered messages. r.mu is held.
func (r *Region[C]) setHome(shardID, home string) {
	e := r.entry(shardID)
	if e.handingOff && e.local != nil {
		return // our own hand-off is still running
	}
	e.home, e.requested, e.handingOff = home, false, false
	if home == "" { // stopped shard: ask again if anything waits for it
		if len(e.buffer) > 0 {
			e.requested = true
			r.toCoordinator(GetShardHome{Shard: shardID, Region: r.s.self})
		}
		return
	}
	if home == r.s.self && e.local == nil {
		if r.proxy || r.leaving || r.stopped {
			// Keep its messages until the coordinator hands the shard off
			// (a leaving region's shards all are) and homes it elsewhere;
			// routing to ourselves would only loop. Expected when the
			// allocation crossed our GracefulShutdownReq.
			r.s.log.Debug("sharding: not hosting a shard allocated to a leaving region", "type", r.typ, "shard", shardID)
			e.home, e.requested = "", true // the retry tick asks again
			return
		}
		e.local = newShard(r, shardID)
	}
	if home != r.s.self && e.local != nil {
		r.s.log.Error("sharding: shard moved without a hand-off", "type", r.typ, "shard", shardID, "to", home)
	}
	r.drain(shardID, e)
}

// drain delivers a shard's buffered messages in arrival order. r.mu is held.
func (r *Region[C]) drain(shardID string, e *shardEntry[C]) {
	buf := e.buffer
	e.buffer = nil
	r.buffered -= len(buf)
	for _, p := range buf {
		var err error
		if e.local != nil {
			err = e.local.deliver(p.entityID, p.msg, p.start, false, true) // accepted already: no buffer limit
		} else {
			err = r.forward(e.home, shardID, p)
		}
		if err != nil {
			r.s.log.Warn("sharding: buffered message not delivered", "type", r.typ, "entity", p.entityID, "err", err)
		}
	}
}

// shardHandedOff reports that a local shard's entities have all stopped;
// leftover are the messages it held for entities that were stopping.
type shardHandedOff struct {
	shard    string
	leftover []Deliver
}

func (shardHandedOff) protocolMessage() {}

func (r *Region[C]) handOff(m HandOff) {
	r.mu.Lock()
	if !r.fresh(m.Epoch) {
		r.mu.Unlock()
		return
	}
	e := r.entry(m.Shard)
	e.handingOff = true
	local := e.local
	var buffered []Deliver
	if local == nil {
		buffered = r.takeBuffer(m.Shard, nil)
	}
	r.mu.Unlock()
	if local == nil {
		r.toCoordinator(ShardStopped{Shard: m.Shard, Region: r.s.self, Buffered: buffered})
		return
	}
	local.handOff(func(leftover []pending[C]) {
		left := make([]Deliver, len(leftover))
		for i, p := range leftover {
			left[i] = p.deliver(m.Shard)
		}
		_ = r.ctl.Tell(shardHandedOff{shard: m.Shard, leftover: left})
	})
}

func (r *Region[C]) finishHandOff(m shardHandedOff) {
	r.mu.Lock()
	e := r.entry(m.shard)
	e.local, e.home = nil, ""
	// Messages the shard held for stopping entities arrived before
	// anything the region buffered since BeginHandOff; both go to the next
	// home through the coordinator, ahead of what other regions buffered.
	buffered := r.takeBuffer(m.shard, m.leftover)
	r.mu.Unlock()
	r.toCoordinator(ShardStopped{Shard: m.shard, Region: r.s.self, Buffered: buffered})
	// Only now may a leaving region report RegionStopped: sent first, it
	// would make the coordinator drop the hand-off, and the messages
	// ShardStopped carries with it.
	r.mu.Lock()
	r.checkLeft()
	r.mu.Unlock()
}

// deliver is p as the protocol carries it.
func (p pending[C]) deliver(shardID string) Deliver {
	d := Deliver{Shard: shardID, EntityID: p.entityID, Start: p.start}
	if !p.start {
		d.Msg = p.msg
	}
	return d
}

// takeBuffer empties a shard's region buffer into front, for ShardStopped. r.mu is held.
func (r *Region[C]) takeBuffer(shardID string, front []Deliver) []Deliver {
	e := r.entry(shardID)
	for _, p := range e.buffer {
		front = append(front, p.deliver(shardID))
	}
	r.buffered -= len(e.buffer)
	e.buffer = nil
	return front
}

// adoptBuffered puts the messages a shard's previous home held ahead of
// what this region buffered for it. They were accepted there, so the
// buffer limit does not apply. r.mu is held.
func (r *Region[C]) adoptBuffered(shardID string, ds []Deliver) {
	if len(ds) == 0 {
		return
	}
	front := make([]pending[C], 0, len(ds))
	for _, d := range ds {
		msg, ok := d.Msg.(C)
		if !ok && !d.Start {
			r.s.log.Error("sharding: handed-over message of the wrong type for entity type", "type", r.typ, "got", fmt.Sprintf("%T", d.Msg))
			continue
		}
		front = append(front, pending[C]{entityID: d.EntityID, msg: msg, start: d.Start})
	}
	e := r.entry(shardID)
	e.buffer = append(front, e.buffer...)
	r.buffered += len(front)
}

// checkLeft signals a leaving region's shutdown once it hosts nothing. r.mu is held.
func (r *Region[C]) checkLeft() {
	if !r.leaving || r.leftAll == nil {
		return
	}
	// Without a coordinator in our view (the last node with the role is
	// leaving) no allocation can be on its way, nor can an ack come.
	if !r.leaveAcked && r.coordinatorNode() != "" {
		return
	}
	for _, e := range r.table {
		if e.local != nil {
			return
		}
	}
	close(r.leftAll)
	r.leftAll = nil
}

func (r *Region[C]) shutdown(ctx context.Context) error {
	r.mu.Lock()
	r.leaving = true
	// Nothing is ever allocated to a proxy: no LeaveAck to wait for, which
	// no coordinator may be there to send.
	r.leaveAcked = r.leaveAcked || r.proxy
	left := make(chan struct{})
	r.leftAll = left
	r.checkLeft()
	r.mu.Unlock()
	r.toCoordinator(GracefulShutdownReq{Region: r.s.self})
	var err error
	select {
	case <-left:
	case <-ctx.Done():
		err = fmt.Errorf("hand-off incomplete: %w", ctx.Err())
	}
	r.toCoordinator(RegionStopped{Region: r.s.self})
	r.mu.Lock()
	r.stopped = true
	dropped := r.buffered
	r.mu.Unlock()
	if dropped > 0 {
		r.s.log.Warn("sharding: region stopped with undelivered buffered messages", "type", r.typ, "count", dropped)
	}
	r.unlisten()
	r.stopCoordinator()
	if err != nil {
		// Out of time: what still runs stops now, as in a crash, rather
		// than outlive its region.
		for _, sh := range r.localShards() {
			sh.terminate()
		}
	}
	r.ctl.StopNow()
	<-r.ctl.Done()
	return err
}

// StopShards hands the given shards off without moving them: their
// entities get the stop message, and the shards start again on their next
// message. It returns once the request is sent.
func (r *Region[C]) StopShards(shards ...string) {
	r.toCoordinator(StopShards{Shards: shards})
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
	for id, e := range r.table {
		if e.local != nil {
			locals[id] = e.local
		}
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
	Regions map[string]map[string]int
	// Failed lists, sorted, the regions that did not answer before the
	// context ended or could not be reached.
	Failed []string
}

// ClusterStats asks every member that may host this entity type for its
// entities per shard (Akka's GetClusterShardingStats). It returns when all
// have answered or ctx ends; give ctx a deadline.
func (r *Region[C]) ClusterStats(ctx context.Context) ShardingStats {
	var nodes []string
	for _, m := range r.s.cfg.Membership.Members() {
		if m.HasRole(r.ent.Role) {
			nodes = append(nodes, m.Node)
		}
	}
	type answer struct {
		node  string
		stats map[string]int
		err   error
	}
	answers := make(chan answer, len(nodes))
	for _, node := range nodes {
		go func() {
			ref := transportRef{t: r.s.cfg.Transport, to: Address{Node: node, Type: r.typ}, sys: r.s.sys}
			st, err := entity.Ask(ctx, entity.Ref[Message](ref), func(to entity.ReplyTo[map[string]int]) Message {
				return GetRegionStats{ReplyTo: to}
			})
			answers <- answer{node, st, err}
		}()
	}
	out := ShardingStats{Regions: make(map[string]map[string]int, len(nodes))}
	for range nodes {
		a := <-answers
		if a.err != nil {
			out.Failed = append(out.Failed, a.node)
			continue
		}
		out.Regions[a.node] = a.stats
	}
	slices.Sort(out.Failed)
	return out
}

// transportRef lets entity.Ask address a region through the transport.
type transportRef struct {
	t   Transport
	to  Address
	sys *entity.System
}

func (t transportRef) Tell(m Message) error   { return t.t.Send(t.to, m) }
func (t transportRef) System() *entity.System { return t.sys }

// Homes reports every shard home this region knows: shard → node.
func (r *Region[C]) Homes() map[string]string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make(map[string]string)
	for id, e := range r.table {
		if e.home != "" {
			out[id] = e.home
		}
	}
	return out
}

// hostCoordinatorIfOldest starts this node's coordinator when the node is
// the oldest with the role, and stops it when it no longer is.
func (r *Region[C]) hostCoordinatorIfOldest() {
	r.coordinated.Lock()
	defer r.coordinated.Unlock()
	r.mu.RLock()
	stopping := r.stopped
	r.mu.RUnlock()
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
	r.mu.RLock()
	stopping := r.stopped
	r.mu.RUnlock()
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

// hostedShards lists local shards, sorted; for tests.
func (r *Region[C]) hostedShards() []string {
	return slices.Sorted(maps.Keys(r.State().Shards))
}
