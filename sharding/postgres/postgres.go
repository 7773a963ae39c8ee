// Package postgres keeps the shared state of sharding in PostgreSQL (pgx/v5,
// pgxpool): a sharding.CoordinatorStore on the coordinator_lease,
// shard_allocations and shard_mail_holders tables and a
// sharding.RememberStore on remembered_entities, all from package
// migrations.
//
// The coordinator lease is cluster/lease/postgres's coordinator lease of
// the type (the same coordinator_lease row): it expires on the database's
// clock, and Acquire refuses it while another owner holds it. Fencing is
// enforced by the database: acquiring increments the row's epoch under
// its row lock, and each Allocate or Deallocate is one statement that
// share-locks the row and writes (to both tables) only if its epoch still
// equals the writer's (an Update runs such statements in one transaction, so the
// first one's lock holds the epoch for the rest). A write therefore
// either commits before a takeover, and the new coordinator's Acquire
// sees it, or fails with sharding.ErrStaleEpoch.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"github.com/shoal-dev/shoal/cluster"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	leasepg "github.com/shoal-dev/shoal/cluster/lease/postgres"
	"github.com/shoal-dev/shoal/sharding"
)

// CoordinatorStore is a sharding.CoordinatorStore on PostgreSQL. The pool
// stays the caller's.
type CoordinatorStore struct {
	pool   *pgxpool.Pool
	leases *leasepg.Store
}

var _ sharding.CoordinatorStore = (*CoordinatorStore)(nil)

// Option configures a CoordinatorStore.
type Option func(*options)

type options struct{ lease []leasepg.Option }

// WithClock makes the store's leases use now instead of the database
// server's clock: for tests only (see cluster/lease/postgres.WithClock).
func WithClock(now func() time.Time) Option {
	return func(o *options) { o.lease = append(o.lease, leasepg.WithClock(now)) }
}

// NewCoordinatorStore returns a store on pool, whose search_path must reach
// the tables of package migrations.
func NewCoordinatorStore(pool *pgxpool.Pool, opts ...Option) *CoordinatorStore {
	var o options
	for _, f := range opts {
		f(&o)
	}
	return &CoordinatorStore{pool: pool, leases: leasepg.New(pool, o.lease...)}
}

// Acquire implements sharding.CoordinatorStore.
func (s *CoordinatorStore) Acquire(ctx context.Context, typeName string, owner cluster.UniqueAddress, ttl time.Duration) (uint64, map[string]sharding.Allocation, error) {
	// The acquisition waited for fenced writes in flight (they share-lock
	// the lease row it updated) and has committed: a statement started
	// now sees every write of the old epoch that will ever land.
	epoch, err := s.leases.AcquireCoordinator(ctx, typeName, owner.String(), ttl)
	if err != nil {
		return 0, nil, fmt.Errorf("sharding/postgres: %w", err)
	}
	shards := make(map[string]sharding.Allocation)
	rows, err := s.pool.Query(ctx, acquiredSQL, typeName)
	if err == nil {
		var shard, region, heldBy string
		_, err = pgx.ForEachRow(rows, []any{&shard, &region, &heldBy}, func() error {
			var a sharding.Allocation
			var err error
			if a.Region, err = cluster.ParseUniqueAddress(region); err != nil {
				return err
			}
			if a.MailHeldBy, err = cluster.ParseUniqueAddress(heldBy); err != nil {
				return err
			}
			shards[shard] = a
			return nil
		})
	}
	if err != nil {
		return 0, nil, fmt.Errorf("sharding/postgres: read the allocations of %s: %w", typeName, err)
	}
	return epoch, shards, nil
}

// Renew implements sharding.CoordinatorStore.
func (s *CoordinatorStore) Renew(ctx context.Context, typeName string, epoch uint64, ttl time.Duration) error {
	if err := s.leases.RenewCoordinator(ctx, typeName, epoch, ttl); err != nil {
		return fmt.Errorf("sharding/postgres: %w", err)
	}
	return nil
}

// Release implements sharding.CoordinatorStore.
func (s *CoordinatorStore) Release(ctx context.Context, typeName string, epoch uint64) error {
	if err := s.leases.ReleaseCoordinator(ctx, typeName, epoch); err != nil {
		return fmt.Errorf("sharding/postgres: %w", err)
	}
	return nil
}

