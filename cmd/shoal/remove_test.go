package main

import (
	"context"
	"encoding/json"
	"errors"
	"github.com/shoal-dev/shoal/cluster"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	leasepg "github.com/shoal-dev/shoal/cluster/lease/postgres"
	"github.com/shoal-dev/shoal/internal/pgtest"
	"github.com/shoal-dev/shoal/sharding"
	shardingpg "github.com/shoal-dev/shoal/sharding/postgres"
)

func count(t *testing.T, pool *pgxpool.Pool, table, typeName string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM `+table+` WHERE type_name = $1`, typeName).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// remove-internal-data refuses (exit 3, nothing deleted) while a node
// holds the type's coordinator lease, and deletes only that type's
// allocations and remembered entities once the lease is released.
func TestRemoveInternalData(t *testing.T) {
	dsn := pg.MigratedDSN(t)
	pool := pgtest.NewPool(t, dsn, nil)
	ctx := context.Background()
	for _, typ := range []string{"payment", "other"} {
		if _, err := pool.Exec(ctx, `INSERT INTO shard_allocations (type_name, shard_id, region, epoch)
			VALUES ($1, '1', 'a#1', 1), ($1, '2', 'b#1', 1)`, typ); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `INSERT INTO remembered_entities (type_name, shard_id, entity_id)
			VALUES ($1, '1', 'e1'), ($1, '1', 'e2'), ($1, '2', 'e3')`, typ); err != nil {
			t.Fatal(err)
		}
	}
	leases := leasepg.New(pool)
	epoch, err := leases.AcquireCoordinator(ctx, "payment", "a#1", time.Hour)
	if err != nil {
		t.Fatal(err)
	}

	out, err := runCmd("remove-internal-data", "payment", "--dsn", dsn)
	if !errors.Is(err, errLeaseHeld) || exitCode(err) != 3 || !strings.Contains(err.Error(), "a#1") || out != "" {
		t.Fatalf("with the lease held: %q %v (exit %d)", out, err, exitCode(err))
	}
	if count(t, pool, "shard_allocations", "payment") != 2 || count(t, pool, "remembered_entities", "payment") != 3 {
		t.Fatal("refused, yet rows were deleted")
	}

	if err := leases.ReleaseCoordinator(ctx, "payment", epoch); err != nil {
		t.Fatal(err)
	}
	out, err = runCmd("remove-internal-data", "payment", "--dsn", dsn)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"TYPE ALLOCATIONS REMEMBERED ENTITIES", "payment 2 3"}
	if got := lines(out); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("table:\n%s", out)
	}
	if count(t, pool, "shard_allocations", "payment") != 0 || count(t, pool, "remembered_entities", "payment") != 0 {
		t.Fatal("payment's rows remain")
	}
	if count(t, pool, "shard_allocations", "other") != 2 || count(t, pool, "remembered_entities", "other") != 3 {
		t.Fatal("another type's rows were deleted")
	}
	// A write of the coordinator whose lease ran out, still on its way, is
	// fenced: it would bring back what was just deleted.
	if err := shardingpg.NewCoordinatorStore(pool).Allocate(ctx, "payment", epoch, "9", cluster.UniqueAddress{Node: "late", Incarnation: 1}); !errors.Is(err, sharding.ErrStaleEpoch) {
		t.Fatalf("a write under the removed epoch: %v, want ErrStaleEpoch", err)
	}
	// The lease row stays: the next coordinator's epoch is still newer.
	if next, err := leases.AcquireCoordinator(ctx, "payment", "b#1", time.Hour); err != nil || next <= epoch {
		t.Fatalf("epoch after the removal: %d (was %d), %v", next, epoch, err)
	}

	// A type never coordinated has nothing to race with; --json.
	out, err = runCmd("remove-internal-data", "--json", "other", "--dsn", dsn)
	if err != nil {
		t.Fatal(err)
	}
	var res removed
	if err := json.Unmarshal([]byte(out), &res); err != nil || res != (removed{Type: "other", Allocations: 2, Remembered: 3}) {
		t.Fatalf("--json: %v\n%s", err, out)
	}
}
