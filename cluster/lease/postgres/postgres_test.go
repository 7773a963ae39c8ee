package postgres_test

import (
	"context"
	"errors"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/cluster/lease"
	"github.com/shoal-dev/shoal/cluster/lease/leasetest"
	"github.com/shoal-dev/shoal/cluster/lease/postgres"
	"github.com/shoal-dev/shoal/internal/pgtest"
	"github.com/shoal-dev/shoal/sharding"
	shardingpg "github.com/shoal-dev/shoal/sharding/postgres"
)

var pg = pgtest.New()

func TestMain(m *testing.M) { os.Exit(pg.Run(m)) }

func TestLeaseStoreConformance(t *testing.T) {
	leasetest.Run(t, func(t *testing.T, clock *leasetest.Clock) lease.Store {
		return postgres.New(pg.Pool(t), postgres.WithClock(clock.Now))
	})
}

// TestStoresShareOneSchema runs the suite with every subtest on one
// schema, as a cluster's nodes share one.
func TestStoresShareOneSchema(t *testing.T) {
	pool := pg.Pool(t)
	leasetest.Run(t, func(t *testing.T, clock *leasetest.Clock) lease.Store {
		return postgres.New(pool, postgres.WithClock(clock.Now))
	})
}

// TestExpiryOnDatabaseTime: without WithClock, an expiry is the server's
// clock at the operation plus the ttl, not the client's.
func TestExpiryOnDatabaseTime(t *testing.T) {
	pool := pg.Pool(t)
	ctx := context.Background()
	s := postgres.New(pool)
	node := cluster.UniqueAddress{Node: "a", Incarnation: 1}
	const ttl = time.Hour

	var before time.Time
	if err := pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&before); err != nil {
		t.Fatal(err)
	}
	if err := s.AcquireNode(ctx, node, ttl); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AcquireCoordinator(ctx, "T", "a#1", ttl); err != nil {
		t.Fatal(err)
	}
	var after time.Time
	if err := pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&after); err != nil {
		t.Fatal(err)
	}
	var nodeExp, coordExp time.Time
	if err := pool.QueryRow(ctx, `SELECT expires_at FROM node_leases WHERE node_id = 'a'`).Scan(&nodeExp); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `SELECT expires_at FROM coordinator_lease WHERE type_name = 'T'`).Scan(&coordExp); err != nil {
		t.Fatal(err)
	}
	for name, exp := range map[string]time.Time{"node": nodeExp, "coordinator": coordExp} {
		if exp.Before(before.Add(ttl)) || exp.After(after.Add(ttl)) {
			t.Errorf("%s lease expires at %v, want server time within [%v, %v] + 1h", name, exp, before, after)
		}
	}
	// A lease the server already considers expired: downed and released.
	if err := s.ReleaseNode(ctx, node); err != nil {
		t.Fatal(err)
	}
	if exp, err := s.NodeLeaseExpired(ctx, node); err != nil || !exp {
		t.Fatalf("released lease: expired %v, %v", exp, err)
	}
}

