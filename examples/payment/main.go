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
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "payment:", err)
		}
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg := DefaultConfig()
	flags := flag.NewFlagSet("payment", flag.ContinueOnError)
	flags.SetOutput(stderr)
	flags.StringVar(&cfg.APIAddr, "addr", cfg.APIAddr, "listen address of the payment API")
	flags.DurationVar(&cfg.ReadTimeout, "read-timeout", cfg.ReadTimeout, "bound on reading a whole API request, body included")
	flags.DurationVar(&cfg.WriteTimeout, "write-timeout", cfg.WriteTimeout, "bound on an API request from its headers to the end of its response (keep above the 15s ask timeout)")
	flags.DurationVar(&cfg.IdleTimeout, "idle-timeout", cfg.IdleTimeout, "close keep-alive API connections idle this long")
	flags.StringVar(&cfg.SimulatorAddr, "issuer-addr", cfg.SimulatorAddr, "listen address of the issuer simulator")
	flags.StringVar(&cfg.IssuerURL, "issuer-url", "", "call this issuer instead of starting the simulator")
	flags.StringVar(&cfg.PostgresDSN, "postgres", "", "keep events in this PostgreSQL database (migrations are applied)")
	demo := flags.Bool("demo", false, "run a scripted demo against the simulator, then exit")
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
		cfg.Settings, cfg.Issuer = demoTimeouts()
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
		demoErr := runDemo(ctx, node, stdout)
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
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
	// processing timeout, which is at most AskTimeout+FailSafeMargin away.
	grace := cfg.Settings.AskTimeout + cfg.Settings.FailSafeMargin + 5*time.Second
	fmt.Fprintf(stdout, "shutting down (up to %v)\n", grace)
	shutdownCtx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	return node.Shutdown(shutdownCtx)
}
