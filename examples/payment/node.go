package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/journal"
	"github.com/shoal-dev/shoal/journal/memory"
	"github.com/shoal-dev/shoal/journal/postgres"
	"github.com/shoal-dev/shoal/migrations"
	"github.com/shoal-dev/shoal/node"
	"github.com/shoal-dev/shoal/sharding"
	shardingpg "github.com/shoal-dev/shoal/sharding/postgres"
	"github.com/shoal-dev/shoal/sharding/reminders"
	"github.com/shoal-dev/shoal/timers"
	"github.com/shoal-dev/shoal/timers/reminder"
	remindermemory "github.com/shoal-dev/shoal/timers/reminder/memory"
	reminderpg "github.com/shoal-dev/shoal/timers/reminder/postgres"
)

// Config configures a Node. DefaultConfig gives the original's timeouts on
// loopback ports chosen by the system.
type Config struct {
	// APIAddr is where the payment API listens. Default 127.0.0.1:0.
	APIAddr string
	// ReadTimeout bounds reading a whole request, headers and body, so a
	// client that trickles its body cannot hold a connection. Default 10s.
	ReadTimeout time.Duration
	// WriteTimeout bounds a request from the end of its headers to the end
	// of its response. Keep it above Settings.AskTimeout, or the server
	// drops answers the entity gave in time. Default 30s.
	WriteTimeout time.Duration
	// IdleTimeout closes keep-alive connections idle this long. Default 30s.
	IdleTimeout time.Duration
	// DrainTimeout is the part of a Shutdown given to requests in flight;
	// connections still open after it are closed, and the hand-off gets the
	// rest of the budget. An entity whose client is cut so finishes its work
	// in the hand-off, and a retry gets the stored answer. Default 5s.
	DrainTimeout time.Duration
	// IssuerURL is the issuer to call. Empty: start the simulator on
	// SimulatorAddr and call it.
	IssuerURL     string
	SimulatorAddr string
	// PostgresDSN selects the Postgres journal (migrations applied at
	// start); empty keeps events in memory. Cluster mode requires it.
	PostgresDSN string
	// Cluster, when set, makes the node a member of a cluster (see
	// Cluster); nil runs one node on its own, sharding in process.
	Cluster *Cluster
	// Counters adds the counter entity type and its endpoints (see
	// counter.go): a workload for the cluster's linearizability tests.
	Counters bool
	// ActivationLog, when set, receives the entities' activation log (see
	// ActivationLog).
	ActivationLog io.Writer

	Settings Settings
	Issuer   IssuerClientConfig
	// Credentials default to memory tables with SeedDemo's rows.
	Credentials Credentials
	// Sequences default to PostgresSequences on Postgres, else to memory.
	Sequences Sequences
	// Auth resolves bearer tokens. Default: StubAuthorizer.
	Auth Authorizer
	// Clock is the entities' time source. Default: the wall clock.
	Clock  timers.Clock
	Logger *slog.Logger
	// Metrics registers the node's Prometheus collectors (Shoal's, Go's
	// and the process's) on a registry of its own and serves it at
	// /metrics on APIAddr, for Prometheus to scrape.
	Metrics bool
}

// DefaultConfig returns the defaults documented on Config.
func DefaultConfig() Config {
	return Config{
		APIAddr:       "127.0.0.1:0",
		ReadTimeout:   10 * time.Second,
		WriteTimeout:  30 * time.Second,
		IdleTimeout:   30 * time.Second,
		DrainTimeout:  5 * time.Second,
		SimulatorAddr: "127.0.0.1:0",
		Settings:      DefaultSettings(),
		Issuer:        DefaultIssuerClientConfig(),
	}
}

// Node is one running payment service: the issuer simulator (unless an
// issuer URL was given), the payment entities on sharding and the HTTP API.
type Node struct {
	APIURL    string
	IssuerURL string
	// Simulator is nil when the node calls an external issuer.
	Simulator *Simulator
	Sharding  *sharding.Sharding
	Payments  *sharding.Region[Command]
	// Counters is nil unless Config.Counters.
	Counters *sharding.Region[CounterCommand]
	Journal  journal.Journal
	// Cluster is the Shoal cluster node, nil on a node of its own.
	Cluster *node.Node

	cfg       Config
	payments  *Payments
	api       *http.Server
	sim       *http.Server
	pool      *pgxpool.Pool
	ownsPool  bool
	done      chan struct{} // closed at Shutdown or Kill, when set
	closeDone sync.Once
	pgJ       *postgres.Journal
	log       *slog.Logger
	serveErr  chan error
	metrics   *prometheus.Registry // nil unless Config.Metrics
	readModel *readModel           // nil when the journal answers no queries
	// reminderStore and firing are a node of its own's durable reminders
	// (a cluster node's are its Cluster's).
	reminderStore reminder.Store
	firing        *reminders.Service
}

