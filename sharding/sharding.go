// Package sharding spreads the entities of a type over the nodes of a
// cluster and routes each message to the one incarnation of its entity.
//
// Per entity type, every node runs a Region (or a routing-only proxy where
// the node lacks the type's role). A region groups entities into shards;
// one Coordinator, on the oldest node, decides which region hosts each
// shard, moves shards when regions come and go, and pushes every shard
// home to every region, so a region that loses the coordinator still
// routes every known shard. Regions and coordinators talk only through
// protocol messages over the node's cluster.Transport; the allocation decisions are the pure
// functions of package allocation.
//
// A shard starts an entity on its first message, passivates it after idle
// time or on request (buffering its messages meanwhile and handing them to
// the next incarnation), hands it off through its stop message when the
// shard moves (delivering the messages buffered meanwhile at the new home,
// in order), and can remember its entities so that they restart wherever
// the shard starts next.
package sharding

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/cluster/lease"
	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/internal/metrics"
	"github.com/shoal-dev/shoal/internal/runtime"
	"github.com/shoal-dev/shoal/sharding/allocation"
	"github.com/shoal-dev/shoal/sharding/internal/bridge"
	"github.com/shoal-dev/shoal/sharding/internal/remote"
)

var (
	// ErrBufferFull is returned by Tell when the region's buffer for
	// messages awaiting a shard home (or a hand-off) is full, or the
	// shard's buffer for an entity that is stopping or backing off is
	// (see Settings.HeldCapacity).
	// It is runtime.ErrBufferFull, so that an ask it fails on another node
	// matches it too.
	ErrBufferFull = runtime.ErrBufferFull
	// ErrUnknownEntityType is returned when no region was started for an entity type.
	ErrUnknownEntityType = errors.New("sharding: unknown entity type")
	// ErrRegionStopped is returned by Tell after the region shut down.
	// It is runtime.ErrRegionStopped.
	ErrRegionStopped = runtime.ErrRegionStopped
	// ErrInvalidEntityID is returned for an empty entity id.
	ErrInvalidEntityID = errors.New("sharding: invalid entity id")
)

// Config configures sharding on one node. The zero value runs a single node.
type Config struct {
	// Transport carries protocol messages and replies to asks between
	// this node incarnation and the others: its Self must be the
	// membership's, its handler must hand what it receives to
	// Sharding.Receive, and its codec must be the System's
	// (entity.Config.Codec), in which New registers the types of
	// sharding's wire. Messages to this node itself do not take it.
	// Default: a cluster/inproc transport of this node alone.
	Transport cluster.Transport
	// Membership is this node's view of the cluster. Default: a
	// cluster.LocalMembership that holds this node alone, Up, as the
	// incarnation of the System (its NodeID and Incarnation).
	Membership cluster.Membership
	// Roles are this node's roles while the membership's view does not
	// hold it yet (a node registers its entity types before it joins);
	// once it does, the view's.
	Roles []string
	// CoordinatorStore keeps allocations. Default: in memory.
	CoordinatorStore CoordinatorStore
	// RememberStore records remembered entities. Default: in memory.
	RememberStore RememberStore
	// CoordinatorLease is how a coordinator holds its type's lease in
	// CoordinatorStore: it acts only while it holds it, renews it every
	// RenewEvery and stops at once when it cannot. Every node of a cluster
	// must use the same. Default lease.DefaultSettings().Coordinator.
	CoordinatorLease lease.Timing
	// NodeLeases, when set, makes the coordinator down the nodes that
	// membership reports unreachable or Down, and reallocate their shards
	// only once their node lease has expired (docs/DESIGN.md, "Leases and
	// self-fencing"). Without it (one process, or members that cannot outlive
	// their membership), a region that leaves the view or is Down gives its
	// shards up at once.
	NodeLeases NodeLeases
	// OnLeaveRequest, when set, runs when another node asks this one to
	// leave (RequestLeave); it must not block: start the graceful
	// shutdown on a goroutine of its own.
	OnLeaveRequest func()
	// Logger defaults to the System's. Every line names the node, and the
	// entity type, shard and entity it concerns (entity_type, shard_id,
	// entity_id).
	Logger *slog.Logger
	// Metrics, when set, receives the sharding layer's Prometheus
	// collectors (passivations, restarts, back-offs, hand-offs, rebalances,
	// region buffers, entities per shard, coordinator lease renewals).
	// Default nil: none.
	Metrics prometheus.Registerer
	// DowningStableAfter, when set, is the default of
	// Settings.DowningStableAfter for this node's entity types, and
	// DowningSpread how long the membership may show only part of the
	// other side of a partition: Init logs a warning for a type whose
	// Settings.DowningStableAfter is set but not longer (see there).
	// Package node derives both from memberlist's timing.
	DowningStableAfter, DowningSpread time.Duration
}

