// Command payment is the PaymentActor of lerna-sample-payment-app ported to
// Shoal: a payment entity per order that settles and cancels card payments
// at an issuer, exactly once per order, behind an HTTP API.
//
//	go run ./examples/payment            # API + issuer simulator on loopback, in-memory journal
//	go run ./examples/payment -demo      # a scripted run of requests, then exit
//	go run ./examples/payment -postgres 'postgres://user:pw@127.0.0.1:5432/db'
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
	"sync/atomic"
	"syscall"
	"time"
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

	cfg := DefaultConfig()
	flags := flag.NewFlagSet("payment", flag.ContinueOnError)
	flags.SetOutput(stderr)
	flags.StringVar(&cfg.APIAddr, "addr", cfg.APIAddr, "listen address of the payment API")
	flags.DurationVar(&cfg.ReadTimeout, "read-timeout", cfg.ReadTimeout, "bound on reading a whole API request, body included")
	flags.DurationVar(&cfg.WriteTimeout, "write-timeout", cfg.WriteTimeout, "bound on an API request from its headers to the end of its response (keep above the 15s ask timeout)")
	flags.DurationVar(&cfg.DrainTimeout, "drain-timeout", cfg.DrainTimeout, "at shutdown, how long requests in flight may take before their connections are closed")
	flags.DurationVar(&cfg.IdleTimeout, "idle-timeout", cfg.IdleTimeout, "close keep-alive API connections idle this long")
	flags.StringVar(&cfg.SimulatorAddr, "issuer-addr", cfg.SimulatorAddr, "listen address of the issuer simulator")
	flags.StringVar(&cfg.IssuerURL, "issuer-url", "", "call this issuer instead of starting the simulator")
	flags.StringVar(&cfg.PostgresDSN, "postgres", "", "keep events in this PostgreSQL database (migrations are applied)")
	pprofAddr := flags.String("pprof", "", "serve net/http/pprof on this address (e.g. 127.0.0.1:6060)")
	demo := flags.Bool("demo", false, "run a scripted demo against the simulator, then exit")
	demoStretch := flags.Int("demo-stretch", 1, "with -demo, multiply the demo's timeouts (1.5s ask, 2s processing) by this, for slow or loaded machines")
	verbose := flags.Bool("v", false, "log at debug level")
	if err := flags.Parse(args); err != nil {
		return err
	}

	level := slog.LevelInfo
	if *demo {
		level = slog.LevelError // keep the demo's output to requests and responses
	}
	if *verbose {
		level = slog.LevelDebug
	}
	cfg.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	if *demo {
		if cfg.IssuerURL != "" {
			return errors.New("-demo drives the simulator; it cannot be combined with -issuer-url")
		}
		if *demoStretch < 1 {
			return fmt.Errorf("-demo-stretch %d: must be at least 1", *demoStretch)
		}
		cfg.Settings, cfg.Issuer = demoTimeouts(time.Duration(*demoStretch))
	}

	if *pprofAddr != "" {
		ln, err := net.Listen("tcp", *pprofAddr)
		if err != nil {
			return fmt.Errorf("pprof: %w", err)
		}
		defer ln.Close()
		fmt.Fprintf(stdout, "pprof at http://%s/debug/pprof/\n", ln.Addr())
		go func() { _ = http.Serve(ln, pprofMux()) }()
	}

	node, err := Start(ctx, cfg)
	if err != nil {
		return err
	}
	journal := "memory"
	if cfg.PostgresDSN != "" {
		journal = "postgres"
	}
	fmt.Fprintf(stdout, "payment API listening on %s (journal: %s)\n", node.APIURL, journal)
	fmt.Fprintf(stdout, "issuer at %s\n", node.IssuerURL)

	if *demo {
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
		node.Kill()
		return err
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
