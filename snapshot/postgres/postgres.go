// Package postgres is a snapshot.Store on PostgreSQL (pgx/v5, pgxpool),
// using the snapshots table of package migrations.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shoal-dev/shoal/snapshot"
)

// Store is a snapshot.Store on PostgreSQL. The pool stays the caller's.
type Store struct {
	pool *pgxpool.Pool
}

var _ snapshot.Store = (*Store)(nil)

// New returns a store on pool, whose search_path must reach the tables of
// package migrations.
func New(pool *pgxpool.Pool) *Store { return &Store{pool: pool} }

// Save implements snapshot.Store: an upsert on (persistence id, seq nr).
func (s *Store) Save(ctx context.Context, snap snapshot.Snapshot) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if snap.SeqNr > math.MaxInt64 {
		return fmt.Errorf("snapshot/postgres: save %s: seq %d beyond the store's range", snap.PersistenceID, snap.SeqNr)
	}
	payload := snap.Payload
	if payload == nil {
		payload = []byte{}
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO snapshots (persistence_id, seq_nr, write_timestamp, manifest, payload)
		VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (persistence_id, seq_nr) DO UPDATE SET
			write_timestamp = excluded.write_timestamp,
			manifest = excluded.manifest,
			payload = excluded.payload`,
		snap.PersistenceID, int64(snap.SeqNr), snap.Timestamp, snap.Manifest, payload)
	if err != nil {
		return fmt.Errorf("snapshot/postgres: save %s seq %d: %w", snap.PersistenceID, snap.SeqNr, err)
	}
	return nil
}

// where renders c as arguments $2..$5 of the criteria clause below.
func where(c snapshot.Criteria) (minSeq, maxSeq int64, minTS time.Time, maxTS *time.Time, ok bool) {
	if c.MaxSeqNr > math.MaxInt64 {
		c.MaxSeqNr = math.MaxInt64
	}
	if c.MinSeqNr > c.MaxSeqNr {
		return 0, 0, time.Time{}, nil, false
	}
	if !c.MaxTimestamp.IsZero() {
		maxTS = &c.MaxTimestamp
	}
	return int64(c.MinSeqNr), int64(c.MaxSeqNr), c.MinTimestamp, maxTS, true
}

const criteria = `persistence_id = $1 AND seq_nr BETWEEN $2 AND $3
	AND write_timestamp >= $4 AND ($5::timestamptz IS NULL OR write_timestamp <= $5)`

// Load implements snapshot.Store.
func (s *Store) Load(ctx context.Context, pid string, c snapshot.Criteria) (snapshot.Snapshot, bool, error) {
	if err := ctx.Err(); err != nil {
		return snapshot.Snapshot{}, false, err
	}
	minSeq, maxSeq, minTS, maxTS, ok := where(c)
	if !ok {
		return snapshot.Snapshot{}, false, nil
	}
	snap := snapshot.Snapshot{PersistenceID: pid}
	var seq int64
	err := s.pool.QueryRow(ctx, `SELECT seq_nr, write_timestamp, manifest, payload FROM snapshots
		WHERE `+criteria+`
		ORDER BY seq_nr DESC LIMIT 1`, pid, minSeq, maxSeq, minTS, maxTS).
		Scan(&seq, &snap.Timestamp, &snap.Manifest, &snap.Payload)
	if errors.Is(err, pgx.ErrNoRows) {
		return snapshot.Snapshot{}, false, nil
	}
	if err != nil {
		return snapshot.Snapshot{}, false, fmt.Errorf("snapshot/postgres: load %s: %w", pid, err)
	}
	snap.SeqNr = uint64(seq)
	return snap, true, nil
}

// Delete implements snapshot.Store.
func (s *Store) Delete(ctx context.Context, pid string, c snapshot.Criteria) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	minSeq, maxSeq, minTS, maxTS, ok := where(c)
	if !ok {
		return nil
	}
	if _, err := s.pool.Exec(ctx, `DELETE FROM snapshots WHERE `+criteria, pid, minSeq, maxSeq, minTS, maxTS); err != nil {
		return fmt.Errorf("snapshot/postgres: delete %s: %w", pid, err)
	}
	return nil
}