// Sharding is the sharding layer of one node.
type Sharding struct {
	sys  *entity.System
	cfg  Config
	self cluster.UniqueAddress
	log  *slog.Logger
	// view is the membership's latest view; follow hands its changes to
	// the regions.
	view     atomic.Pointer[cluster.View]
	follower struct {
		mu                      sync.Mutex
		idle                    *sync.Cond // running became false
		running, again, stopped bool
	}
	// remote is the node's dispatch over Config.Transport: what the
	// regions and coordinators send and listen through.
	remote *remote.Transport
	m      *metrics.Sharding // nil when Config.Metrics is
	// leaseM counts the renewals of the coordinator leases this node holds.
	leaseM *metrics.Lease

	mu      sync.Mutex
	regions map[string]regionRuntime
	// hosts host each type's coordinator while this node is the oldest
	// with its role, beside its region (see coordinatorHost).
	hosts   map[string]*coordinatorHost
	stopped bool
	unsub   func() // stops following the membership
	unleave func() // stops listening for LeaveRequest

	// shardingLink hands package bridge what reminders need (bridge.go).
	shardingLink
}

// regionRuntime is what the node needs of a Region, whatever its command type.
type regionRuntime interface {
	typeName() string
	typeState(ctx context.Context) TypeState
	rebalance(shard string) error
	metricsReport() metrics.RegionReport
	membershipChanged()
	shutdown(ctx context.Context) error
	goneCh() <-chan struct{}
	terminate()
	bridged() bridge.Region
}

// New starts the sharding layer of the node running sys.
func New(sys *entity.System, cfg Config) (*Sharding, error) {
	if cfg.Membership == nil {
		self := cluster.UniqueAddress{Node: sys.NodeID(), Incarnation: sys.Incarnation()}
		view, err := cluster.NewView(cluster.Member{Address: self, Roles: cfg.Roles, Status: cluster.Up, JoinOrder: 1})
		if err != nil {
			return nil, fmt.Errorf("sharding: %w", err)
		}
		cfg.Membership = cluster.NewLocalMembership(self, view)
	}
	if cfg.CoordinatorStore == nil {
		cfg.CoordinatorStore = NewMemoryCoordinatorStore()
	}
	if cfg.RememberStore == nil {
		cfg.RememberStore = NewMemoryRememberStore()
	}
	if cfg.CoordinatorLease == (lease.Timing{}) {
		cfg.CoordinatorLease = lease.DefaultSettings().Coordinator
	}
	if err := cfg.CoordinatorLease.Validate(); err != nil {
		return nil, fmt.Errorf("sharding: CoordinatorLease: %w", err)
	}
	if cfg.Logger == nil {
		cfg.Logger = sys.Logger()
	}
	s := &Sharding{sys: sys, cfg: cfg, self: cfg.Membership.Self(), regions: make(map[string]regionRuntime), hosts: make(map[string]*coordinatorHost)}
	s.shardingLink = bridge.LinkSharding(shardingBridge{s})
	if s.self.Node == "" {
		return nil, errors.New("sharding: membership has no self node")
	}
	s.log = cfg.Logger
	if cfg.Logger != sys.Logger() { // the System's names the node already
		s.log = cfg.Logger.With("node", s.self.String())
	}
	s.m = metrics.NewSharding(cfg.Metrics, s.metricsReport)
	s.leaseM = metrics.NewLease(cfg.Metrics, "coordinator")
	if err := s.attachTransport(); err != nil {
		return nil, err
	}
	var err error
	if s.unleave, err = s.listenForLeave(); err != nil {
		return nil, err
	}
	s.unsub = s.follow()
	return s, nil
}

