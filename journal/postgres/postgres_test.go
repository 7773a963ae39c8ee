package postgres_test

import (
	"os"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shoal-dev/shoal/internal/pgtest"
	"github.com/shoal-dev/shoal/journal"
	"github.com/shoal-dev/shoal/journal/journaltest"
	"github.com/shoal-dev/shoal/journal/postgres"
)

var (
	pg      = pgtest.New()
	pgBench = pgtest.New(pgtest.WithFsync()) // benchmarks: fsync on, as in production
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m, pg, pgBench)) }

func newJournal(t *testing.T, cfg postgres.Config) *postgres.Journal {
	t.Helper()
	j := postgres.New(pg.Pool(t), cfg)
	t.Cleanup(func() { j.Close() })
	return j
}

func TestConformance(t *testing.T) {
	journaltest.Run(t, func(t *testing.T) journal.Journal { return newJournal(t, postgres.Config{}) })
}

// Small batches and pages exercise batch splitting and paging.
func TestConformanceSmallBatches(t *testing.T) {
	journaltest.Run(t, func(t *testing.T) journal.Journal {
		return newJournal(t, postgres.Config{MaxBatchEvents: 3, ReplayPageSize: 7, Writers: 2})
	})
}

// One connection for everything: replay prefetching, callbacks that use the
// journal and the writer goroutines must share it without deadlock.
func TestConformanceOneConnection(t *testing.T) {
	journaltest.Run(t, func(t *testing.T) journal.Journal {
		pool := pgtest.NewPool(t, pg.MigratedDSN(t), func(c *pgxpool.Config) { c.MaxConns = 1 })
		j := postgres.New(pool, postgres.Config{ReplayPageSize: 100})
		t.Cleanup(func() { j.Close() })
		return j
	})
}

func TestQueriesConformance(t *testing.T) {
	journaltest.RunQueries(t, func(t *testing.T) journaltest.QueryJournal { return newJournal(t, postgres.Config{}) })
}

// Small pages and batches exercise paging; one connection in the pool
// checks that no query holds it while its callback runs.
func TestQueriesConformanceSmallPagesOneConnection(t *testing.T) {
	journaltest.RunQueries(t, func(t *testing.T) journaltest.QueryJournal {
		pool := pgtest.NewPool(t, pg.MigratedDSN(t), func(c *pgxpool.Config) { c.MaxConns = 1 })
		j := postgres.New(pool, postgres.Config{QueryPageSize: 3, MaxBatchEvents: 3, Writers: 2})
		t.Cleanup(func() { j.Close() })
		return j
	})
}
