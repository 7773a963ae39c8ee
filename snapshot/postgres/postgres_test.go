package postgres_test

import (
	"os"
	"testing"

	"github.com/shoal-dev/shoal/internal/pgtest"
	"github.com/shoal-dev/shoal/snapshot"
	"github.com/shoal-dev/shoal/snapshot/postgres"
	"github.com/shoal-dev/shoal/snapshot/snapshottest"
)

var pg = pgtest.New()

func TestMain(m *testing.M) { os.Exit(pg.Run(m)) }

func TestConformance(t *testing.T) {
	snapshottest.Run(t, func(t *testing.T) snapshot.Store { return postgres.New(pg.Pool(t)) })
}
