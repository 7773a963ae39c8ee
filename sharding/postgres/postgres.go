// Package postgres keeps the shared state of sharding in PostgreSQL (pgx/v5,
// pgxpool): a sharding.CoordinatorStore on the coordinator_lease and
// shard_allocations tables and a sharding.RememberStore on
// remembered_entities, all from package migrations.
//
// Fencing is enforced by the database: Acquire increments the lease row's
// epoch under its row lock, and each Allocate or Deallocate is one statement
// that share-locks the lease row and writes only if its epoch still equals
// the writer's. A write therefore either commits before a takeover, and the
// new coordinator's Acquire sees it, or fails with sharding.ErrStaleEpoch.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shoal-dev/shoal/sharding"
)

// CoordinatorStore is a sharding.CoordinatorStore on PostgreSQL. The pool
// stays the caller's.
//
// Acquire takes the lease over unconditionally, as the interface asks:
// deciding who may coordinate is membership's job. The lease row's
// expires_at is written as 'infinity' (held until taken over), since the
// interface has no lease duration or renewal. Leases on the same row, with
// an expiry and renewal on database time, are cluster/lease/postgres's
// AcquireCoordinator and RenewCoordinator: their epochs fence this store's
// writes as Acquire's do, and a row Acquire wrote never expires for them.
type CoordinatorStore struct {
	pool *pgxpool.Pool
}

var _ sharding.CoordinatorStore = (*CoordinatorStore)(nil)

// NewCoordinatorStore returns a store on pool, whose search_path must reach
// the tables of package migrations.
func NewCoordinatorStore(pool *pgxpool.Pool) *CoordinatorStore { return &CoordinatorStore{pool: pool} }

// Acquire implements sharding.CoordinatorStore.
func (s *CoordinatorStore) Acquire(ctx context.Context, typeName, owner string) (uint64, map[string]string, error) {
	if err := ctx.Err(); err != nil {
		return 0, nil, err
	}
	var (
		epoch  int64
		shards = make(map[string]string)
	)
	// Two statements in one READ COMMITTED transaction, not one: the upsert
	// waits for in-flight fenced writes (they share-lock the lease row), and
	// only a statement started after it takes a snapshot that includes them.
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `INSERT INTO coordinator_lease (type_name, epoch, owner, expires_at)
			VALUES ($1, 1, $2, 'infinity')
			ON CONFLICT (type_name) DO UPDATE SET
				epoch = coordinator_lease.epoch + 1,
				owner = excluded.owner,
				expires_at = excluded.expires_at
			RETURNING epoch`, typeName, owner).Scan(&epoch)
		if err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT shard_id, region FROM shard_allocations WHERE type_name = $1`, typeName)
		if err != nil {
			return err
		}
		var shard, region string
		_, err = pgx.ForEachRow(rows, []any{&shard, &region}, func() error {
			shards[shard] = region
			return nil
		})
		return err
	})
	if err != nil {
		return 0, nil, fmt.Errorf("sharding/postgres: acquire %s for %s: %w", typeName, owner, err)
	}
	return uint64(epoch), shards, nil
}

// The lease CTE share-locks the lease row, so a concurrent Acquire either
// waits for this write to commit or has committed first; in the latter case
// READ COMMITTED re-reads the locked row and sees the new epoch. It returns
// the current epoch (no row when the type was never acquired) to tell a
// refused write from a done one.
const (
	allocateSQL = `WITH lease AS (
			SELECT epoch FROM coordinator_lease WHERE type_name = $1 FOR SHARE
		), upsert AS (
			INSERT INTO shard_allocations (type_name, shard_id, region, epoch)
			SELECT $1, $3, $4, epoch FROM lease WHERE epoch = $2
			ON CONFLICT (type_name, shard_id) DO UPDATE SET
				region = excluded.region,
				epoch = excluded.epoch
		)
		SELECT epoch FROM lease`
	deallocateSQL = `WITH lease AS (
			SELECT epoch FROM coordinator_lease WHERE type_name = $1 FOR SHARE
		), del AS (
			DELETE FROM shard_allocations
			WHERE type_name = $1 AND shard_id = $3
				AND EXISTS (SELECT 1 FROM lease WHERE epoch = $2)
		)
		SELECT epoch FROM lease`
)

// Allocate implements sharding.CoordinatorStore.
func (s *CoordinatorStore) Allocate(ctx context.Context, typeName string, epoch uint64, shard, region string) error {
	if err := s.fenced(ctx, allocateSQL, typeName, epoch, shard, region); err != nil {
		return fmt.Errorf("sharding/postgres: allocate %s shard %s to %s: %w", typeName, shard, region, err)
	}
	return nil
}

// Deallocate implements sharding.CoordinatorStore.
func (s *CoordinatorStore) Deallocate(ctx context.Context, typeName string, epoch uint64, shard string) error {
	if err := s.fenced(ctx, deallocateSQL, typeName, epoch, shard); err != nil {
		return fmt.Errorf("sharding/postgres: deallocate %s shard %s: %w", typeName, shard, err)
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
	var current int64
	err := s.pool.QueryRow(ctx, sql, append([]any{typeName, int64(epoch)}, args...)...).Scan(&current)
	switch {
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
