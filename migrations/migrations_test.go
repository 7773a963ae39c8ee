package migrations_test

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shoal-dev/shoal/internal/pgtest"
	"github.com/shoal-dev/shoal/migrations"
)

var pg = pgtest.New()

func TestMain(m *testing.M) { os.Exit(pg.Run(m)) }

func TestAll(t *testing.T) {
	all, err := migrations.All()
	if err != nil {
		t.Fatal(err)
	}
	if len(all) == 0 {
		t.Fatal("no migrations embedded")
	}
	for i, m := range all {
		if m.Version != i+1 || m.Name == "" || m.SQL == "" {
			t.Fatalf("migration %d = {%d %q %d bytes}, want version %d, a name and SQL", i, m.Version, m.Name, len(m.SQL), i+1)
		}
	}
}

func TestApplyIdempotent(t *testing.T) {
	pool := pg.EmptyPool(t)
	ctx := context.Background()
	all, _ := migrations.All()

	if v, err := migrations.Version(ctx, pool); err != nil || v != 0 {
		t.Fatalf("Version of an empty schema = %d, %v; want 0", v, err)
	}
	applied, err := migrations.Apply(ctx, pool)
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if len(applied) != len(all) {
		t.Fatalf("first Apply applied %v, want all %d", applied, len(all))
	}
	applied, err = migrations.Apply(ctx, pool)
	if err != nil || len(applied) != 0 {
		t.Fatalf("second Apply: applied %v, err %v; want nothing", applied, err)
	}
	if v, err := migrations.Version(ctx, pool); err != nil || v != all[len(all)-1].Version {
		t.Fatalf("Version = %d, %v; want %d", v, err, all[len(all)-1].Version)
	}
	for _, table := range []string{"event_journal", "event_journal_deleted", "snapshots", "coordinator_lease", "shard_allocations", "remembered_entities", "node_leases", "shard_mail_holders"} {
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{table}.Sanitize()).Scan(&n); err != nil {
			t.Errorf("table %s: %v", table, err)
		}
	}
}

// TestApplyConcurrent runs Apply from several connections at once, as several
// processes starting together would: exactly one applies each version.
func TestApplyConcurrent(t *testing.T) {
	dsn := pg.SchemaDSN(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	all, _ := migrations.All()

	const n = 8
	conns := make([]*pgx.Conn, n)
	for i := range conns {
		c, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.Background())
		conns[i] = c
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	results := make([][]int, n)
	errs := make([]error, n)
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			results[i], errs[i] = migrations.Apply(ctx, c)
		}()
	}
	close(start)
	wg.Wait()
	count := map[int]int{}
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("Apply %d: %v", i, errs[i])
		}
		for _, v := range results[i] {
			count[v]++
		}
	}
	for _, m := range all {
		if count[m.Version] != 1 {
			t.Errorf("version %d applied %d times, want once", m.Version, count[m.Version])
		}
	}
	var rows int
	if err := conns[0].QueryRow(ctx, "SELECT count(*) FROM shoal_schema_migrations").Scan(&rows); err != nil || rows != len(all) {
		t.Fatalf("shoal_schema_migrations has %d rows (%v), want %d", rows, err, len(all))
	}
}

// TestSchemasIndependent: two schemas of one database migrate separately.
func TestSchemasIndependent(t *testing.T) {
	ctx := context.Background()
	a, b := pg.EmptyPool(t), pg.EmptyPool(t)
	if _, err := migrations.Apply(ctx, a); err != nil {
		t.Fatal(err)
	}
	if v, err := migrations.Version(ctx, b); err != nil || v != 0 {
		t.Fatalf("other schema at version %d (%v), want 0", v, err)
	}
	if applied, err := migrations.Apply(ctx, b); err != nil || len(applied) == 0 {
		t.Fatalf("Apply on the second schema: %v %v", applied, err)
	}
}
