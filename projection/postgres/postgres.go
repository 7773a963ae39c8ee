// Package postgres keeps projections in PostgreSQL: Store, a
// projection.Store on the projection_offsets and projection_dead_letters
// tables of package migrations, and ExactlyOnce / ExactlyOnceGrouped,
// handlers that write the read model in the transaction that moves the
// offset.
//
// Leases are on the database's clock (clock_timestamp()), never the
// runner's. Every write of an instance's row names the epoch its Acquire
// got; Acquire increments it under the row lock, so a write of an older
// holder that waits for that lock finds the epoch moved and is refused
// (projection.ErrFenced).
package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shoal-dev/shoal/journal"
	"github.com/shoal-dev/shoal/projection"
)

// Store is a projection.Store on PostgreSQL. The pool stays the caller's;
// its search_path must reach the tables of package migrations.
type Store struct {
	pool *pgxpool.Pool
}

var _ projection.Store = (*Store)(nil)

// NewStore returns a store on pool.
func NewStore(pool *pgxpool.Pool) *Store { return &Store{pool: pool} }

// Pool is the store's pool, the one exactly-once handlers' transactions use.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Acquire implements projection.Store.
func (s *Store) Acquire(ctx context.Context, inst projection.Instance, holder string, ttl time.Duration) (projection.Claim, error) {
	if err := inst.Validate(); err != nil {
		return projection.Claim{}, err
	}
	if err := projection.ValidateTTL(ttl); err != nil {
		return projection.Claim{}, err
	}
	var (
		epoch  int64
		text   string
		paused bool
	)
	// ON CONFLICT locks the row; its WHERE reads the row after the lock.
	err := s.pool.QueryRow(ctx, `INSERT INTO projection_offsets AS p
			(projection_name, instance_key, epoch, holder, expires_at)
		VALUES ($1, $2, 1, $3, clock_timestamp() + $4::bigint * interval '1 microsecond')
		ON CONFLICT (projection_name, instance_key) DO UPDATE SET
			epoch = p.epoch + 1, holder = excluded.holder,
			expires_at = clock_timestamp() + $4::bigint * interval '1 microsecond', updated_at = clock_timestamp()
		WHERE p.holder = excluded.holder OR p.expires_at <= clock_timestamp()
		RETURNING epoch, "offset", paused`,
		inst.Name, inst.Key(), holder, ttl.Microseconds()).Scan(&epoch, &text, &paused)
	if errors.Is(err, pgx.ErrNoRows) {
		var other string
		var left time.Duration
		_ = s.pool.QueryRow(ctx, `SELECT holder, expires_at - clock_timestamp() FROM projection_offsets
			WHERE projection_name = $1 AND instance_key = $2`, inst.Name, inst.Key()).Scan(&other, &left)
		return projection.Claim{}, fmt.Errorf("%w: %s by %s for %v more", projection.ErrInstanceHeld, inst, other, left)
	}
	if err != nil {
		return projection.Claim{}, fmt.Errorf("projection/postgres: acquire %s: %w", inst, err)
	}
	off, err := journal.ParseOffset(text)
	if err != nil {
		return projection.Claim{}, fmt.Errorf("projection/postgres: %s: stored offset: %w", inst, err)
	}
	return projection.Claim{Fence: projection.Fence{Instance: inst, Epoch: epoch}, Offset: off, Paused: paused}, nil
}

// fenced runs an UPDATE of f's row (its first three parameters the name,
// key and epoch) and turns "no row" into ErrFenced.
func fenced(ctx context.Context, db interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}, f projection.Fence, set string, args ...any) error {
	tag, err := db.Exec(ctx, `UPDATE projection_offsets SET `+set+`
		WHERE projection_name = $1 AND instance_key = $2 AND epoch = $3`,
		append([]any{f.Instance.Name, f.Instance.Key(), f.Epoch}, args...)...)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: %s epoch %d", projection.ErrFenced, f.Instance, f.Epoch)
	}
	return nil
}

// Renew implements projection.Store.
func (s *Store) Renew(ctx context.Context, f projection.Fence, ttl time.Duration) error {
	if err := projection.ValidateTTL(ttl); err != nil {
		return err
	}
	// Only a live lease is extended: a renewal that reaches the database
	// after the holder released it (sent before its runner stopped) must
	// not hold a successor off for a whole lease.
	tag, err := s.pool.Exec(ctx, `UPDATE projection_offsets SET expires_at = clock_timestamp() + $4::bigint * interval '1 microsecond'
		WHERE projection_name = $1 AND instance_key = $2 AND epoch = $3 AND expires_at > clock_timestamp()`,
		f.Instance.Name, f.Instance.Key(), f.Epoch, ttl.Microseconds())
	if err == nil && tag.RowsAffected() == 0 {
		err = fmt.Errorf("%w: %s epoch %d: taken over, or its lease ended", projection.ErrFenced, f.Instance, f.Epoch)
	}
	return wrap("renew", f, err)
}