// Start starts a node. Stop it with Shutdown (graceful) or Kill.
func Start(ctx context.Context, cfg Config) (_ *Node, err error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Auth == nil {
		cfg.Auth = StubAuthorizer{}
	}
	d := DefaultConfig()
	if cfg.ReadTimeout <= 0 {
		cfg.ReadTimeout = d.ReadTimeout
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = d.WriteTimeout
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = d.IdleTimeout
	}
	if cfg.DrainTimeout <= 0 {
		cfg.DrainTimeout = d.DrainTimeout
	}
	n := &Node{cfg: cfg, log: cfg.Logger, serveErr: make(chan error, 2)}
	if cfg.Metrics {
		n.metrics = prometheus.NewRegistry()
		n.metrics.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	defer func() {
		if err != nil {
			n.Kill()
		}
	}()

	reg := codec.NewRegistry()
	// The issuer first: the payment entities call it.
	if cfg.IssuerURL == "" {
		ln, err := net.Listen("tcp", cfg.SimulatorAddr)
		if err != nil {
			return nil, fmt.Errorf("issuer simulator: %w", err)
		}
		n.Simulator = NewSimulator()
		mux := http.NewServeMux()
		mux.Handle("/payment", n.Simulator)
		n.sim = boundedServer(mux, simulatorWriteTimeout)
		go n.serve(n.sim, ln)
		cfg.IssuerURL = "http://" + ln.Addr().String() + "/payment"
	}
	n.IssuerURL = cfg.IssuerURL
	n.cfg = cfg
	if cfg.Cluster != nil {
		// The entity types are registered before the node joins
		// (node.Config.RegisterEntities), so that no member sends to a
		// region this node does not run yet.
		if err := n.joinCluster(ctx, reg); err != nil {
			return nil, err
		}
	} else {
		if err := n.openJournal(ctx); err != nil {
			return nil, err
		}
		if n.Sharding, err = n.localSharding(reg); err != nil {
			return nil, err
		}
		if err := n.initEntities(ctx, n.Sharding, cluster.UniqueAddress{Node: "local"}); err != nil {
			return nil, err
		}
		// The processing timeouts' reminders (see timeout.go) fire here.
		if n.firing, err = reminders.StartAll(n.Sharding, reminders.Config{Metrics: n.metricsOrNil()}); err != nil {
			return nil, err
		}
	}

	if err := n.startReadModel(ctx); err != nil {
		return nil, err
	}

	ln, err := net.Listen("tcp", cfg.APIAddr)
	if err != nil {
		return nil, fmt.Errorf("payment API: %w", err)
	}
	api := &API{Payments: n.Payments, Counters: n.Counters, Auth: cfg.Auth, AskTimeout: cfg.Settings.AskTimeout, Log: cfg.Logger}
	if n.readModel != nil {
		api.ReadModel = n.readModel.model
	}
	if n.Cluster != nil {
		api.Ready, api.Alive, api.Members = n.Cluster.Ready, n.Cluster.Alive, n.members
	}
	handler := api.Handler()
	if n.metrics != nil {
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(n.metrics, promhttp.HandlerOpts{}))
		mux.Handle("/", handler)
		handler = mux
	}
	n.api = &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: min(5*time.Second, cfg.ReadTimeout),
		ReadTimeout:       cfg.ReadTimeout,
		WriteTimeout:      cfg.WriteTimeout,
		IdleTimeout:       cfg.IdleTimeout,
	}
	go n.serve(n.api, ln)
	n.APIURL = "http://" + ln.Addr().String()
	return n, nil
}