// follow keeps s.view the membership's latest view, and tells the
// regions of each change on a goroutine of its own, started for the
// change and gone once the regions are up to date: a membership's
// subscribers must not block, and the regions take locks that a region's
// shutdown may hold. Regions may see several changes as one; they read
// the latest view. The returned function stops following; no region is
// told of a change after it returns.
func (s *Sharding) follow() (stop func()) {
	f := &s.follower
	f.idle = sync.NewCond(&f.mu)
	drain := func() {
		for {
			s.membershipChanged()
			f.mu.Lock()
			if f.again && !f.stopped {
				f.again = false
				f.mu.Unlock()
				continue
			}
			f.running = false
			f.idle.Broadcast()
			f.mu.Unlock()
			return
		}
	}
	current, cancel := s.cfg.Membership.Subscribe(func(c cluster.Change) {
		v := c.To
		s.view.Store(&v)
		f.mu.Lock()
		defer f.mu.Unlock()
		switch {
		case f.stopped:
		case f.running:
			f.again = true // the running drain reads this view
		default:
			f.running = true
			go drain()
		}
	})
	s.view.Store(&current)
	return func() {
		cancel()
		f.mu.Lock()
		f.stopped = true
		f.mu.Unlock()
		s.settle()
	}
}

// settle waits until the regions have been told of every membership
// change so far. The in-process cluster waits so on every node when one
// joins, as if the membership told all of them at once.
func (s *Sharding) settle() {
	f := &s.follower
	f.mu.Lock()
	defer f.mu.Unlock()
	for f.running {
		f.idle.Wait()
	}
}

// members is the latest view's members, Down ones included.
func (s *Sharding) members() []cluster.Member { return s.view.Load().Members() }

// selfMember is this node as the latest view holds it; before the view
// holds it, a Joining member with Config.Roles.
func (s *Sharding) selfMember() cluster.Member {
	if m, ok := s.view.Load().Member(s.self); ok {
		return m
	}
	return cluster.Member{Address: s.self, Roles: slices.Clone(s.cfg.Roles), Status: cluster.Joining}
}

// Node is this node's incarnation in the membership.
func (s *Sharding) Node() cluster.UniqueAddress { return s.self }

// System is the entity runtime of this node.
func (s *Sharding) System() *entity.System { return s.sys }

// metricsReport lists the regions' buffers and shard sizes for a scrape.
func (s *Sharding) metricsReport() []metrics.RegionReport {
	s.mu.Lock()
	regions := slices.Collect(maps.Values(s.regions))
	s.mu.Unlock()
	out := make([]metrics.RegionReport, 0, len(regions))
	for _, r := range regions {
		out = append(out, r.metricsReport())
	}
	return out
}

func (s *Sharding) membershipChanged() {
	s.mu.Lock()
	regions := make([]regionRuntime, 0, len(s.regions))
	hosts := make([]*coordinatorHost, 0, len(s.regions))
	for typ, r := range s.regions {
		regions, hosts = append(regions, r), append(hosts, s.hosts[typ])
	}
	s.mu.Unlock()
	for i, r := range regions {
		if h := hosts[i]; h != nil {
			h.membershipChanged() // the coordinator first: the region registers with it
		}
		r.membershipChanged()
	}
}

// Entity describes an entity type to shard.
type Entity[C any] struct {
	Key entity.TypeKey[C]
	// Create builds an incarnation of an entity.
	Create func(ctx entity.Context[C]) entity.Behavior[C]
	// StopMessage is sent to an entity to passivate it or hand it off; the
	// entity stops when it is ready. Without one (the zero value of C is
	// nil) the entity is stopped at once.
	StopMessage C
	// Role restricts hosting to members with this role; elsewhere the
	// region is a proxy. Empty: every member.
	Role     string
	Settings Settings
}

