package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shoal-dev/shoal/journal"
	"github.com/shoal-dev/shoal/projection"
)

// ExactlyOnce returns a handler that runs handle for each envelope of a
// stored event in one transaction on store's pool, the transaction that
// moves the instance's offset past the event. A crash, a lost connection or
// a lost lease before the commit rolls the handling back with the offset,
// so every event's writes commit once.
//
// clear, when not nil, empties the read model for Projection.Rebuild, in
// the transaction that resets the offset.
//
// Errors of handle that come from a lost connection or a server shutting
// down are marked projection.Transient (retried until the database is back,
// never sent to the failure policy); so are failures to begin or commit.
func ExactlyOnce[E any](store *Store, handle func(ctx context.Context, tx pgx.Tx, env projection.Envelope[E]) error, clear func(ctx context.Context, tx pgx.Tx) error) projection.Handler[E] {
	return &exactlyOnce[E]{store: store, group: 1, clear: clear, handle: func(ctx context.Context, tx pgx.Tx, envs []projection.Envelope[E]) error {
		for _, e := range envs {
			if err := handle(ctx, tx, e); err != nil {
				return err
			}
		}
		return nil
	}}
}

// ExactlyOnceGrouped is ExactlyOnce for a handler that takes up to
// groupSize stored events' envelopes in one transaction (what the reader
// has ready; it does not wait to fill a group). A failure retries, then
// applies the policy to, the whole group.
func ExactlyOnceGrouped[E any](store *Store, groupSize int, handle func(ctx context.Context, tx pgx.Tx, envs []projection.Envelope[E]) error, clear func(ctx context.Context, tx pgx.Tx) error) projection.Handler[E] {
	return &exactlyOnce[E]{store: store, group: groupSize, handle: handle, clear: clear}
}

type exactlyOnce[E any] struct {
	store  *Store
	group  int
	handle func(context.Context, pgx.Tx, []projection.Envelope[E]) error
	clear  func(context.Context, pgx.Tx) error
}

func (h *exactlyOnce[E]) Store() projection.Store {
	if h.store == nil {
		return nil // not a nil *Store in an interface: New refuses it
	}
	return h.store
}

func (h *exactlyOnce[E]) ExactlyOnce() bool { return true }
func (h *exactlyOnce[E]) GroupSize() int    { return h.group }

// rollbackTimeout bounds a rollback after a failure.
const rollbackTimeout = 5 * time.Second

// errCommitted ends a transaction that found its events committed already.
var errCommitted = errors.New("already committed")

func (h *exactlyOnce[E]) Handle(ctx context.Context, f projection.Fence, envs []projection.Envelope[E], after, through journal.Offset) error {
	err := h.inTx(ctx, func(tx pgx.Tx) error {
		// The offset moves first, from where this runner left it: the row
		// lock is held to the commit, and a row found elsewhere is
		// either a later holder's (fenced) or this very move, committed
		// by an attempt whose acknowledgement was lost.
		tag, err := tx.Exec(ctx, `UPDATE projection_offsets SET "offset" = $5, updated_at = clock_timestamp()
			WHERE projection_name = $1 AND instance_key = $2 AND epoch = $3 AND "offset" = $4`,
			f.Instance.Name, f.Instance.Key(), f.Epoch, after.String(), through.String())
		if err != nil {
			return projection.Transient(err)
		}
		if tag.RowsAffected() == 0 {
			return h.notMoved(ctx, tx, f, after, through)
		}
		if err := h.handle(ctx, tx, envs); err != nil {
			if transient(err) || tx.Conn().IsClosed() {
				return projection.Transient(err)
			}
			return err
		}
		return nil
	})
	if errors.Is(err, errCommitted) {
		return nil
	}
	return err
}

// notMoved explains an offset that was not where the runner left it.
func (h *exactlyOnce[E]) notMoved(ctx context.Context, tx pgx.Tx, f projection.Fence, after, through journal.Offset) error {
	var (
		epoch int64
		text  string
	)
	err := tx.QueryRow(ctx, `SELECT epoch, "offset" FROM projection_offsets WHERE projection_name = $1 AND instance_key = $2`,
		f.Instance.Name, f.Instance.Key()).Scan(&epoch, &text)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("%w: %s has no offset row", projection.ErrFenced, f.Instance)
	case err != nil:
		return projection.Transient(err)
	case epoch != f.Epoch:
		return fmt.Errorf("%w: %s epoch %d, now %d", projection.ErrFenced, f.Instance, f.Epoch, epoch)
	case text == through.String():
		return errCommitted
	}
	return fmt.Errorf("projection/postgres: %s: stored offset %s, expected %s: changed under epoch %d", f.Instance, text, after, f.Epoch)
}

func (h *exactlyOnce[E]) Reset(ctx context.Context, f projection.Fence, to journal.Offset, clear bool) error {
	return h.inTx(ctx, func(tx pgx.Tx) error {
		if err := SaveOffset(ctx, tx, f, to); err != nil {
			if errors.Is(err, projection.ErrFenced) {
				return err
			}
			return projection.Transient(err)
		}
		if clear && h.clear != nil {
			if err := h.clear(ctx, tx); err != nil {
				return fmt.Errorf("projection/postgres: clear read model: %w", err)
			}
		}
		return nil
	})
}

// inTx runs fn in a transaction on the store's pool; failing to begin or
// commit is transient.
func (h *exactlyOnce[E]) inTx(ctx context.Context, fn func(pgx.Tx) error) (err error) {
	tx, err := h.store.pool.Begin(ctx)
	if err != nil {
		return projection.Transient(fmt.Errorf("projection/postgres: begin: %w", err))
	}
	defer func() {
		// Also on a panic of the handler, which the runner recovers. A
		// bounded wait: a connection cut off without a reset must not
		// hold the runner (pgx closes a connection whose rollback timed out).
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
		defer cancel()
		_ = tx.Rollback(rctx)
	}()
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return projection.Transient(fmt.Errorf("projection/postgres: commit: %w", err))
	}
	return nil
}
