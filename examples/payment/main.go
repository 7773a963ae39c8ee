// Command payment is the PaymentActor of lerna-sample-payment-app ported to
// Shoal: a payment entity per order that settles and cancels card payments
// at an issuer, exactly once per order, behind an HTTP API.
//
//	go run ./examples/payment            # API + issuer simulator on loopback, in-memory journal
//	go run ./examples/payment -demo      # a scripted run of requests, then exit
//	go run ./examples/payment -postgres 'postgres://user:pw@127.0.0.1:5432/db'
//	go run ./examples/payment -postgres DSN -node-id n2 -seeds 127.0.0.1:7946   # a cluster node
//
// See README.md for the design.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/shoal-dev/shoal/timers"
)

func main() {
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	if err := run(signals, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "payment:", err)
		}
		os.Exit(1)
	}
}

// errForced is returned when a second signal ended the shutdown at once.
var errForced = errors.New("interrupted again: stopped at once, without waiting for the hand-off")

// run runs the program with args. The first signal on signals shuts the
// node down gracefully; a second one cuts that short: what still runs
// stops at once, as in a crash.
func run(signals <-chan os.Signal, args []string, stdout, stderr io.Writer) error {
	ctx, interrupted := context.WithCancel(context.Background())
	defer interrupted()
	force, forced := context.WithCancel(context.Background())
	defer forced()
	finished := make(chan struct{})
	defer close(finished)
	var forcedExit atomic.Bool
	go func() {
		select {
		case <-signals:
			interrupted()
		case <-finished:
			return
		}
		select {
		case <-signals:
			forcedExit.Store(true)
			forced()
		case <-finished:
		}
	}()

	opts, err := parseArgs(args, stderr)
	if err != nil {
		return err
	}
	cfg := opts.cfg
	if opts.activationLog {
		cfg.ActivationLog = stdout
	}
	if opts.probe != "" {
		return probeURL(ctx, opts.probe)
	}
	if opts.pprofAddr != "" {
		ln, err := net.Listen("tcp", opts.pprofAddr)
		if err != nil {
			return fmt.Errorf("pprof: %w", err)
		}
		defer ln.Close()
		fmt.Fprintf(stdout, "pprof at http://%s/debug/pprof/\n", ln.Addr())
		// A CPU profile or trace runs for ?seconds= (30 s by default) before
		// it writes: the write timeout leaves room for that.
		pprofServer := boundedServer(pprofMux(), 2*time.Minute)
		go func() { _ = pprofServer.Serve(ln) }()
	}
	if opts.issuerOnly {
		return serveIssuer(ctx, cfg.SimulatorAddr, opts.issuerHangAmount, stdout)
	}
	demo := opts.demo

	node, err := Start(ctx, cfg)
	if err != nil {
		return err
	}
	journal := "memory"
	if cfg.PostgresDSN != "" {
		journal = "postgres"
	}
	fmt.Fprintf(stdout, "payment API listening on %s (journal: %s)\n", node.APIURL, journal)
	if c := node.Cluster; c != nil {
		fmt.Fprintf(stdout, "cluster node %s: gossip at %s, transport at %s\n", c.Self(), c.GossipAddr(), c.TransportAddr())
	}
	fmt.Fprintf(stdout, "issuer at %s\n", node.IssuerURL)

	if demo {
		demoErr := runDemo(ctx, node, cfg.Settings, stdout)
		// The hung issuer call of the demo runs until its response timeout.
		shutdownCtx, cancel := context.WithTimeout(force, 10*time.Second+2*cfg.Issuer.ResponseTimeout)
		defer cancel()
		return errors.Join(demoErr, node.Shutdown(shutdownCtx))
	}

	fmt.Fprintf(stdout, "try: curl -X PUT -H 'X-Tenant-Id: example' -H 'Authorization: Bearer t' -d '{\"amount\":1000}' %s/00/ec/settlements/shop-1/order1/payment\n", node.APIURL)
	select {
	case <-ctx.Done():
	case err := <-node.Err():
		if !errors.Is(err, ErrLeaveRequested) {
			node.Kill()
			return err
		}
		// As on SIGTERM: the API drains, then the shards are handed off.
		fmt.Fprintln(stdout, "asked to leave the cluster")
	}
	// Entities waiting for the issuer stop after its answer or their
	// processing timeout, which is at most AskTimeout+FailSafeMargin away;
	// requests in flight get DrainTimeout of that.
	grace := cfg.Settings.AskTimeout + cfg.Settings.FailSafeMargin + 5*time.Second
	fmt.Fprintf(stdout, "shutting down: requests in flight get up to %v, the hand-off up to %v in all; interrupt again to stop at once\n",
		cfg.DrainTimeout, grace)
	shutdownCtx, cancel := context.WithTimeout(force, grace)
	defer cancel()
	err = node.Shutdown(shutdownCtx)
	if forcedExit.Load() {
		return errors.Join(errForced, err)
	}
	if err == nil {
		fmt.Fprintln(stdout, "stopped: every entity handed off, no issuer call in flight")
	}
	return err
}