// writeSQL makes one change ($3 shard, $4 region, $5 the region holding
// its mail, "" for none) under epoch $2. The lease CTE share-locks the
// lease row, so a concurrent Acquire either waits for this write to commit
// or has committed first; in the latter case READ COMMITTED re-reads the
// locked row and sees the new epoch. It returns the current epoch (no row
// when the type was never acquired) to tell a refused write from a done
// one. A shard has a row in shard_allocations while it has a home and one
// in shard_mail_holders while a region holds its mail.
const (
	writeSQL = `WITH lease AS (
			SELECT epoch FROM coordinator_lease WHERE type_name = $1 FOR SHARE
		), current AS (
			SELECT epoch FROM lease WHERE epoch = $2
		), homed AS (
			INSERT INTO shard_allocations (type_name, shard_id, region, epoch)
			SELECT $1, $3, $4, epoch FROM current WHERE $4 <> ''
			ON CONFLICT (type_name, shard_id) DO UPDATE SET
				region = excluded.region,
				epoch = excluded.epoch
		), unhomed AS (
			DELETE FROM shard_allocations
			WHERE type_name = $1 AND shard_id = $3 AND $4 = ''
				AND EXISTS (SELECT 1 FROM current)
		), held AS (
			INSERT INTO shard_mail_holders (type_name, shard_id, region, epoch)
			SELECT $1, $3, $5, epoch FROM current WHERE $5 <> ''
			ON CONFLICT (type_name, shard_id) DO UPDATE SET
				region = excluded.region,
				epoch = excluded.epoch
		), unheld AS (
			DELETE FROM shard_mail_holders
			WHERE type_name = $1 AND shard_id = $3 AND $5 = ''
				AND EXISTS (SELECT 1 FROM current)
		)
		SELECT epoch FROM lease`
	leaseEpochSQL = `SELECT epoch FROM coordinator_lease WHERE type_name = $1 AND $2::bigint IS NOT NULL FOR SHARE`
	// acquiredSQL reads both tables in one snapshot.
	acquiredSQL = `SELECT shard_id, coalesce(a.region, ''), coalesce(h.region, '')
		FROM (SELECT shard_id, region FROM shard_allocations WHERE type_name = $1) a
		FULL JOIN (SELECT shard_id, region FROM shard_mail_holders WHERE type_name = $1) h USING (shard_id)`
)

// Allocate implements sharding.CoordinatorStore.
func (s *CoordinatorStore) Allocate(ctx context.Context, typeName string, epoch uint64, shard string, region cluster.UniqueAddress) error {
	if err := s.fenced(ctx, writeSQL, typeName, epoch, shard, addressText(region), ""); err != nil {
		return fmt.Errorf("sharding/postgres: allocate %s shard %s to %s: %w", typeName, shard, region, err)
	}
	return nil
}

// Deallocate implements sharding.CoordinatorStore.
func (s *CoordinatorStore) Deallocate(ctx context.Context, typeName string, epoch uint64, shard string) error {
	if err := s.fenced(ctx, writeSQL, typeName, epoch, shard, "", ""); err != nil {
		return fmt.Errorf("sharding/postgres: deallocate %s shard %s: %w", typeName, shard, err)
	}
	return nil
}

// Update implements sharding.CoordinatorStore: the changes go as one batch
// (one round trip) in one transaction; its first statement share-locks the
// lease row, so every change sees the same epoch, and a refused one rolls
// back those before it.
func (s *CoordinatorStore) Update(ctx context.Context, typeName string, epoch uint64, changes []sharding.AllocationChange) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if epoch > math.MaxInt64 {
		return fmt.Errorf("%w: epoch %d was never issued", sharding.ErrStaleEpoch, epoch)
	}
	var batch pgx.Batch
	if len(changes) == 0 {
		batch.Queue(leaseEpochSQL, typeName, int64(epoch))
	}
	for _, c := range changes {
		batch.Queue(writeSQL, typeName, int64(epoch), c.Shard, addressText(c.Region), addressText(c.MailHeldBy))
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		results := tx.SendBatch(ctx, &batch)
		for range batch.Len() {
			if err := checkEpoch(results.QueryRow(), typeName, epoch); err != nil {
				results.Close()
				return err
			}
		}
		return results.Close()
	})
	if err != nil {
		return fmt.Errorf("sharding/postgres: update %s (%d changes): %w", typeName, len(changes), err)
	}
	return nil
}

