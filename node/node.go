// Package node starts a Shoal cluster node in one call: a pgx pool (the
// journal, the snapshot store, sharding's coordinator and
// remember-entities stores and the node lease all live in Postgres, or,
// in memory mode, in MemoryStores shared by the nodes of one process),
// membership on memberlist, the framed TCP transport (optionally under
// mutual TLS), and sharding over them.
//
// It is a top-level package, not one under cluster/, because it sits above
// everything it wires: cluster/ is below sharding and must not import it,
// while a node needs both, and persistence besides. Nothing imports node;
// applications do.
//
// Life cycle: Start acquires the node lease, listens, starts sharding,
// registers the entity types of Config.RegisterEntities (sharding.Init)
// and joins the seeds (or bootstraps a new cluster when there are none).
// Shutdown leaves gracefully: sharding hands every shard off, then the
// node lease is released, then the node leaves the membership, then
// everything is closed. Ready and Alive answer readiness and liveness
// probes.
//
// Self-fencing and downing (docs/DESIGN.md, "Cluster and leases"): when the
// node lease cannot be renewed in time (the node is cut off from Postgres),
// or the store refuses it (the node was downed), the node stops every entity
// at once without stop messages and stops gossiping, as a crash would; Alive
// then reports ErrFenced and the process should be restarted (it comes back
// as a new incarnation). The coordinator of each entity type downs the
// members that memberlist reports failed (unreachable after its suspicion
// timeout) or Down, and moves their shards once their node lease has
// expired in the database's time; it acts only while it holds its type's
// coordinator lease (Config.Leases.Coordinator). It downs only while its
// side of a partition is the majority (sharding's downing machine) of the
// members it saw Up, each counted until its node lease ended in the store
// (memberlist's own Down verdicts do not shrink the count); on a tie the
// side of the oldest wins. It decides only once its view of the other
// side has held longer than memberlist may take to show a whole cut
// (Config.ClusterSize). On the minority side it downs nobody and
// releases the coordinator lease, so that the majority's oldest member
// takes it and downs the minority, whose nodes then fence themselves.
//
// Failover and its price. The node lease is what a crash costs: with the
// default leases (lease.DefaultSettings: 2 s, renewed every 500 ms, fenced
// 500 ms before its end) a crashed node's lease expires in the database at
// most 2 s after its last renewal. Nothing waits for memberlist (about
// 5.5 s to declare a crash with its LAN timing): every coordinator polls
// the leases of the members it counts every quarter lease and takes an
// expired one as Down, and sharding's view shows a member whose lease
// expired unreachable, asking the store again just after the first live
// lease ends (leaseView), so the coordinator's place moves off a crashed
// oldest node as its lease ends. BenchmarkKillFailover measured every
// shard of a killed node serving again through both survivors 2.03 s after
// the kill (2.08 s when it was the oldest and hosted the coordinator;
// 3.06 s before the view asked at the lease's end), against 15.2 s
// (16.2 s) with the former 15 s lease (medians of 5, 2-core host at load
// 24; see docs/DESIGN.md, "Leases and self-fencing"). The price: a node that cannot
// complete a renewal for 1.5 s fences itself and restarts as a new
// incarnation. Renewals ride a database connection and a goroutine of
// their own, so journal traffic does not delay them; what remains is a
// database that stalls, or a host that does not schedule the node, for
// that long. Beside a busy loop on both cores of a 2-core host already
// loaded 15-fold, scripts/false-fence.sh saw a healthy node under
// journal traffic fence itself in 0 of 10 runs of 20 s (mean renewal
// 35-65 ms); renewing every third of the lease instead of every quarter,
// in 1 of 10. A deployment whose hosts stall for seconds
// (swapping, long GC pauses, a noisy neighbour) lengthens Config.Leases,
// and failover with it.
//
// A node that no longer holds its lease by its own clock, but has not
// fenced yet (the usual case right after a pause past the lease: its
// goroutines resume in any order), neither writes an event (the journal
// checks the lease before sending, and in the statement itself, in the
// database's time: journalpg.Fence) nor sends or handles a message.
package node

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/cluster/lease"
	leasepg "github.com/shoal-dev/shoal/cluster/lease/postgres"
	"github.com/shoal-dev/shoal/cluster/memberlist"
	"github.com/shoal-dev/shoal/cluster/tcp"
	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/internal/metrics"
	"github.com/shoal-dev/shoal/journal"
	journalpg "github.com/shoal-dev/shoal/journal/postgres"
	"github.com/shoal-dev/shoal/migrations"
	"github.com/shoal-dev/shoal/sharding"
	shardingpg "github.com/shoal-dev/shoal/sharding/postgres"
	"github.com/shoal-dev/shoal/sharding/reminders"
	"github.com/shoal-dev/shoal/snapshot"
	snapshotpg "github.com/shoal-dev/shoal/snapshot/postgres"
	"github.com/shoal-dev/shoal/timers/reminder"
	reminderpg "github.com/shoal-dev/shoal/timers/reminder/postgres"
)

