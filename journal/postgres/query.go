package postgres

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shoal-dev/shoal/journal"
)

// # Queries without gaps
//
// Each row stores the id of the transaction that wrote it (tx_id, default
// pg_current_xact_id()). A query reads, in one statement, only rows with
// tx_id below the xmin of that statement's own snapshot
// (pg_snapshot_xmin(pg_current_snapshot())), in (tx_id, ordering) order,
// and resumes after the (tx_id, ordering) of the last row it delivered: the
// offset is journal.Offset{Kind: "postgres", Tx: tx_id, Pos: ordering}.
// Nothing is ever skipped:
//
//   - Every transaction with an id below xmin has ended, committed or
//     aborted; the snapshot sees all the rows the committed ones wrote.
//   - Transaction ids are handed out in increasing order, and every
//     transaction still to get one gets at least the snapshot's xmax >= xmin.
//     So no row with tx_id below xmin can appear later: the set a query
//     reads below xmin is final, and resuming strictly after the last
//     (tx_id, ordering) delivered misses none of it.
//   - Within one transaction, ordering (an identity) grows with insert
//     order, and a batch inserts in (persistence id, seq nr) order.
//   - Events of one persistence id: seq n+1 is written by a transaction that
//     starts after the one that stored seq n committed (the entity waits for
//     its persist), so it has a higher id: per-persistence-id order holds.
//
// The price is that a row waits while any transaction older than its own is
// open, also one outside the journal (on any database of the cluster): a
// batch that takes long to commit holds back every later one. That is the
// design — delayed, never skipped — and it needs no clock and no
// backtracking. Rows written before migration 0006 have tx_id 0 and come
// first, by ordering.

const queryKind = "postgres"

// queryColumns is what a query reads of each row; tags come as NULL when
// empty, as in Replay. tx_id is read as "tx": an output column named tx_id
// would be what ORDER BY tx_id sorts by, and the index would not serve.
const queryColumns = `persistence_id, seq_nr, ordering, write_timestamp, manifest, payload,
	CASE WHEN cardinality(tags) = 0 THEN NULL ELSE tags END, writer_id, entity_type, slice, tx_id::text::int8 AS tx`

// watermark is the bound of a page: below the statement's own xmin, and
// below $bound (a Current query's xmin at its start).
const watermark = `tx_id < least($2::int8::text::xid8, pg_snapshot_xmin(pg_current_snapshot()))
	AND (tx_id, ordering) > ($3::int8::text::xid8, $4::int8)
ORDER BY tx_id, ordering
LIMIT $5`

const bySlicesSQL = `SELECT ` + queryColumns + `
FROM event_journal
WHERE entity_type = $1 AND slice BETWEEN $6 AND $7 AND ` + watermark

const byTagSQL = `SELECT ` + queryColumns + `
FROM event_journal
WHERE cardinality(tags) > 0 AND tags @> ARRAY[$1::text] AND ` + watermark

var _ journal.Queries = (*Journal)(nil)

// EventsBySlices implements journal.Queries. A Current query delivers the
// events below the watermark (see "Queries without gaps") when it starts.
// As with Replay, the payloads handed to fn are fn's to keep.
func (j *Journal) EventsBySlices(ctx context.Context, entityType string, r journal.SliceRange, after journal.Offset, mode journal.Mode, fn func(journal.QueriedEvent) error) error {
	if err := r.Validate(); err != nil {
		return err
	}
	return j.query(ctx, bySlicesSQL, []any{entityType, r.Min, r.Max}, after, mode, fn)
}

// EventsByTag implements journal.Queries, like EventsBySlices.
func (j *Journal) EventsByTag(ctx context.Context, tag string, after journal.Offset, mode journal.Mode, fn func(journal.QueriedEvent) error) error {
	return j.query(ctx, byTagSQL, []any{tag}, after, mode, fn)
}