// initEntities builds the payments' dependencies and starts the payment
// (and counter) entities on sh. A cluster node calls it from
// node.Config.RegisterEntities, once per attempt to start, with the pool
// of that attempt, so it keeps nothing of an earlier attempt.
func (n *Node) initEntities(ctx context.Context, sh *sharding.Sharding, self cluster.UniqueAddress) (err error) {
	cfg := n.cfg
	if cfg.Credentials == nil || cfg.Sequences == nil {
		mem := NewMemoryTables()
		SeedDemo(mem)
		if cfg.Credentials == nil {
			cfg.Credentials = mem
		}
		if cfg.Sequences == nil {
			cfg.Sequences = mem
			if n.pool != nil {
				if cfg.Sequences, err = NewPostgresSequences(ctx, n.pool); err != nil {
					return err
				}
			}
		}
	}
	issuerCfg := cfg.Issuer
	issuerCfg.URL = cfg.IssuerURL
	n.payments = &Payments{
		Settings:    cfg.Settings,
		Issuer:      NewIssuerClient(issuerCfg, nil),
		Credentials: cfg.Credentials,
		Sequences:   cfg.Sequences,
	}
	minMembers := 1
	if cfg.Cluster != nil {
		minMembers = max(1, cfg.Cluster.MinMembers)
	}
	if cfg.ActivationLog != nil {
		n.payments.Activations = NewActivationLog(self, cfg.ActivationLog)
	}
	if n.Payments, err = InitPayments(sh, n.payments, minMembers); err != nil {
		return err
	}
	if cfg.Counters {
		if n.Counters, err = InitCounters(sh, n.payments.Activations, minMembers); err != nil {
			return err
		}
	}
	return nil
}

// localSharding runs sharding in this process alone, on the Postgres
// stores when there is a database: allocations and remembered entities
// outlive the process, as the events do.
func (n *Node) localSharding(reg *codec.Registry) (*sharding.Sharding, error) {
	Register(reg)
	registerCounter(reg)
	ec := entity.Config{Codec: reg, Journal: n.Journal, Reminders: n.reminderStore, Clock: n.cfg.Clock, Logger: n.log}
	var shardingCfg sharding.Config
	if n.metrics != nil {
		ec.Metrics, shardingCfg.Metrics = n.metrics, n.metrics
	}
	sys, err := entity.NewSystem(ec)
	if err != nil {
		return nil, err
	}
	if n.pool != nil {
		shardingCfg.CoordinatorStore = shardingpg.NewCoordinatorStore(n.pool)
		shardingCfg.RememberStore = shardingpg.NewRememberStore(n.pool)
	}
	return sharding.New(sys, shardingCfg)
}

// joinCluster starts the Shoal node of cfg.Cluster: its pool is the
// journal's, its sharding the payments'. A node that fenced itself (its
// lease lost) is reported on Err: the process should restart as a new
// incarnation.
func (n *Node) joinCluster(ctx context.Context, reg *codec.Registry) error {
	nc := n.cfg.Cluster.Node
	if nc.PostgresDSN == "" && nc.Pool == nil {
		nc.PostgresDSN = n.cfg.PostgresDSN
	}
	if nc.Codec == nil {
		nc.Codec = reg
	}
	Register(nc.Codec)
	registerCounter(nc.Codec)
	if nc.Logger == nil {
		nc.Logger = n.log
	}
	if nc.Entity.Clock == nil {
		nc.Entity.Clock = n.cfg.Clock
	}
	if nc.Metrics == nil && n.metrics != nil {
		nc.Metrics = n.metrics
	}
	n.done = make(chan struct{})
	if nc.OnLeaveRequest == nil {
		// A leave asked for through the admin API (or by another node)
		// takes SIGTERM's path: the caller of Err drains the API, then
		// Shutdown hands the shards off. Handing them off first would
		// fail every request the API still accepts.
		nc.OnLeaveRequest = func() {
			select {
			case n.serveErr <- ErrLeaveRequested:
			case <-n.done:
			}
		}
	}
	nc.RegisterEntities = func(cn *node.Node) error {
		n.pool, n.ownsPool = cn.Pool(), false
		return n.initEntities(ctx, cn.Sharding(), cn.Self())
	}
	c := *n.cfg.Cluster
	c.Node = nc
	cn, err := startClusterNode(ctx, c, n.log)
	if err != nil {
		return err
	}
	n.Cluster, n.Sharding, n.Journal = cn, cn.Sharding(), cn.System().Journal()
	n.pool, n.ownsPool = cn.Pool(), false
	n.watchFence()
	return nil
}

// ErrLeaveRequested is reported on Err when the admin API (or another
// node) asked the cluster node to leave. Nothing has stopped yet: the
// process should call Shutdown, as after a SIGTERM, which drains the API
// before the shards are handed off.
var ErrLeaveRequested = errors.New("payment: asked to leave the cluster")

// watchFence reports on Err when the cluster node fences itself.
func (n *Node) watchFence() {
	go func() {
		t := time.NewTicker(fenceCheck)
		defer t.Stop()
		for {
			select {
			case <-n.done:
				return
			case <-t.C:
				if err := n.Cluster.Alive(); errors.Is(err, node.ErrFenced) {
					select {
					case n.serveErr <- err:
					case <-n.done:
					}
					return
				}
			}
		}
	}()
}

// members lists the cluster's members as this node sees them.
func (n *Node) members() []string {
	var out []string
	for _, m := range n.Cluster.Membership().View().Members() {
		out = append(out, m.String())
	}
	return out
}