var (
	// ErrNotJoined: the node is not (yet) an Up member in its own view.
	ErrNotJoined = errors.New("node: not joined")
	// ErrShuttingDown: Shutdown or Kill has begun.
	ErrShuttingDown = errors.New("node: shutting down")
	// ErrFenced: the node lease was lost and the node fenced itself. It is
	// lease.ErrFenced.
	ErrFenced = lease.ErrFenced
	// ErrInvalidConfig: a Config Start cannot use. It is
	// cluster.ErrInvalidConfig.
	ErrInvalidConfig = cluster.ErrInvalidConfig
)

// Config configures a node. NodeID and a database (PostgresDSN or Pool)
// or Memory are required; every other zero field takes the default
// DefaultConfig documents.
type Config struct {
	// NodeID names the node across restarts; no '/' (memberlist) and
	// unique in the cluster.
	NodeID string
	// Incarnation tells this run of NodeID from earlier and later ones;
	// it must grow with every restart. Default: the wall clock at Start,
	// in nanoseconds (the node lease refuses an incarnation older than
	// one the database has seen).
	Incarnation uint64
	// Roles this node carries; entity types with a Role are hosted only
	// on nodes with it (proxies elsewhere).
	Roles []string
	// AppVersion is the application version, for rolling updates.
	AppVersion string
	// ClusterName isolates clusters: gossip and transport connections of
	// a node with another name are refused. Default "shoal".
	ClusterName string

	// Seeds are gossip addresses (host:port) of members to join; empty
	// bootstraps a new cluster with this node as its first member.
	Seeds []string
	// RejoinSeeds, for a node that bootstraps (no Seeds), are gossip
	// addresses it keeps trying to join in the background, every
	// Timing.ReconnectInterval, until one answers. A node started while
	// cut off from its cluster, that bootstrapped a cluster of its own
	// because no seed answered, so merges back once the cut heals:
	// nothing else ever contacts it. Default: none.
	RejoinSeeds []string
	// JoinTimeout is how long Start keeps trying Seeds, with exponential
	// back-off (JoinRetryMin doubling up to JoinRetryMax), while none
	// answers: after a restart of several nodes the seeds may be starting
	// too, and a node joins through whichever member is live first
	// (docs/DESIGN.md, Cluster and leases). Zero tries the seeds once, as
	// a node that bootstraps when none answers wants; the context given to
	// Start bounds the retries too.
	JoinTimeout time.Duration
	// PruneNodeLeasesAfter is how long after its expiry the node lease of
	// a dead incarnation stays in the store (and the admin API): every
	// node prunes older ones once a minute (lease.NodePruner). Default
	// 10 min; negative keeps them.
	PruneNodeLeasesAfter time.Duration
	// JoinRetryMin and JoinRetryMax bound the pause between rounds of
	// JoinTimeout's retries. Defaults 200 ms and 5 s.
	JoinRetryMin, JoinRetryMax time.Duration
	// GossipAddr is where memberlist listens, UDP and TCP. Default
	// 127.0.0.1:0 (a free port; read it back with Node.GossipAddr).
	GossipAddr string
	// GossipAdvertise is the address peers are told to gossip with, when
	// it is not GossipAddr (a wildcard bind, NAT, containers).
	GossipAdvertise string
	// SecretKey encrypts gossip (16, 24 or 32 bytes); a node without it
	// cannot join. Default: none.
	SecretKey []byte
	// Timing is memberlist's failure detection and gossip. Default
	// memberlist.DefaultTiming() (LAN); tests use a faster one.
	Timing memberlist.Timing
	// ClusterSize is the most members the cluster is planned to have.
	// How long memberlist may take to report every member of a partition
	// unreachable after the first grows with it (Timing.CutSpread), and
	// the coordinators must not decide before: an entity type that leaves
	// sharding.Settings.DowningStableAfter zero waits
	// Timing.DowningStableAfter(ClusterSize), and one that sets it no
	// longer than Timing.CutSpread(ClusterSize) is warned of at Init.
	// Default 5 (66 s with LAN timing, 14 s for 3).
	ClusterSize int

	// TransportAddr is where the message transport listens. Default
	// 127.0.0.1:0.
	TransportAddr string
	// TransportAdvertise is the endpoint peers dial, published in the
	// membership. Default: the listener's address, which must then be
	// reachable by peers (set it when TransportAddr is a wildcard).
	TransportAdvertise string
	// ServerTLS and ClientTLS turn on mutual TLS for the transport (see
	// tcp.MutualTLS); set both or neither. Each node's certificate must
	// name its NodeID among its DNS names unless AllowAnyNodeCert.
	ServerTLS, ClientTLS *tls.Config
	AllowAnyNodeCert     bool

	// Memory, when set, runs the node without Postgres: the journal, the
	// snapshot store, sharding's stores and the node leases are these
	// in-memory ones (see MemoryStores for what that cannot promise).
	// PostgresDSN and Pool must then be empty.
	Memory *MemoryStores
	// PostgresDSN is the database to connect to; ignored when Pool is set.
	// The pool opened on it has at least Journal.Writers + 6 connections;
	// the node opens 4 more of its own on the same database: one for the
	// node lease's renewals, three for the coordinator (its lease,
	// allocations, downing), so that journal traffic delays neither.
	PostgresDSN string
	// Pool is a pool to use instead of opening one; the node does not
	// close it.
	Pool *pgxpool.Pool
	// SkipMigrations leaves the schema alone; by default Start applies
	// Shoal's migrations (idempotent, safe from several nodes at once).
	SkipMigrations bool
	// Journal tunes the Postgres journal. Default journalpg.DefaultConfig().
	Journal journalpg.Config
	// Leases are the node and coordinator lease timings; every node of a
	// cluster must use the same. Default lease.DefaultSettings().
	Leases lease.Settings
	// Reminders tunes the firing of durable reminders (docs/DESIGN.md,
	// "Durable reminders"): the node fires those of the shards it hosts,
	// of every entity type, under its lease. Store, Holds, Clock and
	// Logger are set by Start; zero fields take reminders.Config's
	// defaults.
	Reminders reminders.Config

	// RegisterEntities, when set, registers the node's entity types
	// (sharding.Init on n.Sharding()) before the node joins, so that the
	// others find their regions here as soon as they see it Up; types
	// registered after Start miss the messages sent to them meanwhile,
	// which their senders retry (and this node logs as mail for no
	// listener). n is not a member yet: Self, System, Sharding and Pool
	// are ready, Ready is not. Keep the regions Init returns, or find them
	// later with sharding.Lookup. An error fails Start.
	RegisterEntities func(n *Node) error

	// Codec holds the application's message, event, state and reply
	// types; Start adds sharding's wire types. Default: an empty registry.
	Codec *codec.Registry
	// Entity configures the entity runtime (workers, ask timeout, clock,
	// ...). NodeID, Incarnation, Codec, Journal, Snapshots and Logger are
	// set by Start.
	Entity entity.Config
	// AdminAddr is where the admin HTTP API (package node/admin) listens,
	// e.g. "127.0.0.1:0" (read the port back with Node.AdminAddr). Empty:
	// no admin API.
	AdminAddr string
	// AdminToken is the bearer token the admin API's actions need (leave,
	// rebalance, down); empty turns the actions off.
	AdminToken string
	// AdminReadsNeedToken makes the admin API's reads need the token too
	// (the /ready and /alive probes stay open).
	AdminReadsNeedToken bool
	// OnLeaveRequest, when set, is called (once, in a goroutine of its
	// own) when the admin API or another node asks this node to leave,
	// instead of Shutdown being called at once: the application first
	// stops what it serves (drains its API, as on SIGTERM), then calls
	// Shutdown. Without it the node hands its shards off at once, and
	// requests the application still accepts then fail (docs/DESIGN.md,
	// Graceful leave).
	OnLeaveRequest func()

	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Metrics, when set, receives every Prometheus collector of the node
	// (entity runtime, sharding, journal, node lease, transport), each
	// labelled node=NodeID. Default nil: no metrics.
	Metrics prometheus.Registerer
	// TracerProvider makes the node's spans: asks, remote sends and
	// receives, entity handlers and journal writes (docs/DESIGN.md,
	// "Tracing"); it is the default of Entity.TracerProvider and
	// Journal.TracerProvider. Default: otel's no-op provider. Shoal never
	// sets otel's global provider; pass otel.GetTracerProvider() to use it.
	TracerProvider trace.TracerProvider
}