// TestCoordinatorLeaseFencesAllocations: a coordinator that acquires the
// lease here fences the allocation writes of its predecessor in
// sharding/postgres, which checks the same row's epoch, and a lease
// sharding/postgres handed out is held here.
func TestCoordinatorLeaseFencesAllocations(t *testing.T) {
	pool := pg.Pool(t)
	ctx := context.Background()
	clock := leasetest.NewClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	leases := postgres.New(pool, postgres.WithClock(clock.Now))
	allocations := shardingpg.NewCoordinatorStore(pool, shardingpg.WithClock(clock.Now))

	e1, err := leases.AcquireCoordinator(ctx, "T", "a#1", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := allocations.Allocate(ctx, "T", e1, "s1", cluster.UniqueAddress{Node: "a", Incarnation: 1}); err != nil {
		t.Fatalf("holder's write: %v", err)
	}
	clock.Advance(10 * time.Second)
	e2, err := leases.AcquireCoordinator(ctx, "T", "b#1", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := allocations.Allocate(ctx, "T", e1, "s1", cluster.UniqueAddress{Node: "a", Incarnation: 1}); !errors.Is(err, sharding.ErrStaleEpoch) {
		t.Fatalf("old holder's write after takeover: %v, want sharding.ErrStaleEpoch", err)
	}
	if err := allocations.Allocate(ctx, "T", e2, "s1", cluster.UniqueAddress{Node: "b", Incarnation: 1}); err != nil {
		t.Fatalf("new holder's write: %v", err)
	}
	if _, _, err := allocations.Acquire(ctx, "T", cluster.UniqueAddress{Node: "c", Incarnation: 1}, time.Second); !errors.Is(err, lease.ErrLeaseHeld) {
		t.Fatalf("sharding/postgres Acquire of a held lease: %v, want ErrLeaseHeld", err)
	}
}

// TestDatabaseUnreachable: against a server that does not answer, every
// operation fails with an error that is not one of the store's verdicts,
// so a Holder retries instead of fencing at once.
func TestDatabaseUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there any more
	cfg, err := pgxpool.ParseConfig("postgres://shoal:shoal@" + addr + "/shoal?sslmode=disable&connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	s := postgres.New(pool)
	node := cluster.UniqueAddress{Node: "a", Incarnation: 1}
	_, expErr := s.NodeLeaseExpired(ctx, node)
	_, acqErr := s.AcquireCoordinator(ctx, "T", "a#1", time.Second)
	for name, err := range map[string]error{
		"AcquireNode":        s.AcquireNode(ctx, node, time.Second),
		"RenewNode":          s.RenewNode(ctx, node, time.Second),
		"DownNode":           s.DownNode(ctx, node),
		"ReleaseNode":        s.ReleaseNode(ctx, node),
		"NodeLeaseExpired":   expErr,
		"AcquireCoordinator": acqErr,
		"RenewCoordinator":   s.RenewCoordinator(ctx, "T", 1, time.Second),
		"ReleaseCoordinator": s.ReleaseCoordinator(ctx, "T", 1),
	} {
		if err == nil {
			t.Errorf("%s succeeded against an unreachable database", name)
			continue
		}
		for _, verdict := range []error{lease.ErrNoLease, lease.ErrLeaseExpired, lease.ErrNodeDown, lease.ErrStaleEpoch, lease.ErrLeaseHeld, lease.ErrStaleIncarnation} {
			if errors.Is(err, verdict) {
				t.Errorf("%s: %v: an outage is not %v", name, err, verdict)
			}
		}
	}
}

// TestListLeases: operators see the live node leases (downed and released
// ones left out, expired ones marked) and every coordinator lease.
func TestListLeases(t *testing.T) {
	pool := pg.Pool(t)
	ctx := context.Background()
	clock := leasetest.NewClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	s := postgres.New(pool, postgres.WithClock(clock.Now))
	a1, b1, b2, c1 := cluster.UniqueAddress{Node: "a", Incarnation: 1}, cluster.UniqueAddress{Node: "b", Incarnation: 1},
		cluster.UniqueAddress{Node: "b", Incarnation: 2}, cluster.UniqueAddress{Node: "c", Incarnation: 1}
	for _, n := range []cluster.UniqueAddress{a1, b1, c1} {
		if err := s.AcquireNode(ctx, n, 10*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	clock.Advance(5 * time.Second)
	if err := s.AcquireNode(ctx, b2, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := s.DownNode(ctx, c1); err != nil {
		t.Fatal(err)
	}
	if err := s.ReleaseNode(ctx, b1); err != nil {
		t.Fatal(err)
	}
	epoch, err := s.AcquireCoordinator(ctx, "T", "b#2", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	clock.Advance(6 * time.Second) // a#1 expired, b#2 not

	nodes, err := s.NodeLeases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	want := []postgres.NodeLease{
		{Node: a1, ExpiresAt: start.Add(10 * time.Second), Expired: true},
		{Node: b2, ExpiresAt: start.Add(25 * time.Second)},
	}
	if len(nodes) != len(want) {
		t.Fatalf("node leases %+v, want %+v", nodes, want)
	}
	for i := range want {
		if nodes[i].Node != want[i].Node || !nodes[i].ExpiresAt.Equal(want[i].ExpiresAt) || nodes[i].Expired != want[i].Expired {
			t.Fatalf("node lease %d: %+v, want %+v", i, nodes[i], want[i])
		}
	}
	coords, err := s.CoordinatorLeases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(coords) != 1 || coords[0].Name != "T" || coords[0].Owner != "b#2" || coords[0].Epoch != epoch ||
		!coords[0].ExpiresAt.Equal(start.Add(15*time.Second)) || coords[0].Expired {
		t.Fatalf("coordinator leases %+v", coords)
	}
}

// ExpiredNodes names the incarnations asked about whose lease expired in
// the store's time, released and downed-and-expired ones included, and
// none it does not know; and the time left on the first live lease to end.
func TestExpiredNodes(t *testing.T) {
	ctx := context.Background()
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := postgres.New(pg.Pool(t), postgres.WithClock(func() time.Time { return clock }))
	live := cluster.UniqueAddress{Node: "live", Incarnation: 1}
	lapsed := cluster.UniqueAddress{Node: "lapsed", Incarnation: 1}
	left := cluster.UniqueAddress{Node: "left", Incarnation: 1}
	unknown := cluster.UniqueAddress{Node: "unknown", Incarnation: 1}
	later := cluster.UniqueAddress{Node: "later", Incarnation: 1}
	for _, n := range []cluster.UniqueAddress{lapsed, left} {
		if err := s.AcquireNode(ctx, n, time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.ReleaseNode(ctx, left); err != nil {
		t.Fatal(err)
	}
	clock = clock.Add(time.Second)
	if err := s.AcquireNode(ctx, live, 1500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := s.AcquireNode(ctx, later, 3*time.Second); err != nil {
		t.Fatal(err)
	}
	clock = clock.Add(250 * time.Millisecond)
	got, next, err := s.ExpiredNodes(ctx, []cluster.UniqueAddress{later, live, lapsed, left, unknown})
	if err != nil {
		t.Fatal(err)
	}
	if next != 1250*time.Millisecond {
		t.Fatalf("next %v, want 1.25s: the time left on live's lease", next)
	}
	slices.SortFunc(got, func(a, b cluster.UniqueAddress) int { return strings.Compare(a.Node, b.Node) })
	if want := []cluster.UniqueAddress{lapsed, left}; !slices.Equal(got, want) {
		t.Fatalf("expired %v, want %v", got, want)
	}
	if _, next, _ := s.ExpiredNodes(ctx, []cluster.UniqueAddress{lapsed}); next != 0 {
		t.Fatalf("next %v with no live lease asked about, want 0", next)
	}
	if _, _, err := s.ExpiredNodes(ctx, []cluster.UniqueAddress{{}}); !errors.Is(err, lease.ErrInvalidConfig) {
		t.Fatalf("an empty node id: %v, want ErrInvalidConfig", err)
	}
}
