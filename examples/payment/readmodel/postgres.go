package readmodel

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shoal-dev/shoal/journal"
	"github.com/shoal-dev/shoal/projection"
)

// Postgres is the read model in two tables of the example's own (created
// by NewPostgres, like its sequences, not by Shoal's migrations):
//
//   - payment_settlements: one row per payment: its state, amount, last
//     update, the seq nr of the last event applied, and its slice;
//   - payment_shop_totals: per shop, slice and state, the count and amount
//     of the shop's settlements of that slice in that state; a shop's
//     totals are the sums over its slices.
//
// Keying the totals by slice gives each row one writer, the projection
// instance of its slice: instances never wait for each other's locks (nor
// deadlock), and an instance's rebuild clears exactly what it rebuilds.
//
// It is kept by an exactly-once projection: Handle writes in the
// transaction that moves the projection's offset, so each event is applied
// once. The totals are counters, which a replayed event would count twice:
// Handle refuses an event at or below the settlement's last seq nr
// (ErrDuplicate) rather than skip it, so that a broken guarantee stops the
// projection instead of hiding. Rebuild the model (the projection's
// Rebuild, which runs Clear) rather than Reset its offset backwards.
type Postgres struct{ pool *pgxpool.Pool }

// NewPostgres creates the tables if needed. Nodes that start together may
// call it at once, hence the advisory lock (as for the sequences).
func NewPostgres(ctx context.Context, pool *pgxpool.Pool) (*Postgres, error) {
	_, err := pool.Exec(ctx, `
		SELECT pg_advisory_xact_lock(hashtext('shoal example payment read model'));
		CREATE TABLE IF NOT EXISTS payment_settlements (
			tenant         text        NOT NULL,
			client_id      bigint      NOT NULL,
			wallet_shop_id text        NOT NULL,
			order_id       text        NOT NULL,
			state          text        NOT NULL,
			amount         bigint      NOT NULL,
			updated_at     timestamptz NOT NULL,
			seq_nr         bigint      NOT NULL,
			slice          smallint    NOT NULL,
			PRIMARY KEY (tenant, client_id, wallet_shop_id, order_id)
		);
		CREATE INDEX IF NOT EXISTS payment_settlements_slice_idx ON payment_settlements (slice);
		CREATE TABLE IF NOT EXISTS payment_shop_totals (
			tenant         text     NOT NULL,
			client_id      bigint   NOT NULL,
			wallet_shop_id text     NOT NULL,
			slice          smallint NOT NULL,
			state          text     NOT NULL,
			count          bigint   NOT NULL,
			amount         bigint   NOT NULL,
			PRIMARY KEY (tenant, client_id, wallet_shop_id, slice, state)
		)`)
	if err != nil {
		return nil, fmt.Errorf("payment read model tables: %w", err)
	}
	return &Postgres{pool: pool}, nil
}

// Handle applies env in tx, the projection's transaction. It has the
// signature of projection/postgres.ExactlyOnce's handler.
func (p *Postgres) Handle(ctx context.Context, tx pgx.Tx, env projection.Envelope[Change]) error {
	e, err := EventOf(env)
	if err != nil {
		return err
	}
	k := e.Key
	before := Settlement{Key: k}
	var seq int64
	err = tx.QueryRow(ctx, `SELECT state, amount, updated_at, seq_nr, slice FROM payment_settlements
		WHERE tenant = $1 AND client_id = $2 AND wallet_shop_id = $3 AND order_id = $4 FOR UPDATE`,
		k.Tenant, k.ClientID, k.Shop, k.OrderID).Scan(&before.State, &before.Amount, &before.UpdatedAt, &seq, &before.Slice)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("readmodel: read %s: %w", k, err)
	}
	before.SeqNr = uint64(seq)
	after, err := Apply(before, e)
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `INSERT INTO payment_settlements
		(tenant, client_id, wallet_shop_id, order_id, state, amount, updated_at, seq_nr, slice)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
		ON CONFLICT (tenant, client_id, wallet_shop_id, order_id) DO UPDATE SET
			state = excluded.state, amount = excluded.amount, updated_at = excluded.updated_at,
			seq_nr = excluded.seq_nr, slice = excluded.slice`,
		k.Tenant, k.ClientID, k.Shop, k.OrderID, string(after.State), after.Amount, after.UpdatedAt, int64(after.SeqNr), after.Slice); err != nil {
		return fmt.Errorf("readmodel: write %s: %w", k, err)
	}
	// Rows in one order (by state), so that two transactions on them
	// could never deadlock, should an instance's slices ever be shared.
	type delta struct {
		state         State
		count, amount int64
	}
	var deltas []delta
	if before.State != "" {
		deltas = append(deltas, delta{before.State, -1, -before.Amount})
	}
	deltas = append(deltas, delta{after.State, 1, after.Amount})
	slices.SortFunc(deltas, func(a, b delta) int { return strings.Compare(string(a.state), string(b.state)) })
	for _, d := range deltas {
		if _, err := tx.Exec(ctx, `INSERT INTO payment_shop_totals AS t
			(tenant, client_id, wallet_shop_id, slice, state, count, amount) VALUES ($1, $2, $3, $4, $5, $6, $7)
			ON CONFLICT (tenant, client_id, wallet_shop_id, slice, state) DO UPDATE SET
				count = t.count + excluded.count, amount = t.amount + excluded.amount`,
			k.Tenant, k.ClientID, k.Shop, after.Slice, string(d.state), d.count, d.amount); err != nil {
			return fmt.Errorf("readmodel: totals of %v: %w", k.ShopKey, err)
		}
	}
	return nil
}