// DefaultConfig returns a Config for nodeID with every default spelled
// out: cluster "shoal", gossip and transport on free loopback ports,
// memberlist's LAN timing, the journal's and the leases' defaults, an
// empty codec. Set PostgresDSN (or Pool), and Seeds for every node but
// the first.
func DefaultConfig(nodeID string) Config {
	return Config{
		NodeID:        nodeID,
		ClusterName:   "shoal",
		GossipAddr:    "127.0.0.1:0",
		Timing:        memberlist.DefaultTiming(),
		ClusterSize:   5,
		TransportAddr: "127.0.0.1:0",
		Journal:       journalpg.DefaultConfig(),
		Leases:        lease.DefaultSettings(),
		Codec:         codec.NewRegistry(),
	}
}

func (c Config) withDefaults() (Config, error) {
	d := DefaultConfig(c.NodeID)
	if c.NodeID == "" {
		return c, fmt.Errorf("%w: NodeID is required", ErrInvalidConfig)
	}
	switch {
	case c.Memory != nil && (c.Pool != nil || c.PostgresDSN != ""):
		return c, fmt.Errorf("%w: Memory and a database (PostgresDSN or Pool) exclude each other", ErrInvalidConfig)
	case c.Memory == nil && c.Pool == nil && c.PostgresDSN == "":
		return c, fmt.Errorf("%w: PostgresDSN or Pool (or Memory) is required", ErrInvalidConfig)
	}
	if c.Incarnation == 0 {
		c.Incarnation = uint64(time.Now().UnixNano())
	}
	if c.ClusterName == "" {
		c.ClusterName = d.ClusterName
	}
	if c.GossipAddr == "" {
		c.GossipAddr = d.GossipAddr
	}
	if c.PruneNodeLeasesAfter == 0 {
		c.PruneNodeLeasesAfter = 10 * time.Minute
	}
	if c.JoinRetryMin <= 0 {
		c.JoinRetryMin = 200 * time.Millisecond
	}
	if c.JoinRetryMax <= 0 {
		c.JoinRetryMax = 5 * time.Second
	}
	if c.JoinRetryMax < c.JoinRetryMin {
		c.JoinRetryMax = c.JoinRetryMin
	}
	if c.Timing == (memberlist.Timing{}) {
		c.Timing = d.Timing
	}
	if c.ClusterSize <= 0 {
		c.ClusterSize = d.ClusterSize
	}
	if c.TransportAddr == "" {
		c.TransportAddr = d.TransportAddr
	}
	tuning := c.Journal
	tuning.Metrics, tuning.TracerProvider = nil, nil // == on an interface panics for an uncomparable value
	if tuning == (journalpg.Config{}) {
		d.Journal.Metrics, d.Journal.TracerProvider = c.Journal.Metrics, c.Journal.TracerProvider
		c.Journal = d.Journal
	}
	if c.Leases == (lease.Settings{}) {
		c.Leases = d.Leases
	}
	if err := c.Leases.Validate(); err != nil {
		return c, err
	}
	if c.Codec == nil {
		c.Codec = d.Codec
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}

// downing is the keep-majority timing of the node's entity types: the
// default stable-after, and the spread a set one must exceed. Keep-majority
// must not decide on a cut memberlist has shown only in part.
func (c Config) downing() (stableAfter, spread time.Duration) {
	return c.Timing.DowningStableAfter(c.ClusterSize), c.Timing.CutSpread(c.ClusterSize)
}

// minSpareConns is how many connections an opened pool has beyond the
// journal's writers.
const minSpareConns = 6

// Node is one running cluster node.
type Node struct {
	cfg  Config
	log  *slog.Logger
	self cluster.UniqueAddress

	pool     *pgxpool.Pool // nil in memory mode
	ownsPool bool
	// renewPool is the node lease's own connection, and controlPool the
	// coordinator's (its lease, allocations, downing): neither queues
	// behind the journal's traffic on pool. Both are the node's to close;
	// nil in memory mode.
	renewPool, controlPool *pgxpool.Pool
	journal                journal.Journal
	snaps                  snapshot.Store
	reminderStore          reminder.Store
	firing                 *reminders.Service // nil until sharding started
	coords                 sharding.CoordinatorStore
	remember               sharding.RememberStore
	leases                 lease.Store
	// renewLeases is the store the node lease is renewed in (on
	// renewPool), controlLeases the one the coordinator reads and downs in
	// (on controlPool); in memory mode both are leases.
	renewLeases, controlLeases lease.Store
	// leaseList lists the leases for the admin API; nil in memory mode.
	leaseList *leasepg.Store
	holder    *lease.Holder
	members   *memberlist.Membership
	net       *tcp.Transport
	// inbound is the sharding layer once started: the cluster transport,
	// which starts before it, hands it what arrives.
	inbound  atomic.Pointer[sharding.Sharding]
	view     *leaseView
	sys      *entity.System
	sharding *sharding.Sharding

	admin     *http.Server // nil without Config.AdminAddr
	adminAddr string

	projections projectionSet // RunProjection's (projections.go)

	started  chan struct{} // closed when Start returns
	done     chan struct{} // closed when Shutdown or Kill has finished
	stopping atomic.Bool
	fenced   atomic.Pointer[error]
	stopOnce sync.Once
	stopErr  error
	// leaveOnce: a repeated leave request starts one leave.
	leaveOnce sync.Once
}

// Start starts a node: see the package doc. ctx bounds the start (the
// database, the node lease, the join); on error everything started is
// stopped again.
func Start(ctx context.Context, cfg Config) (_ *Node, err error) {
	if cfg, err = cfg.withDefaults(); err != nil {
		return nil, err
	}
	n := &Node{cfg: cfg, self: cluster.UniqueAddress{Node: cfg.NodeID, Incarnation: cfg.Incarnation}, started: make(chan struct{}), done: make(chan struct{})}
	n.log = nodeLogger(cfg.Logger, n.self)
	warnInsecure(n.log, cfg)
	defer func() {
		if err != nil {
			n.releaseLease()
			n.kill()
		}
		close(n.started)
	}()
	if err := n.openStores(ctx); err != nil {
		return nil, err
	}
	// The lease first: nothing may be hosted by an incarnation the
	// database does not know to be alive.
	if n.holder, err = lease.HoldNode(ctx, n.renewLeases, n.self, cfg.Leases.Node, n.fence, lease.WithMetrics(n.metrics(), "node"), lease.WithLogger(n.log, "node")); err != nil {
		return nil, fmt.Errorf("node: acquire the node lease of %s: %w", n.self, err)
	}
	n.openJournal()
	if err := n.startCluster(ctx); err != nil {
		return nil, err
	}
	ec := cfg.Entity
	ec.NodeID, ec.Incarnation, ec.Codec = n.self.Node, n.self.Incarnation, cfg.Codec
	ec.Journal, ec.Snapshots, ec.Reminders = n.journal, n.snaps, n.reminderStore
	// The runtime adds "node" (the name) itself; "incarnation" completes
	// what every layer's lines carry.
	// Replies to other nodes' asks take the cluster transport, which
	// sharding.New attaches as the runtime's route for them.
	ec.Logger = cfg.Logger.With("incarnation", n.self.Incarnation)
	if ec.Metrics == nil {
		ec.Metrics = n.metrics()
	}
	if ec.TracerProvider == nil {
		ec.TracerProvider = cfg.TracerProvider
	}
	if n.sys, err = entity.NewSystem(ec); err != nil {
		return nil, err
	}
	// Sharding and the entity types before the join: the others send to
	// this node's regions as soon as they see it Up.
	n.view = newLeaseView(n.members, n.expiredNodes, dropExpiredAfterLeases*cfg.Leases.Node.Length, time.Now)
	stableAfter, spread := cfg.downing()
	n.sharding, err = sharding.New(n.sys, sharding.Config{
		Transport:          leased(n.net, n.holder.Holds),
		Membership:         n.view,
		Roles:              cfg.Roles,
		CoordinatorStore:   n.coords,
		RememberStore:      n.remember,
		CoordinatorLease:   cfg.Leases.Coordinator,
		NodeLeases:         nodeLeases{n.controlLeases},
		OnLeaveRequest:     n.leaveRequested,
		Logger:             n.sys.Logger(), // names the node
		Metrics:            n.metrics(),
		DowningStableAfter: stableAfter,
		DowningSpread:      spread,
	})
	if err != nil {
		return nil, err
	}
	n.inbound.Store(n.sharding)
	if n.reminderStore != nil {
		rc := cfg.Reminders
		rc.Store, rc.Holds, rc.Clock, rc.Logger = n.reminderStore, n.holder.Holds, n.sys.Clock(), n.sys.Logger()
		if rc.Metrics == nil {
			rc.Metrics = n.metrics()
		}
		if n.firing, err = reminders.StartAll(n.sharding, rc); err != nil {
			return nil, err
		}
	}
	if cfg.RegisterEntities != nil {
		if err := cfg.RegisterEntities(n); err != nil {
			return nil, fmt.Errorf("node: register entity types: %w", err)
		}
	}
	if err := n.join(ctx); err != nil {
		return nil, err
	}
	if err := n.startAdmin(); err != nil {
		return nil, err
	}
	if len(cfg.Seeds) == 0 && len(cfg.RejoinSeeds) > 0 {
		go n.rejoin()
	}
	go n.view.run(cfg.Leases.Node.Length/4, n.done)
	if p, ok := n.controlLeases.(lease.NodePruner); ok && cfg.PruneNodeLeasesAfter > 0 {
		go n.pruneNodeLeases(p)
	}
	n.log.Info("node: started", "gossip", n.members.Addr(), "transport", n.net.Addr().String())
	return n, nil
}

// rejoin tries Config.RejoinSeeds every ReconnectInterval until one
// answers (memberlist then merges the two clusters' states) or the node
// stops.
func (n *Node) rejoin() {
	<-n.started
	t := time.NewTicker(n.cfg.Timing.ReconnectInterval)
	defer t.Stop()
	for {
		select {
		case <-n.done:
			return
		case <-t.C:
		}
		if n.stopping.Load() || n.fenced.Load() != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), n.cfg.Timing.BroadcastTimeout)
		err := n.members.Join(ctx, n.cfg.RejoinSeeds)
		cancel()
		switch {
		case err == nil:
			n.log.Info("node: joined a seed after bootstrapping; the clusters merge", "seeds", n.cfg.RejoinSeeds)
			return
		case errors.Is(err, memberlist.ErrShutdown):
			return
		default:
			n.log.Debug("node: no seed answered yet", "seeds", n.cfg.RejoinSeeds, "err", err)
		}
	}
}

