// Package migrations holds Shoal's PostgreSQL schema as embedded SQL files
// and applies them.
//
// Files are named NNNN_name.sql and applied in version order, each once: the
// table shoal_schema_migrations records the versions applied. Apply runs in
// one transaction under a transaction-scoped advisory lock, so several
// processes may call it at once: one applies, the others wait and then find
// nothing to do. Tables are created in the first schema of the connection's
// search_path, so one database can hold several independent Shoal schemas.
//
// The schema:
//
//   - event_journal: one row per event, primary key (persistence_id, seq_nr),
//     a global ordering identity, write timestamp, manifest, payload, tags,
//     writer id; since 0006 also the entity type, the slice and the id of
//     the writing transaction (tx_id), indexed for the journal's queries by
//     slice range and by tag.
//   - event_journal_deleted: per persistence id, the highest seq nr removed by
//     DeleteTo. The highest seq nr of a persistence id is the greater of this
//     and its highest stored event, so it survives deletion.
//   - snapshots: primary key (persistence_id, seq_nr).
//   - coordinator_lease, shard_allocations (with the fencing epoch),
//     shard_mail_holders (the region holding mail for a shard without a
//     home) and remembered_entities for sharding.
//   - node_leases: one lease per node incarnation, with its expiry on the
//     database's clock and whether it was downed (cluster/lease/postgres).
//   - projection_offsets: per projection instance, its offset and the lease
//     (holder, epoch, expiry) that fences it; projection_dead_letters: the
//     events a projection set aside (package projection/postgres);
//     projection_requests: operations queued for an instance's holder,
//     and beside each instance's lease the holder's last report.
//   - reminders: durable reminders, one row per (entity type, entity id,
//     name), with the shard, the due time on the database's clock, the
//     period, the command and the generation (the delivery id), indexed by
//     (entity type, shard, due time) (timers/reminder/postgres).
package migrations

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

//go:embed sql/*.sql
var files embed.FS

// Migration is one schema step.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// All returns the embedded migrations in version order.
func All() ([]Migration, error) {
	return load(files)
}

func load(fsys fs.FS) ([]Migration, error) {
	names, err := fs.Glob(fsys, "sql/*.sql")
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	var out []Migration
	seen := map[int]string{}
	for _, name := range names {
		base := strings.TrimSuffix(path.Base(name), ".sql")
		num, label, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migrations: %s: want a name like 0001_name.sql", name)
		}
		if other, dup := seen[v]; dup {
			return nil, fmt.Errorf("migrations: %s and %s share version %d", other, name, v)
		}
		seen[v] = name
		body, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, fmt.Errorf("migrations: %w", err)
		}
		out = append(out, Migration{Version: v, Name: label, SQL: string(body)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out, nil
}

// DB is what Apply needs: *pgxpool.Pool, *pgx.Conn and pgx.Tx all have it.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Apply brings the schema up to date. It returns the versions it applied,
// none when the schema was current. Versions in the database that this
// binary does not know (a newer binary migrated it) are left alone.
func Apply(ctx context.Context, db DB) (applied []int, err error) {
	all, err := All()
	if err != nil {
		return nil, err
	}
	return apply(ctx, db, all)
}

// lockClass is the first key of the advisory lock; the second is a hash of
// the schema, so independent schemas migrate independently.
const lockClass = 0x5348_4f41 // "SHOA"

func apply(ctx context.Context, db DB, all []Migration) (applied []int, err error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrations: begin: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, hashtext(current_schema()))`, int32(lockClass)); err != nil {
		return nil, fmt.Errorf("migrations: lock: %w", err)
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS shoal_schema_migrations (
		version    integer     PRIMARY KEY,
		name       text        NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now()
	)`); err != nil {
		return nil, fmt.Errorf("migrations: version table: %w", err)
	}
	rows, err := tx.Query(ctx, `SELECT version FROM shoal_schema_migrations`)
	if err != nil {
		return nil, fmt.Errorf("migrations: read versions: %w", err)
	}
	done, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil, fmt.Errorf("migrations: read versions: %w", err)
	}
	have := make(map[int]bool, len(done))
	for _, v := range done {
		have[int(v)] = true
	}
	for _, m := range all {
		if have[m.Version] {
			continue
		}
		if _, err := tx.Exec(ctx, m.SQL); err != nil {
			return nil, fmt.Errorf("migrations: %04d_%s: %w", m.Version, m.Name, err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO shoal_schema_migrations (version, name) VALUES ($1, $2)`, m.Version, m.Name); err != nil {
			return nil, fmt.Errorf("migrations: record %04d_%s: %w", m.Version, m.Name, err)
		}
		applied = append(applied, m.Version)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("migrations: commit: %w", err)
	}
	return applied, nil
}

// Version returns the highest applied version, 0 for an empty schema.
func Version(ctx context.Context, db interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}) (int, error) {
	var v int32
	err := db.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM shoal_schema_migrations`).Scan(&v)
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "42P01" { // undefined_table: nothing applied
			return 0, nil
		}
		return 0, fmt.Errorf("migrations: version: %w", err)
	}
	return int(v), nil
}
