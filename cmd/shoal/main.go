// Command shoal is Shoal's operations tool.
//
//	shoal migrate --dsn postgres://user:pass@host:5432/db
//
// migrate applies the embedded schema migrations (see package migrations);
// it is safe to run from several processes at once. The DSN may also come
// from $SHOAL_DSN or $DATABASE_URL. Tables go to the first schema of the
// search_path (add ?search_path=name to the DSN to choose one).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shoal-dev/shoal/migrations"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "shoal:", err)
		if errors.Is(err, errUsage) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

var errUsage = errors.New("usage: shoal migrate --dsn DSN")

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return errUsage
	}
	switch args[0] {
	case "migrate":
		return migrate(ctx, args[1:], stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprintln(stdout, errUsage.Error())
		return nil
	default:
		return fmt.Errorf("%w (unknown command %q)", errUsage, args[0])
	}
}

func migrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dsn := fs.String("dsn", firstNonEmpty(os.Getenv("SHOAL_DSN"), os.Getenv("DATABASE_URL")), "PostgreSQL connection string")
	timeout := fs.Duration("timeout", 5*time.Minute, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	if *dsn == "" || fs.NArg() > 0 {
		return errUsage
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, *dsn)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	applied, err := migrations.Apply(ctx, conn)
	if err != nil {
		return err
	}
	v, err := migrations.Version(ctx, conn)
	if err != nil {
		return err
	}
	if len(applied) == 0 {
		fmt.Fprintf(stdout, "schema up to date at version %d\n", v)
		return nil
	}
	fmt.Fprintf(stdout, "applied %v; schema at version %d\n", applied, v)
	return nil
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}
