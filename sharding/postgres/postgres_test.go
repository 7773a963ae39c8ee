package postgres_test

import (
	"context"
	"errors"
	"github.com/shoal-dev/shoal/cluster"
	"net"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shoal-dev/shoal/cluster/lease"
	"github.com/shoal-dev/shoal/cluster/lease/leasetest"
	"github.com/shoal-dev/shoal/internal/pgtest"
	"github.com/shoal-dev/shoal/sharding"
	"github.com/shoal-dev/shoal/sharding/postgres"
	"github.com/shoal-dev/shoal/sharding/shardingtest"
)

var pg = pgtest.New()

func TestMain(m *testing.M) { os.Exit(pg.Run(m)) }

func TestCoordinatorStoreConformance(t *testing.T) {
	shardingtest.RunCoordinatorStore(t, func(t *testing.T, clock *leasetest.Clock) sharding.CoordinatorStore {
		return postgres.NewCoordinatorStore(pg.Pool(t), postgres.WithClock(clock.Now))
	})
}

func TestRememberStoreConformance(t *testing.T) {
	shardingtest.RunRememberStore(t, func(t *testing.T) sharding.RememberStore {
		return postgres.NewRememberStore(pg.Pool(t))
	})
}

// TestStoresShareOneSchema runs the suites with every subtest on one
// schema, as a cluster's nodes share one: type names keep them apart.
func TestStoresShareOneSchema(t *testing.T) {
	pool := pg.Pool(t)
	t.Run("Coordinator", func(t *testing.T) {
		shardingtest.RunCoordinatorStore(t, func(_ *testing.T, clock *leasetest.Clock) sharding.CoordinatorStore {
			return postgres.NewCoordinatorStore(pool, postgres.WithClock(clock.Now))
		})
	})
	t.Run("Remember", func(t *testing.T) {
		shardingtest.RunRememberStore(t, func(*testing.T) sharding.RememberStore {
			return postgres.NewRememberStore(pool)
		})
	})
}

// TestAllocationRecordsEpoch checks that each allocation row carries the
// epoch that wrote it, which the schema promises.
func TestAllocationRecordsEpoch(t *testing.T) {
	pool := pg.Pool(t)
	ctx := context.Background()
	s := postgres.NewCoordinatorStore(pool)
	e1, _, err := s.Acquire(ctx, "T", cluster.UniqueAddress{Node: "a", Incarnation: 1}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Allocate(ctx, "T", e1, "s1", cluster.UniqueAddress{Node: "r1", Incarnation: 1}); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, "T", e1); err != nil {
		t.Fatal(err)
	}
	e2, _, err := s.Acquire(ctx, "T", cluster.UniqueAddress{Node: "b", Incarnation: 1}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Allocate(ctx, "T", e2, "s1", cluster.UniqueAddress{Node: "r2", Incarnation: 1}); err != nil {
		t.Fatal(err)
	}
	var epoch int64
	if err := pool.QueryRow(ctx, `SELECT epoch FROM shard_allocations WHERE type_name = 'T' AND shard_id = 's1'`).Scan(&epoch); err != nil {
		t.Fatal(err)
	}
	if uint64(epoch) != e2 {
		t.Fatalf("allocation row epoch %d, want %d", epoch, e2)
	}
}

// TestDatabaseUnreachable: every operation on a pool whose server does not
// answer returns an error, not a stale-epoch verdict, a panic or silence.
func TestDatabaseUnreachable(t *testing.T) {
	// A loopback port nothing listens on any more.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cfg, err := pgxpool.ParseConfig("postgres://shoal:shoal@" + addr + "/shoal?sslmode=disable&connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg) // connects lazily
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()

	cs := postgres.NewCoordinatorStore(pool)
	rs := postgres.NewRememberStore(pool)
	_, _, acqErr := cs.Acquire(ctx, "T", cluster.UniqueAddress{Node: "a", Incarnation: 1}, time.Second)
	_, entErr := rs.Entities(ctx, "T", "s1")
	for name, err := range map[string]error{
		"Acquire":    acqErr,
		"Renew":      cs.Renew(ctx, "T", 1, time.Second),
		"Release":    cs.Release(ctx, "T", 1),
		"Allocate":   cs.Allocate(ctx, "T", 1, "s1", cluster.UniqueAddress{Node: "r1", Incarnation: 1}),
		"Deallocate": cs.Deallocate(ctx, "T", 1, "s1"),
		"Entities":   entErr,
		"Add":        rs.Add(ctx, "T", "s1", "e1"),
		"Remove":     rs.Remove(ctx, "T", "s1", "e1"),
	} {
		if err == nil {
			t.Errorf("%s succeeded against an unreachable database", name)
			continue
		}
		if lease.Refused(err) || errors.Is(err, sharding.ErrLeaseHeld) {
			t.Errorf("%s: %v: an outage is not the store's verdict", name, err)
		}
		t.Logf("%s: %v", name, err)
	}
}
