package pgtest_test

import (
	"context"
	"os"
	"testing"

	"github.com/shoal-dev/shoal/internal/pgtest"
)

var pg = pgtest.New()

func TestMain(m *testing.M) { os.Exit(pg.Run(m)) }

func TestSchemasAreIsolated(t *testing.T) {
	ctx := context.Background()
	a, b := pg.EmptyPool(t), pg.EmptyPool(t)
	if _, err := a.Exec(ctx, `CREATE TABLE only_in_a (x int)`); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Exec(ctx, `SELECT * FROM only_in_a`); err == nil {
		t.Fatal("a table of one test's schema is visible from another's")
	}
	var n int
	if err := pg.Pool(t).QueryRow(ctx, `SELECT count(*) FROM event_journal`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("migrated pool: count = %d, err = %v", n, err)
	}
}