// Settings tune one entity type. Zero fields take the documented defaults.
type Settings struct {
	// NumberOfShards for the default shard id function. Default 1000.
	NumberOfShards int
	// ShardID maps an entity id to its shard. Default: a stable FNV-1a
	// hash of the id modulo NumberOfShards.
	ShardID func(entityID string) string
	// BufferSize bounds the messages a region holds while shard homes are
	// unknown or hand-offs run. Default 100 000.
	BufferSize int
	// PassivateIdleAfter stops entities idle this long (only messages
	// through sharding count). Default 120 s; negative turns it off. Off
	// when RememberEntities is on.
	PassivateIdleAfter time.Duration
	// StopTimeout bounds how long a passivating entity may take to stop
	// before it is stopped by force. Default 30 s.
	StopTimeout time.Duration
	// HandOffTimeout bounds how long a shard's entities take to stop in a
	// hand-off; entities still running then are stopped by force. The wait
	// for the regions' fences before it is not bounded (docs/DESIGN.md,
	// "Fence on the data link"). Default 60 s.
	HandOffTimeout time.Duration
	// RebalanceInterval is how often the coordinator rebalances. Default 10 s.
	RebalanceInterval time.Duration
	// RetryInterval is how often a region re-sends unanswered requests. Default 2 s.
	RetryInterval time.Duration
	// MinMembers is how many hosting regions must register before the
	// coordinator allocates. Default 1.
	MinMembers int
	// RememberEntities restarts a shard's entities wherever the shard starts.
	RememberEntities bool
	// DowningStableAfter is how long the coordinator's view of unreachable
	// members must stay unchanged before it downs them, or stands down on
	// the minority side of a partition (keep-majority, Pekko's
	// stable-after). It must be longer than the membership may take to
	// report every member of a cut unreachable after the first: shorter,
	// a coordinator on the minority side that has seen only part of the
	// other side may count itself the majority and down what it saw.
	// With memberlist that spread grows with the cluster and its timing
	// (memberlist.Timing.CutSpread: 13 s for 3 nodes on LAN defaults, 65 s
	// for 5, in the worst case). Default Config.DowningStableAfter, which
	// package node derives from memberlist's timing; else 10 s.
	DowningStableAfter time.Duration
	// RecoveryRate limits how many remembered entities a starting shard
	// restarts per RecoveryInterval; 0 restarts all at once.
	RecoveryRate     int
	RecoveryInterval time.Duration
	// RestartBackoff bounds the exponential back-off before restarting an
	// entity that failed. Defaults 200 ms to 10 s.
	RestartBackoffMin, RestartBackoffMax time.Duration
	// StoreTimeout bounds each call to the coordinator and remember-entities
	// stores, so that a hung database fails calls (which are retried or
	// stop the coordinator) instead of blocking them. Default 5 s.
	StoreTimeout time.Duration
	// Strategy allocates and rebalances shards. Default: least-shard.
	Strategy allocation.Strategy
	// StashCapacity, MailboxCapacity and HeldCapacity are passed to each
	// entity's Props (see entity.Props for their defaults). The smaller of
	// HeldCapacity and a non-zero MailboxCapacity also bounds the messages
	// a shard holds for one entity while it passivates, hands off or backs
	// off after a failure: what its next incarnation's mailbox, empty and
	// perhaps held while recovering, is sure to take, so the restart hands
	// them over whole. Past it Tell fails with ErrBufferFull.
	StashCapacity, MailboxCapacity, HeldCapacity int
}