// openStores opens (or takes) the pool, applies the migrations and builds
// the stores on it; in memory mode it takes Config.Memory's.
func (n *Node) openStores(ctx context.Context) error {
	if m := n.cfg.Memory; m != nil {
		n.journal, n.snaps, n.coords, n.remember, n.leases = m.Journal, m.Snapshots, m.Coordinators, m.Remember, m.Leases
		n.renewLeases, n.controlLeases = m.Leases, m.Leases
		if m.Reminders != nil {
			n.reminderStore = m.Reminders
		}
		return nil
	}
	n.pool = n.cfg.Pool
	if n.pool == nil {
		pc, err := pgxpool.ParseConfig(n.cfg.PostgresDSN)
		if err != nil {
			return fmt.Errorf("%w: PostgresDSN: %w", ErrInvalidConfig, err)
		}
		// The journal's writers each hold a connection while a batch is in
		// flight; recoveries, snapshots, leases and sharding need more.
		writers := n.cfg.Journal.Writers
		if writers <= 0 {
			writers = journalpg.DefaultConfig().Writers
		}
		pc.MaxConns = max(pc.MaxConns, int32(writers+minSpareConns))
		pool, err := pgxpool.NewWithConfig(ctx, pc)
		if err != nil {
			return fmt.Errorf("node: open database: %w", err)
		}
		n.pool, n.ownsPool = pool, true
	}
	if !n.cfg.SkipMigrations {
		if _, err := migrations.Apply(ctx, n.pool); err != nil {
			return fmt.Errorf("node: migrate: %w", err)
		}
	}
	n.leaseList = leasepg.New(n.pool)
	n.leases = n.leaseList
	var err error
	if n.renewPool, err = n.sidePool(ctx, renewConns); err != nil {
		return err
	}
	if n.controlPool, err = n.sidePool(ctx, controlConns); err != nil {
		return err
	}
	n.renewLeases, n.controlLeases = leasepg.New(n.renewPool), leasepg.New(n.controlPool)
	n.snaps = snapshotpg.New(n.pool)
	n.reminderStore = reminderpg.New(n.pool)
	n.coords, n.remember = shardingpg.NewCoordinatorStore(n.controlPool), shardingpg.NewRememberStore(n.pool)
	return nil
}