// fenceCheck is how often a cluster node's liveness is checked.
const fenceCheck = time.Second

func (n *Node) openJournal(ctx context.Context) error {
	// The journal writes an effect's reminders in the transaction of its
	// events (docs/DESIGN.md, "Durable reminders").
	if n.cfg.PostgresDSN == "" {
		store := remindermemory.New()
		n.reminderStore, n.Journal = store, memory.New(memory.WithSideStore(store))
		return nil
	}
	pool, err := pgxpool.New(ctx, n.cfg.PostgresDSN)
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	n.pool, n.ownsPool = pool, true
	applied, err := migrations.Apply(ctx, pool)
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	if len(applied) > 0 {
		n.log.Info("applied migrations", "versions", applied)
	}
	var jc postgres.Config
	if n.metrics != nil {
		jc.Metrics = n.metrics
	}
	store := reminderpg.New(pool)
	n.pgJ = postgres.New(pool, jc, postgres.WithSideStore(store))
	n.reminderStore, n.Journal = store, n.pgJ
	return nil
}

func (n *Node) serve(s *http.Server, ln net.Listener) {
	if err := s.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		n.serveErr <- err
	}
}

// Err reports a listener that failed while serving.
func (n *Node) Err() <-chan error { return n.serveErr }

// Shutdown stops the node gracefully, in three steps within ctx's budget:
// the API stops accepting and gives requests in flight up to DrainTimeout,
// then closes the connections left (slow clients cannot eat the budget);
// sharding hands every entity off through its stop message (so one waiting
// for the issuer stops only after its answer or its processing timeout);
// then it waits for issuer calls that outlived their entities, and the
// simulator and the journal close. When ctx ends first, the entities still
// running stop at once.
//
// The error reports only what was lost: a hand-off or issuer calls cut
// short. Requests cut at the drain timeout are logged, not returned: their
// entities' work completes in the hand-off.
func (n *Node) Shutdown(ctx context.Context) error {
	var errs []error
	if n.api != nil {
		n.drainAPI(ctx)
	}
	if n.readModel != nil {
		// No more keep-alives from here: the workers move with their
		// shards and the other nodes' keep-alives start them there, while
		// one sent here meanwhile would wait in the leaving region.
		n.readModel.projection.Stop()
	}
	switch {
	case n.Cluster != nil:
		// Hands the shards off to the other nodes, then leaves.
		errs = append(errs, n.Cluster.Shutdown(ctx))
	case n.Sharding != nil:
		n.stopFiring()
		errs = append(errs, n.Sharding.Shutdown(ctx))
	}
	if n.payments != nil {
		errs = append(errs, n.payments.WaitForIssuerCalls(ctx))
	}
	n.closeRest()
	return errors.Join(errs...)
}

// drainAPI stops accepting requests and waits up to DrainTimeout (within
// ctx) for those in flight, then closes every connection left.
func (n *Node) drainAPI(ctx context.Context) {
	drain, cancel := context.WithTimeout(ctx, n.cfg.DrainTimeout)
	defer cancel()
	if err := n.api.Shutdown(drain); err != nil {
		n.log.Warn("payment API: requests still running after the drain timeout; closing their connections",
			"drain_timeout", n.cfg.DrainTimeout, "err", err)
		_ = n.api.Close()
	}
}

// Kill stops the node as a crash would: entities stop at once, whatever
// they were doing; the journal keeps what was written.
func (n *Node) Kill() {
	if n.api != nil {
		_ = n.api.Close()
	}
	switch {
	case n.Cluster != nil:
		n.Cluster.Kill()
	case n.Sharding != nil:
		n.stopFiring()
		n.Sharding.Terminate()
	}
	n.closeRest()
}

func (n *Node) stopFiring() {
	if n.firing != nil {
		n.firing.Stop()
	}
}

// metricsOrNil is the registry as a Registerer, nil (not a typed nil)
// without metrics.
func (n *Node) metricsOrNil() prometheus.Registerer {
	if n.metrics == nil {
		return nil
	}
	return n.metrics
}

func (n *Node) closeRest() {
	if n.readModel != nil {
		n.readModel.projection.Stop()
	}
	if n.done != nil {
		n.closeDone.Do(func() { close(n.done) })
	}
	if n.Simulator != nil {
		n.Simulator.Close()
	}
	if n.sim != nil {
		_ = n.sim.Close()
	}
	if n.pgJ != nil {
		_ = n.pgJ.Close()
	}
	if n.pool != nil && n.ownsPool {
		n.pool.Close()
	}
}