func (st Settings) withDefaults() Settings {
	if st.NumberOfShards <= 0 {
		st.NumberOfShards = 1000
	}
	if st.ShardID == nil {
		st.ShardID = hashShardID(st.NumberOfShards)
	}
	if st.BufferSize <= 0 {
		st.BufferSize = 100_000
	}
	if st.PassivateIdleAfter == 0 {
		st.PassivateIdleAfter = 120 * time.Second
	}
	if st.RememberEntities {
		st.PassivateIdleAfter = -1
	}
	if st.StopTimeout <= 0 {
		st.StopTimeout = 30 * time.Second
	}
	if st.HandOffTimeout <= 0 {
		st.HandOffTimeout = 60 * time.Second
	}
	if st.RebalanceInterval <= 0 {
		st.RebalanceInterval = 10 * time.Second
	}
	if st.RetryInterval <= 0 {
		st.RetryInterval = 2 * time.Second
	}
	if st.DowningStableAfter <= 0 {
		st.DowningStableAfter = 10 * time.Second
	}
	if st.RecoveryInterval <= 0 {
		st.RecoveryInterval = 100 * time.Millisecond
	}
	if st.RestartBackoffMin <= 0 {
		st.RestartBackoffMin = 200 * time.Millisecond
	}
	if st.RestartBackoffMax <= 0 {
		st.RestartBackoffMax = 10 * time.Second
	}
	if st.StoreTimeout <= 0 {
		st.StoreTimeout = 5 * time.Second
	}
	if st.Strategy == nil {
		st.Strategy = allocation.NewLeastShard(allocation.DefaultLeastShardConfig())
	}
	return st
}

// hashShardID is the default shard id function: FNV-1a (32 bit) of the
// entity id modulo n, in decimal. Up to 100 000 shards it allocates
// nothing: the names are made once.
func hashShardID(n int) func(string) string {
	hash := func(id string) uint32 { return fnv32a(id) % uint32(n) }
	if n > 100_000 {
		return func(id string) string { return strconv.FormatUint(uint64(hash(id)), 10) }
	}
	names := make([]string, n)
	for i := range names {
		names[i] = strconv.Itoa(i)
	}
	return func(id string) string { return names[hash(id)] }
}

// fnv32a is FNV-1a (32 bit) of s, without hash/fnv's allocations.
func fnv32a(s string) uint32 {
	const offset32, prime32 = 2166136261, 16777619
	h := uint32(offset32)
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= prime32
	}
	return h
}

// Init starts the region of entity type e on this node (a proxy when the
// node lacks e.Role) and returns it. Calling Init twice for one type is an error.
func Init[C any](s *Sharding, e Entity[C]) (*Region[C], error) {
	if e.Key.Name() == "" || e.Create == nil {
		return nil, errors.New("sharding: Entity needs a Key and a Create function")
	}
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return nil, ErrRegionStopped
	}
	if _, dup := s.regions[e.Key.Name()]; dup {
		s.mu.Unlock()
		return nil, fmt.Errorf("sharding: entity type %q already started", e.Key.Name())
	}
	r := newRegion(s, e)
	h := newCoordinatorHost(s, r.typ, e.Role, r.settings, r.tickInterval())
	// The region listens before the coordinator may start, and registers
	// once it may have.
	if err := r.listen(); err != nil {
		s.mu.Unlock()
		return nil, err
	}
	h.run()
	if err := r.run(); err != nil {
		s.mu.Unlock()
		h.terminate()
		return nil, err
	}
	s.regions[r.typ], s.hosts[r.typ] = r, h
	s.mu.Unlock()
	return r, nil
}

// Lookup returns the region started for key.
func Lookup[C any](s *Sharding, key entity.TypeKey[C]) (*Region[C], error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.regions[key.Name()].(*Region[C])
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownEntityType, key.Name())
	}
	return r, nil
}

// EntityRefFor addresses entity id of the type key through its region on s.
func EntityRefFor[C any](s *Sharding, key entity.TypeKey[C], id string) (EntityRef[C], error) {
	r, err := Lookup(s, key)
	if err != nil {
		return EntityRef[C]{}, err
	}
	return r.EntityRefFor(id), nil
}

