package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shoal-dev/shoal/migrations"
)

// dsnFlag is the --dsn flag of the commands that talk to Postgres.
func dsnFlag(fs *flag.FlagSet) *string {
	return fs.String("dsn", firstNonEmpty(os.Getenv("SHOAL_DSN"), os.Getenv("DATABASE_URL")), "PostgreSQL connection string ($SHOAL_DSN, $DATABASE_URL)")
}

func migrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dsn := dsnFlag(fs)
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
