package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/shoal-dev/shoal/internal/pgtest"
)

var pg = pgtest.New()

func TestMain(m *testing.M) { os.Exit(pg.Run(m)) }

func TestUsage(t *testing.T) {
	t.Setenv("SHOAL_DSN", "")
	t.Setenv("DATABASE_URL", "")
	for _, args := range [][]string{nil, {"nope"}, {"migrate"}, {"migrate", "--dsn", "x", "extra"}} {
		if err := run(context.Background(), args, &bytes.Buffer{}, &bytes.Buffer{}); !errors.Is(err, errUsage) {
			t.Errorf("run %q: err = %v, want usage", args, err)
		}
	}
}

func TestMigrate(t *testing.T) {
	dsn := pg.SchemaDSN(t)
	var out bytes.Buffer
	if err := run(context.Background(), []string{"migrate", "--dsn", dsn}, &out, &out); err != nil {
		t.Fatalf("migrate: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "applied") {
		t.Fatalf("first migrate printed %q", out.String())
	}
	out.Reset()
	if err := run(context.Background(), []string{"migrate", "--dsn", dsn}, &out, &out); err != nil {
		t.Fatalf("second migrate: %v", err)
	}
	if !strings.Contains(out.String(), "up to date") {
		t.Fatalf("second migrate printed %q", out.String())
	}
}