// Shutdown leaves gracefully: each region hands its shards off to other
// regions (entities get their stop message) and then stops; a coordinator
// on this node goes last, so other regions never lose shard homes and the
// coordinator at once. It returns when every region has stopped or ctx
// ends. Past ctx's deadline, entities still running are stopped at once;
// the regions report themselves gone, and the node leaves the membership,
// only once they have stopped, which for an entity stuck in its handler is
// after Shutdown returns: until then no other node starts their shards.
func (s *Sharding) Shutdown(ctx context.Context) error {
	regions, hosts, ok := s.stop()
	if !ok {
		return nil
	}
	var errs []error
	for _, r := range regions {
		if err := r.shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("sharding: shut down %s: %w", r.typeName(), err))
		}
		hosts[r.typeName()].stop() // the type's coordinator goes last
	}
	s.unsub()
	s.unleave()
	leave := func() {
		for _, r := range regions {
			<-r.goneCh()
		}
		if l, ok := s.cfg.Membership.(interface{ Leave() }); ok {
			l.Leave()
		}
	}
	if len(errs) == 0 {
		leave() // every region left: all are gone already
	} else {
		go leave()
	}
	return errors.Join(errs...)
}

// stop marks the node stopped and returns its regions and coordinator
// hosts; ok is false when it was stopped already.
func (s *Sharding) stop() (regions []regionRuntime, hosts map[string]*coordinatorHost, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return nil, nil, false
	}
	s.stopped = true
	return slices.Collect(maps.Values(s.regions)), maps.Clone(s.hosts), true
}

// EntityRef addresses one sharded entity. It is a small value: make one
// per use or keep it, as convenient.
type EntityRef[C any] struct {
	region *Region[C]
	id     string
	hash   uint64 // of id on the region's fast path, taken once per ref
}

// EntityID is the addressed entity's id.
func (r EntityRef[C]) EntityID() string { return r.id }

// Tell implements entity.Ref: it routes msg to the entity wherever its shard
// lives, starting it if needed. It fails with ErrBufferFull when the
// region cannot hold the message while the shard's home is unknown, or the
// shard cannot hold it for an entity that is stopping or backing off, and
// with ErrRegionStopped after shutdown.
func (r EntityRef[C]) Tell(msg C) error {
	if r.region == nil {
		return fmt.Errorf("%w: zero EntityRef", ErrUnknownEntityType)
	}
	return r.region.tell(r.id, r.hash, msg, false, false, nil)
}

// TellAsk implements the runtime's AskRef, so that entity.Ask and entity.AskFrom
// fail fast: when the entity is backing off after a failure on this node,
// the ask is refused at once with an error matching ErrEntityUnavailable
// (an *UnavailableError, with the time left before the restart) and the
// message is not kept, where Tell would hold it for the restarted entity.
// Where the entity's shard lives on another node, the message goes there
// marked as an ask, and that node refuses it likewise: the ask fails at
// once with an *entity.AskFailedError that matches ErrEntityUnavailable
// (and the failure's cause, eventsourced.ErrPersistFailed say). The trace
// context of ctx travels with msg, as with TellContext.
func (r EntityRef[C]) TellAsk(ctx context.Context, msg C) error {
	if r.region == nil {
		return fmt.Errorf("%w: zero EntityRef", ErrUnknownEntityType)
	}
	return r.region.tell(r.id, r.hash, msg, false, true, runtime.SpanOf(ctx))
}

// EntityType is the name of the addressed entity's type.
func (r EntityRef[C]) EntityType() string { return r.region.typ }

// System implements entity.Ref.
func (r EntityRef[C]) System() *entity.System { return r.region.s.sys }

// Envelope carries a message with the id of its entity, for code that
// routes by data rather than holding an EntityRef.
type Envelope[C any] struct {
	EntityID string
	Message  C
}

// Tell routes env.Message to entity env.EntityID.
func (r *Region[C]) Tell(env Envelope[C]) error {
	return r.tell(env.EntityID, r.fast.entities.hash(env.EntityID), env.Message, false, false, nil)
}

// StartEntity starts entity id, in its shard wherever that lives, without
// a message; an entity that runs already is left alone.
func (r *Region[C]) StartEntity(id string) error {
	var none C
	return r.tell(id, 0, none, true, false, nil)
}
