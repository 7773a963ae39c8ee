// Package postgres is a reminder.Store on PostgreSQL, in the reminders
// table of package migrations (0009). It is also the Postgres journal's
// side store (journal/postgres.WithSideStore): an effect's reminder changes
// are written in the transaction that stores its events.
//
// Due times are on the database's clock: a relative delay is resolved with
// clock_timestamp() as the row is written, Due compares with it, and an
// acknowledged periodic reminder advances to its first tick after it. An
// acknowledgement changes a row only while the row still has the
// acknowledged generation; a concurrent one waits for the row lock and then
// finds the generation changed, so a delivery advances a reminder once.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shoal-dev/shoal/journal"
	"github.com/shoal-dev/shoal/timers/reminder"
)

// Store is a reminder.Store on a pgx pool; the pool stays the caller's.
type Store struct {
	pool *pgxpool.Pool

	mu      sync.Mutex
	observe []reminder.Observer
}

// New returns a store on pool, whose search_path must reach the tables of
// package migrations.
func New(pool *pgxpool.Pool) *Store { return &Store{pool: pool} }

var _ reminder.Store = (*Store)(nil)

// Observe adds o, called after every batch this store applied commits
// (directly, or as a journal's side store). The now it gets is zero: the
// observer estimates the database's time itself.
func (s *Store) Observe(o reminder.Observer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.observe = append(s.observe, o)
}

func (s *Store) notify(bs ...reminder.Batch) {
	s.mu.Lock()
	observers := s.observe
	s.mu.Unlock()
	for _, b := range bs {
		for _, o := range observers {
			o(b, time.Time{})
		}
	}
}

// Apply implements reminder.Store.
func (s *Store) Apply(ctx context.Context, b reminder.Batch) error {
	if err := b.Validate(); err != nil {
		return err
	}
	if b.Empty() {
		return nil
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error { return applyTx(ctx, tx, []reminder.Batch{b}) })
	if err != nil {
		return fmt.Errorf("reminder/postgres: apply: %w", err)
	}
	s.notify(b)
	return nil
}

// SideStore implements journal/postgres.SideStore.
func (s *Store) SideStore() string { return reminder.SideStoreName }

// CheckSide implements journal/postgres.SideStore.
func (s *Store) CheckSide(side journal.Side) error {
	b, ok := side.(reminder.Batch)
	if !ok {
		return fmt.Errorf("%w: side %T is not a reminder.Batch", reminder.ErrInvalid, side)
	}
	return b.Validate()
}

// QueueSides implements journal/postgres.SideStore: the statements that
// write the batches of the writes a journal batch stored, for its
// transaction.
func (s *Store) QueueSides(pb *pgx.Batch, sides []journal.Side) error {
	bs := make([]reminder.Batch, 0, len(sides))
	for _, side := range sides {
		b, ok := side.(reminder.Batch)
		if !ok {
			return fmt.Errorf("%w: side %T is not a reminder.Batch", reminder.ErrInvalid, side)
		}
		bs = append(bs, b)
	}
	queue(pb, bs)
	return nil
}

// SidesCommitted implements journal/postgres.SideStore.
func (s *Store) SidesCommitted(sides []journal.Side) {
	for _, side := range sides {
		if b, ok := side.(reminder.Batch); ok {
			s.notify(b)
		}
	}
}

// ackSQL advances a periodic reminder still at the acknowledged generation
// to its first tick after now (fire once for everything missed) and
// removes a one-shot one.
const ackSQL = `WITH a AS (
	SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::bigint[]) AS a(t, id, name, gen, next)
), del AS (
	DELETE FROM reminders r USING a
	WHERE r.entity_type = a.t AND r.entity_id = a.id AND r.name = a.name AND r.generation = a.gen AND r.period_us = 0
)
UPDATE reminders r SET generation = a.next,
	due_at = r.due_at + make_interval(secs => r.period_us / 1e6) * (1 + greatest(0,
		(extract(epoch FROM clock_timestamp() - r.due_at) * 1e6)::bigint / r.period_us))
FROM a
WHERE r.entity_type = a.t AND r.entity_id = a.id AND r.name = a.name AND r.generation = a.gen AND r.period_us > 0`

const cancelSQL = `DELETE FROM reminders r
USING unnest($1::text[], $2::text[], $3::text[]) AS c(t, id, name)
WHERE r.entity_type = c.t AND r.entity_id = c.id AND r.name = c.name`