// dropExpiredAfterLeases is how many node lease lengths after the lease of
// a member was seen expired sharding's view leaves it out (see leaseView).
const dropExpiredAfterLeases = 4

// pruneNodeLeases forgets, every minute, the node leases that expired
// more than Config.PruneNodeLeasesAfter ago (lease.NodePruner), until the
// node stops. Every node does it: it is one idempotent statement.
func (n *Node) pruneNodeLeases(p lease.NodePruner) {
	<-n.started
	t := time.NewTicker(pruneNodeLeasesEvery)
	defer t.Stop()
	for {
		select {
		case <-n.done:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), pruneNodeLeasesEvery)
		pruned, err := p.PruneNodes(ctx, n.cfg.PruneNodeLeasesAfter)
		cancel()
		switch {
		case err != nil:
			n.log.Warn("node: pruning expired node leases failed; retrying in a minute", "err", err)
		case pruned > 0:
			n.log.Info("node: pruned expired node leases", "count", pruned, "expired_before", n.cfg.PruneNodeLeasesAfter)
		}
	}
}

const pruneNodeLeasesEvery = time.Minute

// expiredNodes reports which of nodes hold a node lease that has expired
// in the store: the coordinator takes them as Down without waiting for the
// membership (see leaseView).
func (n *Node) expiredNodes(ctx context.Context, nodes []cluster.UniqueAddress) ([]cluster.UniqueAddress, time.Duration, error) {
	if s, ok := n.controlLeases.(interface {
		ExpiredNodes(context.Context, []cluster.UniqueAddress) ([]cluster.UniqueAddress, time.Duration, error)
	}); ok {
		return s.ExpiredNodes(ctx, nodes) // one query for all
	}
	var out []cluster.UniqueAddress
	for _, a := range nodes {
		expired, err := n.controlLeases.NodeLeaseExpired(ctx, a)
		if err != nil {
			return nil, 0, err
		}
		if expired {
			out = append(out, a)
		}
	}
	return out, 0, nil
}

