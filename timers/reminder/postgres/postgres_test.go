package postgres_test

import (
	"os"
	"testing"

	"github.com/shoal-dev/shoal/internal/pgtest"
	"github.com/shoal-dev/shoal/timers/reminder"
	"github.com/shoal-dev/shoal/timers/reminder/postgres"
	"github.com/shoal-dev/shoal/timers/reminder/remindertest"
)

var pg = pgtest.New()

func TestMain(m *testing.M) { os.Exit(pg.Run(m)) }

func TestConformance(t *testing.T) {
	pool := pg.Pool(t)
	remindertest.Run(t, func(t *testing.T) reminder.Store { return postgres.New(pool) })
}