// pprofMux serves the profiles of net/http/pprof, on a listener of its own
// so the API never exposes them.
func pprofMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// options are the parsed command line.
type options struct {
	cfg              Config
	demo, issuerOnly bool
	// issuerHangAmount: the -issuer-only simulator never answers requests of this amount.
	issuerHangAmount int64
	// activationLog: the activation log goes to stdout.
	activationLog    bool
	pprofAddr, probe string
}

// parseArgs parses the command line into a Config; a refused combination
// is a *FlagError.
func parseArgs(args []string, stderr io.Writer) (options, error) {
	o := options{cfg: DefaultConfig()}
	cfg := &o.cfg
	var cf clusterFlags
	flags := flag.NewFlagSet("payment", flag.ContinueOnError)
	flags.SetOutput(stderr)
	flags.StringVar(&cfg.APIAddr, "addr", cfg.APIAddr, "listen address of the payment API (and of its /ready and /alive probes)")
	flags.DurationVar(&cfg.ReadTimeout, "read-timeout", cfg.ReadTimeout, "bound on reading a whole API request, body included")
	flags.DurationVar(&cfg.WriteTimeout, "write-timeout", cfg.WriteTimeout, "bound on an API request from its headers to the end of its response (keep above the 15s ask timeout)")
	flags.DurationVar(&cfg.DrainTimeout, "drain-timeout", cfg.DrainTimeout, "at shutdown, how long requests in flight may take before their connections are closed")
	flags.DurationVar(&cfg.IdleTimeout, "idle-timeout", cfg.IdleTimeout, "close keep-alive API connections idle this long")
	flags.StringVar(&cfg.SimulatorAddr, "issuer-addr", cfg.SimulatorAddr, "listen address of the issuer simulator")
	flags.StringVar(&cfg.IssuerURL, "issuer-url", "", "call this issuer instead of starting the simulator")
	flags.BoolVar(&o.issuerOnly, "issuer-only", false, "serve only the issuer simulator, on -issuer-addr (one issuer for a cluster)")
	flags.Int64Var(&o.issuerHangAmount, "issuer-hang-amount", 0, "with -issuer-only, never answer requests of this amount (payments that stay in processing until their timeout: a test's fault)")
	flags.StringVar(&cfg.PostgresDSN, "postgres", "", "keep events in this PostgreSQL database (migrations are applied)")
	flags.StringVar(&o.pprofAddr, "pprof", "", "serve net/http/pprof on this address (e.g. 127.0.0.1:6060)")
	flags.BoolVar(&cfg.Metrics, "metrics", false, "serve Prometheus metrics at /metrics on the API address")
	flags.StringVar(&o.probe, "probe", "", "GET this URL (say http://127.0.0.1:8080/ready) and exit 0 if it answers 200, else 1: a health check for images without a shell")
	flags.BoolVar(&o.demo, "demo", false, "run a scripted demo against the simulator, then exit")
	demoStretch := flags.Int("demo-stretch", 1, "with -demo, multiply the demo's timeouts (1.5s ask, 2s processing) by this, for slow or loaded machines")
	verbose := flags.Bool("v", false, "log at debug level")
	clockSkew := flags.Duration("clock-skew", 0, "offset this node's wall clock (its entities' and its reminder firing's) by this much: a test's clock skew between nodes")
	flags.BoolVar(&cfg.Counters, "counter", false, "also serve counter entities (POST /counter/{id}/add?by=N, GET /counter/{id}): a workload for linearizability tests")
	activationLog := flags.Bool("activation-log", false, "print a line to stdout, prefixed \"ACTIVATION \", when an entity starts, stops or meets another incarnation's write: for tests that check no entity is active on two nodes at once")
	cf.register(flags)
	if err := flags.Parse(args); err != nil {
		return o, err
	}
	if strings.HasPrefix(cfg.PostgresDSN, "-") {
		return o, &FlagError{Flag: "postgres", Value: cfg.PostgresDSN, Reason: "a flag, not a DSN: is the DSN missing?"}
	}
	if flags.NArg() > 0 {
		return o, &FlagError{Flag: "", Value: flags.Arg(0), Reason: "unexpected argument (flags only)"}
	}
	level := slog.LevelInfo
	if o.demo {
		level = slog.LevelError // keep the demo's output to requests and responses
	}
	if *verbose {
		level = slog.LevelDebug
	}
	cfg.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	o.activationLog = *activationLog
	if *clockSkew != 0 {
		cfg.Clock = skewedClock{Clock: timers.Real{}, skew: *clockSkew}
	}
	var err error
	if cfg.Cluster, err = cf.config(flags, cfg.PostgresDSN); err != nil {
		return o, err
	}
	if o.demo {
		if cfg.IssuerURL != "" {
			return o, &FlagError{Flag: "demo", Value: "true", Reason: "drives the simulator; it cannot be combined with -issuer-url"}
		}
		if cfg.Cluster != nil {
			return o, &FlagError{Flag: "demo", Value: "true", Reason: "runs one node of its own; it cannot be combined with cluster flags"}
		}
		if *demoStretch < 1 {
			return o, &FlagError{Flag: "demo-stretch", Value: strconv.Itoa(*demoStretch), Reason: "must be at least 1"}
		}
		cfg.Settings, cfg.Issuer = demoTimeouts(time.Duration(*demoStretch))
	}
	if o.issuerOnly && (o.demo || cfg.Cluster != nil || cfg.IssuerURL != "") {
		return o, &FlagError{Flag: "issuer-only", Value: "true", Reason: "serves the simulator alone; it cannot be combined with -demo, -issuer-url or cluster flags"}
	}
	if o.issuerHangAmount != 0 && (!o.issuerOnly || o.issuerHangAmount < 0) {
		return o, &FlagError{Flag: "issuer-hang-amount", Value: strconv.FormatInt(o.issuerHangAmount, 10), Reason: "needs -issuer-only and a positive amount"}
	}
	return o, nil
}