const setSQL = `INSERT INTO reminders (entity_type, entity_id, name, shard_id, due_at, period_us, manifest, payload, generation)
SELECT c.t, c.id, c.name, c.shard, coalesce(c.at, clock_timestamp() + make_interval(secs => c.after_us / 1e6)),
	c.period_us, c.manifest, c.payload, c.gen
FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::timestamptz[], $6::bigint[], $7::bigint[], $8::text[], $9::bytea[], $10::bigint[])
	AS c(t, id, name, shard, at, after_us, period_us, manifest, payload, gen)
ON CONFLICT (entity_type, entity_id, name) DO UPDATE SET
	shard_id = excluded.shard_id, due_at = excluded.due_at, period_us = excluded.period_us,
	manifest = excluded.manifest, payload = excluded.payload, generation = excluded.generation`

// applyTx applies bs in tx, in order, in one round trip.
func applyTx(ctx context.Context, tx pgx.Tx, bs []reminder.Batch) error {
	batch := &pgx.Batch{}
	queue(batch, bs)
	if batch.Len() == 0 {
		return nil
	}
	return tx.SendBatch(ctx, batch).Close()
}

// queue queues the statements that apply bs in order: the
// acknowledgements, then each key's last change (a cancel, or a set).
func queue(batch *pgx.Batch, bs []reminder.Batch) {
	var ack struct {
		t, id, name []string
		gen, next   []int64
	}
	last := map[reminder.Key]reminder.Change{}
	var order []reminder.Key
	for _, b := range bs {
		for _, a := range b.Acks {
			ack.t, ack.id, ack.name = append(ack.t, a.EntityType), append(ack.id, a.EntityID), append(ack.name, a.Name)
			ack.gen, ack.next = append(ack.gen, int64(a.Generation)), append(ack.next, int64(a.Next))
		}
		for _, c := range b.Changes {
			if _, seen := last[c.Key]; !seen {
				order = append(order, c.Key)
			}
			last[c.Key] = c
		}
	}
	var cancel struct{ t, id, name []string }
	var set struct {
		t, id, name, shard, manifest []string
		at                           []*time.Time
		after, period, gen           []int64
		payload                      [][]byte
	}
	for _, k := range order {
		c := last[k]
		if c.Cancel {
			cancel.t, cancel.id, cancel.name = append(cancel.t, k.EntityType), append(cancel.id, k.EntityID), append(cancel.name, k.Name)
			continue
		}
		var at *time.Time
		if !c.At.IsZero() {
			at = &c.At
		}
		payload := c.Payload
		if payload == nil {
			payload = []byte{}
		}
		set.t, set.id, set.name, set.shard = append(set.t, k.EntityType), append(set.id, k.EntityID), append(set.name, k.Name), append(set.shard, c.ShardID)
		set.at, set.after, set.period = append(set.at, at), append(set.after, c.After.Microseconds()), append(set.period, c.Period.Microseconds())
		set.manifest, set.payload, set.gen = append(set.manifest, c.Manifest), append(set.payload, payload), append(set.gen, int64(c.Generation))
	}
	if len(ack.t) > 0 {
		batch.Queue(ackSQL, ack.t, ack.id, ack.name, ack.gen, ack.next)
	}
	if len(cancel.t) > 0 {
		batch.Queue(cancelSQL, cancel.t, cancel.id, cancel.name)
	}
	if len(set.t) > 0 {
		batch.Queue(setSQL, set.t, set.id, set.name, set.shard, set.at, set.after, set.period, set.manifest, set.payload, set.gen)
	}
}

const dueSQL = `SELECT n.now, r.entity_id, r.name, r.shard_id, r.due_at, r.period_us, r.manifest, r.payload, r.generation
FROM (SELECT clock_timestamp() AS now) n
LEFT JOIN LATERAL (
	SELECT * FROM reminders
	WHERE entity_type = $1 AND shard_id = ANY($2::text[]) AND due_at <= n.now + make_interval(secs => $3::bigint / 1e6)
	ORDER BY due_at, entity_id, name
	LIMIT $4
) r ON true`