// Clear returns the rebuild's clear function of the projection instance
// over slices r: it deletes the rows of those slices, in the transaction
// that resets the instance's offset; the other instances' rows stay.
func (p *Postgres) Clear(r journal.SliceRange) func(context.Context, pgx.Tx) error {
	return func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `DELETE FROM payment_settlements WHERE slice BETWEEN $1 AND $2`, r.Min, r.Max)
		if err == nil {
			_, err = tx.Exec(ctx, `DELETE FROM payment_shop_totals WHERE slice BETWEEN $1 AND $2`, r.Min, r.Max)
		}
		return err
	}
}

// Shop returns a shop's settlements (by order id) and totals.
func (p *Postgres) Shop(ctx context.Context, k ShopKey) (Shop, error) {
	var out Shop
	rows, err := p.pool.Query(ctx, `SELECT order_id, state, amount, updated_at, seq_nr, slice FROM payment_settlements
		WHERE tenant = $1 AND client_id = $2 AND wallet_shop_id = $3 ORDER BY order_id`, k.Tenant, k.ClientID, k.Shop)
	if err != nil {
		return out, fmt.Errorf("readmodel: shop %v: %w", k, err)
	}
	out.Settlements, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (Settlement, error) {
		s := Settlement{Key: Key{ShopKey: k}}
		var seq int64
		err := row.Scan(&s.Key.OrderID, &s.State, &s.Amount, &s.UpdatedAt, &seq, &s.Slice)
		s.SeqNr = uint64(seq)
		return s, err
	})
	if err != nil {
		return out, fmt.Errorf("readmodel: shop %v: %w", k, err)
	}
	rows, err = p.pool.Query(ctx, `SELECT state, sum(count)::bigint, sum(amount)::bigint FROM payment_shop_totals
		WHERE tenant = $1 AND client_id = $2 AND wallet_shop_id = $3 GROUP BY state`, k.Tenant, k.ClientID, k.Shop)
	if err != nil {
		return out, fmt.Errorf("readmodel: totals of %v: %w", k, err)
	}
	err = forEachTotal(rows, func(_ ShopKey, st State, t Total) {
		if tot := out.Totals.Of(st); tot != nil {
			*tot = t
		}
	})
	if err != nil {
		return out, fmt.Errorf("readmodel: totals of %v: %w", k, err)
	}
	return out, nil
}

// All reads both tables whole: every settlement, and every shop's totals.
// Totals rows with nothing left in them (count and amount 0) are as good
// as absent.
func (p *Postgres) All(ctx context.Context) (map[Key]Settlement, map[ShopKey]Totals, error) {
	rows, err := p.pool.Query(ctx, `SELECT tenant, client_id, wallet_shop_id, order_id, state, amount, updated_at, seq_nr, slice
		FROM payment_settlements`)
	if err != nil {
		return nil, nil, fmt.Errorf("readmodel: settlements: %w", err)
	}
	settlements := make(map[Key]Settlement)
	var (
		s   Settlement
		seq int64
	)
	_, err = pgx.ForEachRow(rows, []any{&s.Key.Tenant, &s.Key.ClientID, &s.Key.Shop, &s.Key.OrderID, &s.State, &s.Amount, &s.UpdatedAt, &seq, &s.Slice}, func() error {
		s.SeqNr = uint64(seq)
		settlements[s.Key] = s
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("readmodel: settlements: %w", err)
	}
	rows, err = p.pool.Query(ctx, `SELECT tenant, client_id, wallet_shop_id, state, sum(count)::bigint, sum(amount)::bigint
		FROM payment_shop_totals GROUP BY tenant, client_id, wallet_shop_id, state`)
	if err != nil {
		return nil, nil, fmt.Errorf("readmodel: totals: %w", err)
	}
	totals := make(map[ShopKey]Totals)
	err = forEachTotal(rows, func(k ShopKey, st State, t Total) {
		if t == (Total{}) {
			return
		}
		all := totals[k]
		if tot := all.Of(st); tot != nil {
			*tot = t
		}
		totals[k] = all
	})
	if err != nil {
		return nil, nil, fmt.Errorf("readmodel: totals: %w", err)
	}
	return settlements, totals, nil
}

// forEachTotal scans rows of (state, count, amount), preceded by the shop
// key's three columns when rows has six.
func forEachTotal(rows pgx.Rows, fn func(ShopKey, State, Total)) error {
	defer rows.Close()
	for rows.Next() {
		var (
			k  ShopKey
			st State
			t  Total
		)
		var err error
		if len(rows.FieldDescriptions()) == 6 {
			err = rows.Scan(&k.Tenant, &k.ClientID, &k.Shop, &st, &t.Count, &t.Amount)
		} else {
			err = rows.Scan(&st, &t.Count, &t.Amount)
		}
		if err != nil {
			return err
		}
		fn(k, st, t)
	}
	return rows.Err()
}

// UTC normalizes a timestamp for comparison across stores: Postgres keeps
// microseconds, in UTC.
func UTC(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }
