package postgres_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shoal-dev/shoal/internal/pgtest"
	"github.com/shoal-dev/shoal/projection"
)

const faultApp = "projection-under-test"

// faultPool is a pool whose connections carry faultApp, so that a test can
// terminate exactly them, and that gives up connecting quickly.
func faultPool(t *testing.T, dsn string) *pgxpool.Pool {
	return pgtest.NewPool(t, dsn, func(c *pgxpool.Config) {
		c.MaxConns = 4
		c.ConnConfig.ConnectTimeout = 2 * time.Second
		c.ConnConfig.RuntimeParams["application_name"] = faultApp
	})
}

// terminate ends every backend of the projection's pool.
func terminate(t *testing.T, admin *pgxpool.Pool) int {
	t.Helper()
	var n int
	err := admin.QueryRow(context.Background(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE application_name = $1 AND pid <> pg_backend_pid()`, faultApp).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// strict makes any failure not classified as transient stop the run: the
// faults below must only delay the projection.
func strict() projection.Settings {
	s := settings()
	s.Retry.MaxRetries = 0
	s.OnFailure = projection.StopOnFailure
	return s
}

// TestConnectionsTerminated kills the projection's database connections
// in the middle of a handler (after its write, before the commit) and
// between batches; the projection retries by itself, and the read model
// is the exact fold of the events.
func TestConnectionsTerminated(t *testing.T) {
	dsn := pg.MigratedDSN(t)
	admin := pgtest.NewPool(t, dsn, nil)
	c := newCounters(t, faultPool(t, dsn))
	for i := range 100 {
		c.add(fmt.Sprintf("c%d", i%9), i)
	}
	inHandler, terminated := make(chan struct{}), make(chan struct{})
	var armed atomic.Bool
	armed.Store(true)
	p := c.project(strict(), func(ctx context.Context, tx pgx.Tx, env projection.Envelope[Added]) error {
		if err := apply(ctx, tx, env); err != nil {
			return err
		}
		if env.Event.N == 50 && armed.CompareAndSwap(true, false) {
			close(inHandler)
			<-terminated // the commit that follows finds its connection gone
		}
		return nil
	})
	r := run(p)
	defer r.stop()

	<-inHandler
	if n := terminate(t, admin); n == 0 {
		t.Fatal("no connection of the projection to terminate")
	}
	close(terminated)
	first := c.src.Events()[99].Offset
	poll(t, "the first 100 events", func() bool { return p.Status().Offset == first })

	// Between batches: the pool's idle connections are dead when the
	// next events come.
	terminate(t, admin)
	for i := range 100 {
		c.add(fmt.Sprintf("c%d", i%9), 1000+i)
	}
	last := c.src.Events()[199].Offset
	poll(t, "the next 100 events", func() bool { return p.Status().Offset == last })
	select {
	case <-r.ended:
		t.Fatalf("Run ended: %v", r.err)
	default:
	}
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	c.check(c.fold)
	if st := p.Status(); st.Retried == 0 {
		t.Fatalf("status %+v: the killed commit was not retried", st)
	}
}

// TestDatabaseRestart stops the Postgres server while a grouped
// exactly-once projection is handling a stream, then starts it again.
func TestDatabaseRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("restarts a container")
	}
	srv := pgtest.Start(t)
	c := newCounters(t, faultPool(t, srv.MigratedDSN(t)))
	for i := range 300 {
		c.add(fmt.Sprintf("c%d", i%11), i)
	}
	s := strict()
	s.Retry.MaxInterval = 500 * time.Millisecond
	var txs atomic.Int64
	p, err := projection.New(c.config(s), postgresGrouped(c, 8, &txs))
	if err != nil {
		t.Fatal(err)
	}
	r := run(p)
	defer r.stop()
	poll(t, "handling to start", func() bool { return txs.Load() >= 5 })

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	timeout := 10 * time.Second
	if err := srv.Container(t).Stop(ctx, &timeout); err != nil {
		t.Fatalf("stop container: %v", err)
	}
	for i := range 100 { // written while the database is down
		c.add(fmt.Sprintf("c%d", i%11), 5000+i)
	}
	if err := srv.Container(t).Start(ctx); err != nil {
		t.Fatalf("start container: %v", err)
	}
	srv.WaitReady(t, ctx)
	last := c.src.Events()[399].Offset
	poll(t, "every event after the restart", func() bool { return p.Status().Offset == last })
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	c.check(c.fold)
	t.Logf("status after the outage: %+v", p.Status())
}
