package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/shoal-dev/shoal/journal"
	"github.com/shoal-dev/shoal/projection"
)

var _ projection.ControlStore = (*Store)(nil)

// Heartbeat implements projection.ControlStore: the fenced renewal with
// the report, and the pending requests, in one statement (one round trip).
func (s *Store) Heartbeat(ctx context.Context, f projection.Fence, ttl time.Duration, rep projection.Report) ([]projection.Request, error) {
	if err := projection.ValidateTTL(ttl); err != nil {
		return nil, err
	}
	var last *time.Time
	if !rep.LastEventTime.IsZero() {
		last = &rep.LastEventTime
	}
	// The LEFT JOIN gives one row when nothing is pending; renewed is 0
	// when the epoch moved on (fenced).
	rows, err := s.pool.Query(ctx, `WITH beat AS (
			UPDATE projection_offsets SET expires_at = clock_timestamp() + $4::bigint * interval '1 microsecond',
				report_offset = $5, report_last_event = coalesce($6, report_last_event), report_lag_events = $7,
				report_error = $8, reported_at = clock_timestamp()
			WHERE projection_name = $1 AND instance_key = $2 AND epoch = $3
			RETURNING 1)
		SELECT (SELECT count(*) FROM beat), r.id, r.kind, r."offset", r.requested_at
		FROM (SELECT 1) one LEFT JOIN projection_requests r ON r.projection_name = $1 AND r.instance_key = $2
		ORDER BY r.id`,
		f.Instance.Name, f.Instance.Key(), f.Epoch, ttl.Microseconds(), rep.Offset.String(), last, rep.LagEvents, rep.LastError)
	if err != nil {
		return nil, wrap("heartbeat", f, err)
	}
	var (
		renewed int64
		out     []projection.Request
	)
	var (
		id         *int64
		kind, text *string
		at         *time.Time
	)
	_, err = pgx.ForEachRow(rows, []any{&renewed, &id, &kind, &text, &at}, func() error {
		if id == nil {
			return nil
		}
		off, err := journal.ParseOffset(*text)
		if err != nil {
			return err
		}
		out = append(out, projection.Request{ID: *id, Kind: projection.OpKind(*kind), Offset: off, At: *at})
		return nil
	})
	if err != nil {
		return nil, wrap("heartbeat", f, err)
	}
	if renewed == 0 {
		return nil, wrap("heartbeat", f, fmt.Errorf("%w: %s epoch %d", projection.ErrFenced, f.Instance, f.Epoch))
	}
	return out, nil
}

// Complete implements projection.ControlStore.
func (s *Store) Complete(ctx context.Context, f projection.Fence, id int64) error {
	// The DELETE runs only while f's epoch is the row's: the row is
	// locked FOR SHARE, so an Acquire moving the epoch waits or wins.
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var epoch int64
		err := tx.QueryRow(ctx, `SELECT epoch FROM projection_offsets
			WHERE projection_name = $1 AND instance_key = $2 FOR SHARE`, f.Instance.Name, f.Instance.Key()).Scan(&epoch)
		if errors.Is(err, pgx.ErrNoRows) || (err == nil && epoch != f.Epoch) {
			return fmt.Errorf("%w: %s epoch %d", projection.ErrFenced, f.Instance, f.Epoch)
		}
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `DELETE FROM projection_requests WHERE projection_name = $1 AND instance_key = $2 AND id = $3`,
			f.Instance.Name, f.Instance.Key(), id)
		return err
	})
	return wrap("complete request", f, err)
}

// Request implements projection.ControlStore.
func (s *Store) Request(ctx context.Context, inst projection.Instance, kind projection.OpKind, to journal.Offset) (projection.Request, error) {
	if err := kind.Validate(); err != nil {
		return projection.Request{}, err
	}
	if kind != projection.OpReset {
		to = journal.Offset{}
	}
	q := projection.Request{Kind: kind, Offset: to}
	err := s.pool.QueryRow(ctx, `INSERT INTO projection_requests (projection_name, instance_key, kind, "offset")
		VALUES ($1, $2, $3, $4) RETURNING id, requested_at`, inst.Name, inst.Key(), string(kind), to.String()).Scan(&q.ID, &q.At)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23503" { // foreign key: no such instance
		return projection.Request{}, fmt.Errorf("%w: %s", projection.ErrUnknownInstance, inst)
	}
	if err != nil {
		return projection.Request{}, fmt.Errorf("projection/postgres: request %s of %s: %w", kind, inst, err)
	}
	return q, nil
}

// Instances implements projection.ControlStore.
func (s *Store) Instances(ctx context.Context, name string) ([]projection.InstanceState, error) {
	rows, err := s.pool.Query(ctx, `SELECT projection_name, instance_key, "offset", paused, holder, epoch, expires_at,
			expires_at > clock_timestamp(), updated_at,
			coalesce(report_offset, 'start'), report_last_event, coalesce(report_lag_events, -1), coalesce(report_error, ''), reported_at
		FROM projection_offsets WHERE $1 = '' OR projection_name = $1`, name)
	if err != nil {
		return nil, fmt.Errorf("projection/postgres: instances: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (projection.InstanceState, error) {
		var (
			st                   projection.InstanceState
			pname, key, off, rep string
			last, reported       *time.Time
		)
		if err := row.Scan(&pname, &key, &off, &st.Paused, &st.Holder, &st.Epoch, &st.Expires, &st.Held, &st.UpdatedAt,
			&rep, &last, &st.Report.LagEvents, &st.Report.LastError, &reported); err != nil {
			return st, err
		}
		var err1, err2, err3 error
		st.Instance, err1 = projection.ParseInstanceKey(pname, key)
		st.Offset, err2 = journal.ParseOffset(off)
		st.Report.Offset, err3 = journal.ParseOffset(rep)
		if last != nil {
			st.Report.LastEventTime = *last
		}
		if reported != nil {
			st.ReportedAt = *reported
		}
		return st, errors.Join(err1, err2, err3)
	})
	if err != nil {
		return nil, fmt.Errorf("projection/postgres: instances: %w", err)
	}
	// Pending requests: one query for all, grouped here.
	reqs, err := s.pool.Query(ctx, `SELECT projection_name, instance_key, id, kind, "offset", requested_at
		FROM projection_requests WHERE $1 = '' OR projection_name = $1 ORDER BY id`, name)
	if err != nil {
		return nil, fmt.Errorf("projection/postgres: instances: %w", err)
	}
	byKey := map[[2]string][]projection.Request{}
	var (
		pname, key, kind, text string
		q                      projection.Request
	)
	_, err = pgx.ForEachRow(reqs, []any{&pname, &key, &q.ID, &kind, &text, &q.At}, func() error {
		q.Kind = projection.OpKind(kind)
		var err error
		if q.Offset, err = journal.ParseOffset(text); err != nil {
			return err
		}
		byKey[[2]string{pname, key}] = append(byKey[[2]string{pname, key}], q)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("projection/postgres: instances: %w", err)
	}
	for i := range out {
		out[i].Pending = byKey[[2]string{out[i].Instance.Name, out[i].Instance.Key()}]
	}
	projection.SortInstances(out)
	return out, nil
}
