package migrations_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/journal"
	"github.com/shoal-dev/shoal/migrations"
)

// Rows written through the schema before 0006 get their entity type and
// slice from the migration, equal to what journal.EntityTypeOf and
// journal.SliceOf compute, and a tx_id below every transaction's.
func TestEventQueriesBackfill(t *testing.T) {
	pool := pg.EmptyPool(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := migrations.ApplyThrough(ctx, pool, 5); err != nil {
		t.Fatal(err)
	}
	pids := []string{"", "a", "Order|1", "Order|42", "payment|shop-1/order1", "Σ|ünïcode", "x|", "|lead", "no-type", "a|b|c"}
	for i := range 500 {
		pids = append(pids, fmt.Sprintf("Type%d|entity-%d", i%7, i))
	}
	for _, pid := range pids {
		if _, err := pool.Exec(ctx, `INSERT INTO event_journal (persistence_id, seq_nr, write_timestamp, manifest, payload, writer_id)
			VALUES ($1, 1, now(), 'm', '\x00', 'w')`, pid); err != nil {
			t.Fatal(err)
		}
	}
	if applied, err := migrations.Apply(ctx, pool); err != nil || len(applied) == 0 || applied[0] != 6 {
		t.Fatalf("Apply after 0005 = %v, %v; want 0006 onwards", applied, err)
	}
	var xmin string
	if err := pool.QueryRow(ctx, `SELECT pg_snapshot_xmin(pg_current_snapshot())::text`).Scan(&xmin); err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(ctx, `SELECT persistence_id, entity_type, slice, tx_id::text,
		tx_id < pg_snapshot_xmin(pg_current_snapshot()) FROM event_journal`)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for rows.Next() {
		var pid, typ, tx string
		var slice int16
		var below bool
		if err := rows.Scan(&pid, &typ, &slice, &tx, &below); err != nil {
			t.Fatal(err)
		}
		n++
		if want := journal.SliceOf(pid); int(slice) != want {
			t.Errorf("%q: backfilled slice %d, SliceOf says %d", pid, slice, want)
		}
		if want := journal.EntityTypeOf(pid); typ != want {
			t.Errorf("%q: backfilled entity type %q, EntityTypeOf says %q", pid, typ, want)
		}
		if tx != "0" || !below {
			t.Errorf("%q: backfilled tx_id %s (below xmin %s: %v), want 0", pid, tx, xmin, below)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if n != len(pids) {
		t.Fatalf("%d rows after the migration, want %d", n, len(pids))
	}

	// A row written after it records its transaction; the journal must
	// give entity type and slice (no default guesses them).
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	var own, stored string
	if err := tx.QueryRow(ctx, `SELECT pg_current_xact_id()::text`).Scan(&own); err != nil {
		t.Fatal(err)
	}
	if err := tx.QueryRow(ctx, `INSERT INTO event_journal (persistence_id, seq_nr, write_timestamp, manifest, payload, writer_id, entity_type, slice)
		VALUES ('T|new', 1, now(), 'm', '\x00', 'w', 'T', 1) RETURNING tx_id::text`).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if stored != own || stored == "0" {
		t.Fatalf("new row's tx_id %s, want its transaction's %s", stored, own)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	_, err = pool.Exec(ctx, `INSERT INTO event_journal (persistence_id, seq_nr, write_timestamp, manifest, payload, writer_id)
		VALUES ('T|old-writer', 1, now(), 'm', '\x00', 'w')`)
	if err == nil || !strings.Contains(err.Error(), "23502") {
		t.Fatalf("insert without entity type and slice = %v, want a not-null violation", err)
	}
	_, err = pool.Exec(ctx, `INSERT INTO event_journal (persistence_id, seq_nr, write_timestamp, manifest, payload, writer_id, entity_type, slice)
		VALUES ('T|bad', 1, now(), 'm', '\x00', 'w', 'T', 1024)`)
	if err == nil || !strings.Contains(err.Error(), "23514") {
		t.Fatalf("insert with slice 1024 = %v, want a check violation", err)
	}
}

// SliceOf and the SQL expression agree on many ids, not only stored ones.
func TestSliceExpressionMatchesSliceOf(t *testing.T) {
	pool := pg.EmptyPool(t)
	ctx := context.Background()
	pids := make([]string, 0, 5000)
	for i := range 5000 {
		pids = append(pids, fmt.Sprintf("E%d|%x-\u00e9-%d", i%3, i*7919, i))
	}
	rows, err := pool.Query(ctx, `SELECT p, ('x' || substr(md5(p), 1, 4))::bit(16)::int % 1024 FROM unnest($1::text[]) AS p`, pids)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var pid string
		var s int32
		if err := rows.Scan(&pid, &s); err != nil {
			t.Fatal(err)
		}
		if int(s) != journal.SliceOf(pid) {
			t.Fatalf("%q: SQL slice %d, SliceOf %d", pid, s, journal.SliceOf(pid))
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
}