// fenced runs a write statement taking (type, epoch, args...) that returns
// the lease's current epoch, and reports ErrStaleEpoch when it is not epoch.
func (s *CoordinatorStore) fenced(ctx context.Context, sql, typeName string, epoch uint64, args ...any) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if epoch > math.MaxInt64 {
		// Beyond bigint: no Acquire handed it out.
		return fmt.Errorf("%w: epoch %d was never issued", sharding.ErrStaleEpoch, epoch)
	}
	return checkEpoch(s.pool.QueryRow(ctx, sql, append([]any{typeName, int64(epoch)}, args...)...), typeName, epoch)
}

// checkEpoch reads the lease epoch a fenced statement returned: no row, or
// another epoch, means the write was refused.
func checkEpoch(row pgx.Row, typeName string, epoch uint64) error {
	var current int64
	switch err := row.Scan(&current); {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("%w: epoch %d, but %s has no coordinator lease", sharding.ErrStaleEpoch, epoch, typeName)
	case err != nil:
		return err
	case uint64(current) != epoch:
		return fmt.Errorf("%w: epoch %d, current %d", sharding.ErrStaleEpoch, epoch, current)
	}
	return nil
}

// RememberStore is a sharding.RememberStore on PostgreSQL. The pool stays
// the caller's.
type RememberStore struct {
	pool *pgxpool.Pool
}

var _ sharding.RememberStore = (*RememberStore)(nil)

// NewRememberStore returns a store on pool, whose search_path must reach
// the tables of package migrations.
func NewRememberStore(pool *pgxpool.Pool) *RememberStore { return &RememberStore{pool: pool} }

// Shards implements sharding.RememberStore, in byte order like Entities.
func (s *RememberStore) Shards(ctx context.Context, typeName string) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT DISTINCT shard_id COLLATE "C" FROM remembered_entities
		WHERE type_name = $1 ORDER BY 1`, typeName)
	if err == nil {
		var shards []string
		shards, err = pgx.CollectRows(rows, pgx.RowTo[string])
		if err == nil {
			return shards, nil
		}
	}
	return nil, fmt.Errorf("sharding/postgres: shards of %s: %w", typeName, err)
}

// Entities implements sharding.RememberStore. Ids come in byte order (the
// "C" collation), like the memory store's, whatever the database's locale.
func (s *RememberStore) Entities(ctx context.Context, typeName, shard string) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT entity_id FROM remembered_entities
		WHERE type_name = $1 AND shard_id = $2
		ORDER BY entity_id COLLATE "C"`, typeName, shard)
	if err == nil {
		var ids []string
		ids, err = pgx.CollectRows(rows, pgx.RowTo[string])
		if err == nil {
			return ids, nil
		}
	}
	return nil, fmt.Errorf("sharding/postgres: entities of %s shard %s: %w", typeName, shard, err)
}

// Add implements sharding.RememberStore; adding a present entity is a no-op.
func (s *RememberStore) Add(ctx context.Context, typeName, shard, entityID string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO remembered_entities (type_name, shard_id, entity_id)
		VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`, typeName, shard, entityID)
	if err != nil {
		return fmt.Errorf("sharding/postgres: remember %s shard %s entity %s: %w", typeName, shard, entityID, err)
	}
	return nil
}

// Remove implements sharding.RememberStore; removing an absent entity is a no-op.
func (s *RememberStore) Remove(ctx context.Context, typeName, shard, entityID string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	_, err := s.pool.Exec(ctx, `DELETE FROM remembered_entities
		WHERE type_name = $1 AND shard_id = $2 AND entity_id = $3`, typeName, shard, entityID)
	if err != nil {
		return fmt.Errorf("sharding/postgres: forget %s shard %s entity %s: %w", typeName, shard, entityID, err)
	}
	return nil
}

// addressText is how a region is stored: node#incarnation, and the empty
// string for none (cluster.ParseUniqueAddress reads both back).
func addressText(a cluster.UniqueAddress) string {
	if a.IsZero() {
		return ""
	}
	return a.String()
}