// Connections of the side pools: the node lease's renewals are one at a
// time; the coordinator renews its lease while an allocation write or a
// downing call is under way.
const (
	renewConns   = 1
	controlConns = 3
)

// sidePool opens a pool of conns connections to the database of the main
// pool, kept open (a renewal does not pay for a connect) and checked
// often, so that a connection lost is replaced before the next renewal
// needs it.
func (n *Node) sidePool(ctx context.Context, conns int32) (*pgxpool.Pool, error) {
	pc := n.pool.Config() // a copy
	pc.MaxConns, pc.MinConns = conns, conns
	pc.HealthCheckPeriod = time.Second
	p, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("node: open a lease connection: %w", err)
	}
	return p, nil
}

// openJournal opens the journal, fenced by the node lease (see
// journalpg.Fence): an incarnation that lost its lease, or resumes from a
// pause past it, writes no event, whatever its goroutines do first.
func (n *Node) openJournal() {
	if n.cfg.Memory != nil {
		return // the memory journal lives in this process and dies with it: nothing to fence
	}
	jc := n.cfg.Journal
	if jc.Metrics == nil {
		jc.Metrics = n.metrics()
	}
	if jc.TracerProvider == nil {
		jc.TracerProvider = n.cfg.TracerProvider
	}
	n.journal = journalpg.New(n.pool, jc, journalpg.WithFence(journalpg.Fence{
		NodeID: n.self.Node, Incarnation: n.self.Incarnation, Holds: n.holder.Holds,
	}), journalpg.WithSideStore(n.reminderStore.(journalpg.SideStore)))
}