// query pages through sql: $1 and $6.. are args, $2..$5 the watermark's.
// It reads the next page while fn runs over a full one, on a connection of
// its own, so fn may use the journal.
func (j *Journal) query(ctx context.Context, sql string, args []any, after journal.Offset, mode journal.Mode, fn func(journal.QueriedEvent) error) error {
	if err := checkOffset(after); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	bound := int64(math.MaxInt64)
	if mode != journal.Live {
		if err := j.pool.QueryRow(ctx, `SELECT pg_snapshot_xmin(pg_current_snapshot())::text::int8`).Scan(&bound); err != nil {
			return fmt.Errorf("journal/postgres: query watermark: %w", err)
		}
	}
	size := j.cfg.QueryPageSize
	live := mode == journal.Live
	ctx, cancel := context.WithCancel(ctx) // stops a prefetch when fn fails
	defer cancel()
	type fetched struct {
		page []journal.QueriedEvent
		err  error
		wake <-chan struct{} // closed by the first wake-up after the fetch began
	}
	fetch := func(pos journal.Offset) <-chan fetched {
		ch := make(chan fetched, 1)
		var wake <-chan struct{}
		if live {
			wake = j.live.waiter() // before the read, so no write in between is missed
		}
		go func() {
			page, err := j.queryPage(ctx, sql, args, bound, pos, size)
			ch <- fetched{page, err, wake}
		}()
		return ch
	}
	pos := after
	next := fetch(pos)
	var poll *time.Timer
	for {
		f := <-next
		if f.err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("journal/postgres: query after %s: %w", pos, f.err)
		}
		if len(f.page) > 0 {
			pos = f.page[len(f.page)-1].Offset
		}
		full := len(f.page) == size
		if full { // read the next page while fn runs over this one
			next = fetch(pos)
		}
		for _, e := range f.page {
			if err := fn(e); err != nil {
				return err
			}
		}
		if full {
			continue
		}
		if !live {
			return nil
		}
		j.live.listen(j.cfg.QueryPollInterval)
		if poll == nil {
			poll = time.NewTimer(j.cfg.QueryPollInterval)
			defer poll.Stop()
		} else {
			poll.Reset(j.cfg.QueryPollInterval)
		}
		select {
		case <-f.wake:
		case <-poll.C:
		case <-ctx.Done():
			return ctx.Err()
		}
		next = fetch(pos)
	}
}

func (j *Journal) queryPage(ctx context.Context, sql string, args []any, bound int64, after journal.Offset, size int) ([]journal.QueriedEvent, error) {
	all := make([]any, 0, 7)
	all = append(all, args[0], bound, int64(after.Tx), after.Pos, size)
	all = append(all, args[1:]...)
	rows, err := j.pool.Query(ctx, sql, all...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return decodeQueryPage(rows, size)
}

// CurrentPersistenceIDs implements journal.Queries. Ids are in byte order
// (COLLATE "C"), whatever the database's collation; a page reads the entity
// type's index entries, so it costs in proportion to the type's events.
func (j *Journal) CurrentPersistenceIDs(ctx context.Context, entityType string, afterID string, limit int) ([]string, error) {
	if limit < 1 {
		return nil, fmt.Errorf("%w: limit %d", journal.ErrInvalidQuery, limit)
	}
	rows, err := j.pool.Query(ctx, `SELECT DISTINCT persistence_id COLLATE "C" AS pid FROM event_journal
		WHERE entity_type = $1 AND persistence_id COLLATE "C" > $2
		ORDER BY pid LIMIT $3`, entityType, afterID, limit)
	if err != nil {
		return nil, fmt.Errorf("journal/postgres: persistence ids of %q: %w", entityType, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("journal/postgres: persistence ids of %q: %w", entityType, err)
	}
	return ids, nil
}

// CountEventsBySlices counts the stored events of entityType in r after
// offset after, whether or not a query may hand them out yet: a
// projection's lag in events (it implements projection.EventCounter).
func (j *Journal) CountEventsBySlices(ctx context.Context, entityType string, r journal.SliceRange, after journal.Offset) (int64, error) {
	if err := r.Validate(); err != nil {
		return 0, err
	}
	if err := checkOffset(after); err != nil {
		return 0, err
	}
	var n int64
	err := j.pool.QueryRow(ctx, `SELECT count(*) FROM event_journal
WHERE entity_type = $1 AND slice BETWEEN $2 AND $3
	AND (tx_id, ordering) > ($4::int8::text::xid8, $5::int8)`,
		entityType, r.Min, r.Max, int64(after.Tx), after.Pos).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("journal/postgres: count events: %w", err)
	}
	return n, nil
}

// checkOffset refuses an offset this journal did not make.
func checkOffset(after journal.Offset) error {
	if !after.IsStart() && after.Kind != queryKind {
		return fmt.Errorf("%w: %s given to the postgres journal", journal.ErrOffsetMismatch, after)
	}
	if after.Tx > math.MaxInt64 {
		return fmt.Errorf("%w: %s beyond the postgres journal's range", journal.ErrOffsetMismatch, after)
	}
	return nil
}