// Due implements reminder.Store.
func (s *Store) Due(ctx context.Context, q reminder.Query) (reminder.Window, error) {
	limit := any(nil)
	if q.Limit > 0 {
		limit = int64(q.Limit)
	}
	shards := q.Shards
	if shards == nil {
		shards = []string{}
	}
	rows, err := s.pool.Query(ctx, dueSQL, q.EntityType, shards, q.Within.Microseconds(), limit)
	if err != nil {
		return reminder.Window{}, fmt.Errorf("reminder/postgres: due: %w", err)
	}
	var w reminder.Window
	for rows.Next() {
		var (
			id, name, shard, manifest *string
			due                       *time.Time
			period, gen               *int64
			payload                   []byte
		)
		if err := rows.Scan(&w.Now, &id, &name, &shard, &due, &period, &manifest, &payload, &gen); err != nil {
			rows.Close()
			return reminder.Window{}, fmt.Errorf("reminder/postgres: due: %w", err)
		}
		if id == nil {
			continue // none due: the row only carries now
		}
		w.Reminders = append(w.Reminders, reminder.Reminder{
			Key:     reminder.Key{EntityType: q.EntityType, EntityID: *id, Name: *name},
			ShardID: *shard, Due: *due, Period: time.Duration(*period) * time.Microsecond,
			Manifest: *manifest, Payload: payload, Generation: uint64(*gen),
		})
	}
	if err := rows.Err(); err != nil {
		return reminder.Window{}, fmt.Errorf("reminder/postgres: due: %w", err)
	}
	return w, nil
}

// dueShardsSQL walks the type's shards through the index, two probes a
// shard (a loose index scan), rather than reading every row of the type.
const dueShardsSQL = `WITH RECURSIVE s(shard_id) AS (
	(SELECT shard_id FROM reminders WHERE entity_type = $1 ORDER BY shard_id LIMIT 1)
	UNION ALL
	SELECT (SELECT r.shard_id FROM reminders r WHERE r.entity_type = $1 AND r.shard_id > s.shard_id ORDER BY r.shard_id LIMIT 1)
	FROM s WHERE s.shard_id IS NOT NULL
)
SELECT s.shard_id, e.entity_id FROM s
CROSS JOIN LATERAL (
	SELECT entity_id FROM reminders
	WHERE entity_type = $1 AND shard_id = s.shard_id AND due_at <= clock_timestamp() + make_interval(secs => $2::bigint / 1e6)
	ORDER BY due_at, entity_id, name LIMIT 1
) e
WHERE s.shard_id IS NOT NULL`

// DueShards implements reminder.Store.
func (s *Store) DueShards(ctx context.Context, entityType string, within time.Duration) (map[string]string, error) {
	rows, err := s.pool.Query(ctx, dueShardsSQL, entityType, within.Microseconds())
	if err != nil {
		return nil, fmt.Errorf("reminder/postgres: due shards: %w", err)
	}
	out := map[string]string{}
	var shard, id string
	_, err = pgx.ForEachRow(rows, []any{&shard, &id}, func() error {
		out[shard] = id
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reminder/postgres: due shards: %w", err)
	}
	return out, nil
}

// Get implements reminder.Store.
func (s *Store) Get(ctx context.Context, k reminder.Key) (reminder.Reminder, bool, error) {
	r := reminder.Reminder{Key: k}
	var period, gen int64
	err := s.pool.QueryRow(ctx, `SELECT shard_id, due_at, period_us, manifest, payload, generation FROM reminders
		WHERE entity_type = $1 AND entity_id = $2 AND name = $3`, k.EntityType, k.EntityID, k.Name).
		Scan(&r.ShardID, &r.Due, &period, &r.Manifest, &r.Payload, &gen)
	if errors.Is(err, pgx.ErrNoRows) {
		return reminder.Reminder{}, false, nil
	}
	if err != nil {
		return reminder.Reminder{}, false, fmt.Errorf("reminder/postgres: get %s: %w", k, err)
	}
	r.Period, r.Generation = time.Duration(period)*time.Microsecond, uint64(gen)
	return r, true, nil
}

// Now implements reminder.Store: the database's clock_timestamp().
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	var now time.Time
	if err := s.pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now); err != nil {
		return time.Time{}, fmt.Errorf("reminder/postgres: now: %w", err)
	}
	return now, nil
}

// Stats implements reminder.Store.
func (s *Store) Stats(ctx context.Context, entityType string, late time.Duration) ([]reminder.ShardStats, error) {
	rows, err := s.pool.Query(ctx, `SELECT shard_id, count(*),
		count(*) FILTER (WHERE due_at <= clock_timestamp()),
		count(*) FILTER (WHERE due_at < clock_timestamp() - make_interval(secs => $2::bigint / 1e6))
		FROM reminders WHERE entity_type = $1 GROUP BY shard_id ORDER BY shard_id`, entityType, late.Microseconds())
	if err != nil {
		return nil, fmt.Errorf("reminder/postgres: stats: %w", err)
	}
	var out []reminder.ShardStats
	var st reminder.ShardStats
	_, err = pgx.ForEachRow(rows, []any{&st.ShardID, &st.Total, &st.Due, &st.Late}, func() error {
		out = append(out, st)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reminder/postgres: stats: %w", err)
	}
	return out, nil
}