// startCluster listens for messages and gossip. The transport's listener
// comes first: its address is the endpoint the membership publishes.
func (n *Node) startCluster(ctx context.Context) error {
	cfg := n.cfg
	ln, err := net.Listen("tcp", cfg.TransportAddr)
	if err != nil {
		return fmt.Errorf("node: transport: listen %s: %w", cfg.TransportAddr, err)
	}
	endpoint := cfg.TransportAdvertise
	if endpoint == "" {
		endpoint = ln.Addr().String()
	}
	// A member gossip reports enters the views only once this node's
	// transport has probed it: gossip authenticates nobody, so a process
	// the transport would refuse (another cluster, another wire, no
	// certificate naming its node) is never listed (docs/DESIGN.md,
	// "Members and views"). The transport starts after the membership it
	// follows, hence the pointer.
	var transport atomic.Pointer[tcp.Transport]
	admit := func(ctx context.Context, m cluster.Member) error {
		t := transport.Load()
		if t == nil {
			return errors.New("node: transport not started yet")
		}
		return t.Probe(ctx, m.Address, m.Endpoint)
	}
	mc := memberlist.Config{
		NodeID: cfg.NodeID, Incarnation: cfg.Incarnation, Endpoint: endpoint,
		Roles: cfg.Roles, AppVersion: cfg.AppVersion, ClusterName: cfg.ClusterName,
		SecretKey: cfg.SecretKey, Timing: cfg.Timing, Logger: n.layerLog(), Admit: admit,
	}
	if mc.BindAddr, mc.BindPort, err = hostPort(cfg.GossipAddr); err != nil {
		ln.Close()
		return err
	}
	if cfg.GossipAdvertise != "" {
		if mc.AdvertiseAddr, mc.AdvertisePort, err = hostPort(cfg.GossipAdvertise); err != nil {
			ln.Close()
			return err
		}
	}
	if n.members, err = memberlist.New(mc); err != nil {
		ln.Close()
		return err
	}
	n.net, err = tcp.Listen(tcp.Config{
		Self: n.self, Codec: cfg.Codec, Handler: leasedTransport{holds: n.holder.Holds}.handler(n.receive), Membership: n.members,
		Listener: ln, ClusterName: cfg.ClusterName,
		ServerTLS: cfg.ServerTLS, ClientTLS: cfg.ClientTLS, AllowAnyNodeCert: cfg.AllowAnyNodeCert,
		Logger: n.layerLog(), Metrics: n.metrics(),
	})
	if err != nil {
		ln.Close()
		return err
	}
	transport.Store(n.net)
	return nil
}

// receive hands what the cluster transport receives to sharding; before
// sharding starts, nothing here listens yet (no member knows this
// incarnation before it joins), and it is dropped.
func (n *Node) receive(from cluster.UniqueAddress, msg any) {
	if s := n.inbound.Load(); s != nil {
		s.Receive(from, msg)
	}
}

func hostPort(addr string) (string, int, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("%w: address %q: %w", ErrInvalidConfig, addr, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return "", 0, fmt.Errorf("%w: port of %q: %w", ErrInvalidConfig, addr, err)
	}
	return host, p, nil
}

// join joins the seeds, or bootstraps a cluster without any. While no
// seed answers it tries them all again, with back-off, until
// Config.JoinTimeout has passed: any live member lets the node in.
func (n *Node) join(ctx context.Context) error {
	if len(n.cfg.Seeds) == 0 {
		return n.members.Bootstrap(ctx)
	}
	if n.cfg.JoinTimeout <= 0 {
		return n.members.Join(ctx, n.cfg.Seeds)
	}
	ctx, cancel := context.WithTimeout(ctx, n.cfg.JoinTimeout)
	defer cancel()
	bo := backoff.WithContext(backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(n.cfg.JoinRetryMin),
		backoff.WithMaxInterval(n.cfg.JoinRetryMax),
		backoff.WithMaxElapsedTime(0)), ctx)
	var last error
	err := backoff.RetryNotify(func() error {
		last = n.members.Join(ctx, n.cfg.Seeds)
		if last != nil && !errors.Is(last, memberlist.ErrNoSeedReachable) {
			return backoff.Permanent(last)
		}
		return last
	}, bo, func(err error, next time.Duration) {
		n.log.Warn("node: no seed answered; retrying", "seeds", n.cfg.Seeds, "in", next, "err", err)
	})
	if err != nil && last != nil && !errors.Is(err, last) {
		// The time ran out: say so, and why the last round failed.
		return fmt.Errorf("node: join within %v: %w: %w", n.cfg.JoinTimeout, last, err)
	}
	return err
}

// fence is the node lease's fence: stop hosting at once, as a crash would.
func (n *Node) fence(err error) {
	n.fenced.Store(&err)
	n.log.Error("node: node lease lost; stopping every entity at once", "err", err)
	go func() {
		<-n.started // a Start that failed has stopped everything itself
		if n.sharding != nil {
			n.sharding.Terminate()
		}
		if n.members != nil {
			_ = n.members.Shutdown()
		}
	}()
}

// layerLog is the logger of the layers that do not name the node themselves
// (the entity runtime and sharding do).
func (n *Node) layerLog() *slog.Logger { return nodeLogger(n.cfg.Logger, n.self) }

// nodeLogger names self on every line as every layer does: its name
// under "node", its incarnation under "incarnation".
func nodeLogger(l *slog.Logger, self cluster.UniqueAddress) *slog.Logger {
	return l.With("node", self.Node, "incarnation", self.Incarnation)
}

// metrics is Config.Metrics with the node label; nil when it is nil.
func (n *Node) metrics() prometheus.Registerer { return metrics.WithNode(n.cfg.Metrics, n.cfg.NodeID) }

// Self is this node's incarnation.
func (n *Node) Self() cluster.UniqueAddress { return n.self }

// System is the node's entity runtime.
func (n *Node) System() *entity.System { return n.sys }

// Sharding is the node's sharding layer: pass it to sharding.Init.
func (n *Node) Sharding() *sharding.Sharding { return n.sharding }

// Membership is the node's view of the cluster.
func (n *Node) Membership() cluster.Membership { return n.members }

// GossipAddr is where the node gossips (host:port): what other nodes list
// in Config.Seeds.
func (n *Node) GossipAddr() string { return n.members.Addr() }

// TransportAddr is where the node's transport listens.
func (n *Node) TransportAddr() string { return n.net.Addr().String() }