// Release implements projection.Store.
func (s *Store) Release(ctx context.Context, f projection.Fence) error {
	return wrap("release", f, fenced(ctx, s.pool, f, `expires_at = clock_timestamp()`))
}

// SetPaused implements projection.Store.
func (s *Store) SetPaused(ctx context.Context, f projection.Fence, paused bool) error {
	return wrap("pause", f, fenced(ctx, s.pool, f, `paused = $4, updated_at = clock_timestamp()`, paused))
}

// Save implements projection.Store.
func (s *Store) Save(ctx context.Context, f projection.Fence, offset journal.Offset, deadLetters []projection.DeadLetter) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := SaveOffset(ctx, tx, f, offset); err != nil {
			return err
		}
		for _, d := range deadLetters {
			payload := d.Payload
			if payload == nil {
				payload = []byte{}
			}
			if _, err := tx.Exec(ctx, `INSERT INTO projection_dead_letters
				(projection_name, instance_key, persistence_id, seq_nr, manifest, payload, error, "offset")
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
				ON CONFLICT (projection_name, instance_key, persistence_id, seq_nr) DO UPDATE SET
					manifest = excluded.manifest, payload = excluded.payload, error = excluded.error,
					"offset" = excluded."offset", at = clock_timestamp()`,
				f.Instance.Name, f.Instance.Key(), d.PersistenceID, int64(d.SeqNr), d.Manifest, payload, d.Error, d.Offset.String()); err != nil {
				return err
			}
		}
		return nil
	})
	return wrap("save", f, err)
}

// SaveOffset stores offset for f in tx; ErrFenced if f is stale. The
// exactly-once handlers use it; a handler of the user's own can too.
func SaveOffset(ctx context.Context, tx pgx.Tx, f projection.Fence, offset journal.Offset) error {
	return fenced(ctx, tx, f, `"offset" = $4, updated_at = clock_timestamp()`, offset.String())
}

// Offset implements projection.Store.
func (s *Store) Offset(ctx context.Context, inst projection.Instance) (journal.Offset, bool, error) {
	var text string
	err := s.pool.QueryRow(ctx, `SELECT "offset" FROM projection_offsets WHERE projection_name = $1 AND instance_key = $2`,
		inst.Name, inst.Key()).Scan(&text)
	if errors.Is(err, pgx.ErrNoRows) {
		return journal.Offset{}, false, nil
	}
	if err != nil {
		return journal.Offset{}, false, fmt.Errorf("projection/postgres: offset of %s: %w", inst, err)
	}
	off, err := journal.ParseOffset(text)
	if err != nil {
		return journal.Offset{}, false, fmt.Errorf("projection/postgres: %s: stored offset: %w", inst, err)
	}
	return off, true, nil
}

// DeadLetters implements projection.Store.
func (s *Store) DeadLetters(ctx context.Context, inst projection.Instance) ([]projection.DeadLetter, error) {
	rows, err := s.pool.Query(ctx, `SELECT persistence_id, seq_nr, manifest, payload, error, "offset", at
		FROM projection_dead_letters WHERE projection_name = $1 AND instance_key = $2 ORDER BY id`, inst.Name, inst.Key())
	if err != nil {
		return nil, fmt.Errorf("projection/postgres: dead letters of %s: %w", inst, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (projection.DeadLetter, error) {
		var (
			d    projection.DeadLetter
			seq  int64
			text string
		)
		if err := row.Scan(&d.PersistenceID, &seq, &d.Manifest, &d.Payload, &d.Error, &text, &d.At); err != nil {
			return d, err
		}
		d.SeqNr = uint64(seq)
		var err error
		d.Offset, err = journal.ParseOffset(text)
		return d, err
	})
	if err != nil {
		return nil, fmt.Errorf("projection/postgres: dead letters of %s: %w", inst, err)
	}
	return out, nil
}

func wrap(op string, f projection.Fence, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("projection/postgres: %s %s: %w", op, f.Instance, err)
}

// transient reports whether err is the connection's or the server's
// trouble rather than the statement's: worth retrying as it is.
func transient(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case len(pgErr.Code) == 5 && pgErr.Code[:2] == "08": // connection exception
			return true
		case pgErr.Code == "57P01", pgErr.Code == "57P02", pgErr.Code == "57P03": // shutdown, crash, starting
			return true
		case pgErr.Code == "40001", pgErr.Code == "40P01", pgErr.Code == "53300": // serialization, deadlock, too many connections
			return true
		}
		return false
	}
	var connErr *pgconn.ConnectError
	var netErr net.Error
	return pgconn.SafeToRetry(err) || errors.As(err, &connErr) || errors.As(err, &netErr) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, pgx.ErrTxClosed)
}
