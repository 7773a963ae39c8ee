package postgres_test

import (
	"os"
	"testing"

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