// Reminders is the node's durable reminder store; nil in memory mode
// without MemoryStores.Reminders.
func (n *Node) Reminders() reminder.Store { return n.reminderStore }

// ReminderFiring reports, per entity type, what this node's firing of
// reminders holds and did; nil before sharding started or without a store.
func (n *Node) ReminderFiring() map[string]reminders.Stats {
	if n.firing == nil {
		return nil
	}
	return n.firing.Stats()
}

// Pool is the node's database pool; nil in memory mode.
func (n *Node) Pool() *pgxpool.Pool { return n.pool }

// Stats are the counters of the node's transports: the cluster
// transport's and sharding's dispatch over it. Before sharding starts,
// the latter are zero.
func (n *Node) Stats() (tcp.Stats, sharding.TransportStats) {
	var st sharding.TransportStats
	if s := n.inbound.Load(); s != nil {
		st = s.TransportStats()
	}
	return n.net.Stats(), st
}

// Ready returns nil when the node serves: it is an Up member in its own
// view, holds its node lease, and is neither fenced nor shutting down.
// Otherwise the error says why (ErrNotJoined, ErrFenced, ErrShuttingDown).
func (n *Node) Ready() error {
	if err := n.Alive(); err != nil {
		return err
	}
	if !n.holder.Holds() {
		return fmt.Errorf("%w: the node lease is not held", ErrFenced)
	}
	if m, ok := n.members.View().Member(n.self); !ok || m.Status != cluster.Up {
		return fmt.Errorf("%w: %s is %v in its own view", ErrNotJoined, n.self, m.Status)
	}
	return nil
}

// Alive returns nil unless the node fenced itself (ErrFenced, wrapping
// the cause) or is shutting down (ErrShuttingDown): a node that is alive
// but not ready is still joining or handing off.
func (n *Node) Alive() error {
	if p := n.fenced.Load(); p != nil {
		return *p // wraps ErrFenced
	}
	if n.stopping.Load() {
		return ErrShuttingDown
	}
	return nil
}

// Shutdown leaves the cluster gracefully within ctx: sharding hands every
// shard off (entities get their stop messages and the shards start
// elsewhere), then the node lease is released (so nothing waits for it to
// expire), then the node leaves the membership, then the transport, the
// journal and the pool are closed. What the deadline cuts short is
// stopped at once, and the error says so. Calling it again returns the
// first call's error.
func (n *Node) Shutdown(ctx context.Context) error {
	n.stopOnce.Do(func() {
		n.stopping.Store(true)
		var errs []error
		if n.firing != nil {
			n.firing.Stop() // the shards' next homes fire their reminders
		}
		if err := n.sharding.Shutdown(ctx); err != nil {
			errs = append(errs, err)
		}
		// The lease before the leave: the coordinator downs every member
		// that leaves the view, and a node still renewing then would fence
		// itself. Released, it hosts nothing the others must wait for.
		n.holder.Stop()
		if n.fenced.Load() == nil {
			if err := n.leases.ReleaseNode(ctx, n.self); err != nil {
				errs = append(errs, fmt.Errorf("node: release the node lease: %w", err))
			}
		}
		if err := n.members.Leave(ctx); err != nil {
			errs = append(errs, err)
		}
		n.view.Close()
		if err := n.net.Close(ctx); err != nil {
			errs = append(errs, err)
		}
		n.closeStores()
		n.stopAdmin()
		n.stopErr = errors.Join(errs...)
		n.log.Info("node: shut down", "err", n.stopErr)
		close(n.done)
	})
	return n.stopErr
}

// Kill stops the node as a crash would: entities stop at once without
// their stop messages, the node vanishes from gossip without a word, and
// its lease is left to expire. For tests.
func (n *Node) Kill() {
	n.stopOnce.Do(func() {
		n.stopErr = errors.New("node: killed")
		n.kill()
		close(n.done)
	})
}

// kill stops whatever has been started, as a crash would.
func (n *Node) kill() {
	n.stopping.Store(true)
	n.stopAdmin()
	if n.firing != nil {
		n.firing.Stop()
	}
	if n.sharding != nil {
		n.sharding.Terminate()
	}
	if n.members != nil {
		_ = n.members.Shutdown()
	}
	if n.view != nil {
		n.view.Close()
	}
	if n.net != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = n.net.Close(ctx)
		cancel()
	}
	if n.holder != nil {
		n.holder.Stop()
	}
	n.closeStores()
}

// releaseLease ends the node lease of a Start that failed: it never
// hosted anything, so nothing need wait for the lease to expire.
func (n *Node) releaseLease() {
	if n.holder == nil {
		return
	}
	n.holder.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := n.leases.ReleaseNode(ctx, n.self); err != nil {
		n.log.Warn("node: could not release the node lease of a failed start", "err", err)
	}
}

func (n *Node) closeStores() {
	if c, ok := n.journal.(interface{ Close() error }); ok && n.cfg.Memory == nil {
		_ = c.Close()
	}
	for _, p := range []*pgxpool.Pool{n.renewPool, n.controlPool} {
		if p != nil {
			p.Close()
		}
	}
	if n.ownsPool && n.pool != nil {
		n.pool.Close()
	}
}