// probeURL is -probe: GET url, nil if it answers 200.
func probeURL(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return &FlagError{Flag: "probe", Value: url, Reason: "not a URL", Err: err}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("probe: %s answered %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

// serveIssuer is -issuer-only: the simulator alone until ctx ends.
func serveIssuer(ctx context.Context, addr string, hangAmount int64, stdout io.Writer) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("issuer simulator: %w", err)
	}
	sim := NewSimulator()
	if hangAmount > 0 {
		sim.SetRules(Rule{Amount: hangAmount, Reaction: Reaction{Hang: true}})
	}
	mux := http.NewServeMux()
	mux.Handle("/payment", sim)
	srv := boundedServer(mux, simulatorWriteTimeout)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	fmt.Fprintf(stdout, "issuer simulator at http://%s/payment\n", ln.Addr())
	select {
	case <-ctx.Done():
	case err := <-served:
		return fmt.Errorf("issuer simulator: %w", err)
	}
	sim.Close()
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(shutdown)
}

// simulatorWriteTimeout bounds the issuer simulator's answers; its hangs
// last until the client's response timeout, which is far shorter.
const simulatorWriteTimeout = time.Minute

// boundedServer is an http.Server for h with a timeout on every phase:
// headers, the whole request, the response (write) and idle keep-alives,
// so that no client holds a connection for ever. The payment API has its
// own, configurable ones (Config).
func boundedServer(h http.Handler, write time.Duration) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      write,
		IdleTimeout:       time.Minute,
	}
}

// skewedClock is a wall clock off by skew (-clock-skew): durations, and so
// timers, are the real ones; only the time of day is wrong, as on a node
// whose clock drifted.
type skewedClock struct {
	timers.Clock
	skew time.Duration
}

func (c skewedClock) Now() time.Time { return c.Clock.Now().Add(c.skew) }
