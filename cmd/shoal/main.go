// Command shoal is Shoal's operations tool.
//
//	shoal migrate --dsn DSN
//	shoal members [--admin URL] [--token T] [--json]
//	shoal shards TYPE [--admin URL] [--token T] [--json]
//	shoal leave NODE [--admin URL] --token T [--json]
//	shoal types [--admin URL] [--token T] [--json]
//	shoal leases [--admin URL] [--token T] [--json]
//	shoal rebalance TYPE SHARD [--admin URL] --token T [--json]
//	shoal down NODE INCARNATION [--admin URL] --token T [--json]
//	shoal remove-internal-data TYPE --dsn DSN [--json]
//	shoal projections [--admin URL] [--token T] [--json]
//	shoal projection pause|resume|rebuild|reset NAME INSTANCE [--offset X] [--admin URL] --token T [--json]
//	shoal reminders [--admin URL] [--token T] [--json]
//	shoal reminder TYPE ID NAME [--admin URL] [--token T] [--json]
//
// migrate applies the embedded schema migrations (see package migrations);
// it is safe to run from several processes at once. The DSN may also come
// from $SHOAL_DSN or $DATABASE_URL. Tables go to the first schema of the
// search_path (add ?search_path=name to the DSN to choose one).
//
// members, shards, types, leases, leave, rebalance and down talk to one
// node's admin API (package node/admin): --admin or $SHOAL_ADMIN is its
// base URL (http://127.0.0.1:9001), --token or $SHOAL_TOKEN its bearer
// token (the actions need it; reads only when the node protects them).
// members lists the cluster's members as that node sees them (REACHABLE
// is "-" for a member that is Down: nobody probes it any more), shards the
// shard map of an entity type, types the entity types the node runs,
// leases the node and coordinator leases in the database. leave asks NODE
// (a node id, or node#incarnation) to leave the cluster gracefully;
// rebalance hands shard SHARD of TYPE off to be placed again; down marks
// incarnation INCARNATION of NODE (see members) down in the lease store,
// where it fences itself.
//
// projections lists every projection instance with the node running it,
// its stored offset, its lag (seconds behind the writers, and events when
// the journal counts them) and whether it is paused; any node answers for
// all of them. projection asks for an operation on one instance (INSTANCE
// is its slice range min-max, or its index): pause, resume, rebuild the
// read model from the start, or reset the offset to --offset (a journal
// offset's text, or "start"); the node running the instance applies it at
// its next lease renewal.
//
// reminders lists the durable reminders per entity type and shard as the
// store holds them (all, due now, late by more than 10 s: the same on
// every node), with, per type, what the asked node's firing holds in
// memory (due within its window) and the deliveries it sent. reminder
// shows one reminder: its shard, due time, period, command and generation
// (the delivery id).
//
// remove-internal-data deletes an entity type's sharding state from
// Postgres directly (Akka's remove-internal-cluster-sharding-data): its
// shard allocations and its remembered entities, so that the type starts
// afresh. Its events and snapshots stay. It refuses, and exits with status
// 3, while a node holds the type's coordinator lease unexpired: stop every
// node running the type first. The lease row itself stays, so that its
// fencing epoch never goes back.
//
// Output is an aligned table, or the admin API's JSON with --json. Exit
// status: 0 done, 1 failed, 2 usage, 3 refused.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "shoal:", err)
	}
	stop()
	os.Exit(exitCode(err))
}

var (
	errUsage = errors.New(`usage:
  shoal migrate --dsn DSN
  shoal members [--admin URL] [--token TOKEN] [--json]
  shoal shards TYPE [--admin URL] [--token TOKEN] [--json]
  shoal leave NODE [--admin URL] [--token TOKEN] [--json]
  shoal types [--admin URL] [--token TOKEN] [--json]
  shoal leases [--admin URL] [--token TOKEN] [--json]
  shoal rebalance TYPE SHARD [--admin URL] [--token TOKEN] [--json]
  shoal down NODE INCARNATION [--admin URL] [--token TOKEN] [--json]
  shoal remove-internal-data TYPE [--dsn DSN] [--json]
  shoal projections [--admin URL] [--token TOKEN] [--json]
  shoal projection pause|resume|rebuild|reset NAME INSTANCE [--offset OFFSET] [--admin URL] [--token TOKEN] [--json]
  shoal reminders [--admin URL] [--token TOKEN] [--json]
  shoal reminder TYPE ID NAME [--admin URL] [--token TOKEN] [--json]`)
	// errRefused: the command would be unsafe now and did nothing.
	errRefused = errors.New("refused")
)

// exitCode is the process status for run's error.
func exitCode(err error) int {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errUsage):
		return 2
	case errors.Is(err, errRefused):
		return 3
	}
	return 1
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return errUsage
	}
	switch args[0] {
	case "migrate":
		return migrate(ctx, args[1:], stdout, stderr)
	case "members":
		return members(ctx, args[1:], stdout, stderr)
	case "shards":
		return shards(ctx, args[1:], stdout, stderr)
	case "leave":
		return leave(ctx, args[1:], stdout, stderr)
	case "types":
		return types(ctx, args[1:], stdout, stderr)
	case "leases":
		return leases(ctx, args[1:], stdout, stderr)
	case "rebalance":
		return rebalance(ctx, args[1:], stdout, stderr)
	case "down":
		return down(ctx, args[1:], stdout, stderr)
	case "remove-internal-data":
		return removeInternalData(ctx, args[1:], stdout, stderr)
	case "projections":
		return projections(ctx, args[1:], stdout, stderr)
	case "projection":
		return projectionOp(ctx, args[1:], stdout, stderr)
	case "reminders":
		return reminders(ctx, args[1:], stdout, stderr)
	case "reminder":
		return reminderGet(ctx, args[1:], stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprintln(stdout, errUsage.Error())
		return nil
	default:
		return fmt.Errorf("%w (unknown command %q)", errUsage, args[0])
	}
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}
