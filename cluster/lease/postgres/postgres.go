// Package postgres is a lease.Store on PostgreSQL (pgx/v5, pgxpool): node
// leases in the node_leases table and coordinator leases in
// coordinator_lease, both from package migrations.
//
// Database time. Every expiry is written, and every "has it expired?" is
// answered, on the server's clock: clock_timestamp() read inside the
// operation's transaction after the lease row is locked, so a renewal that
// waited for the lock is not dated from before the wait. Holders never
// compare their own clock with it (see lease.Keeper).
//
// Tests. A conformance suite cannot wait out real lease lengths, so
// WithClock replaces the server's clock by a fake one: each operation then
// sends the fake time as a query parameter, and the SQL uses it in place
// of clock_timestamp() — coalesce($t, clock_timestamp()) is the only
// difference between the two modes; every decision is taken by the same
// statements either way. A test without WithClock checks that expiries do
// come from the server's clock.
//
// Fencing the journal. NodeLeaseExpired answers "expired" only once the
// writes of journal/postgres that checked the lease in their own statement
// (journal/postgres.Fence) and hold its row FOR KEY SHARE have ended, and
// renewals lock the row FOR NO KEY UPDATE, which those writes do not block.
//
// Fencing with sharding/postgres. The coordinator lease of an entity type
// is the coordinator_lease row whose epoch sharding/postgres's Allocate and
// Deallocate check; sharding/postgres acquires and renews it through this
// store. AcquireCoordinator fences the allocation writes of every earlier
// holder: it locks the row (waiting for writes in flight, which
// share-lock it) and increments its epoch.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/cluster/lease"
)

// Store is a lease.Store on PostgreSQL. The pool stays the caller's.
type Store struct {
	pool  *pgxpool.Pool
	clock func() time.Time // nil: the server's clock
}

var (
	_ lease.Store      = (*Store)(nil)
	_ lease.NodePruner = (*Store)(nil)
)

// Option configures a Store.
type Option func(*Store)

// WithClock makes the store use now instead of the server's clock: for
// tests only (see the package documentation).
func WithClock(now func() time.Time) Option { return func(s *Store) { s.clock = now } }

// New returns a store on pool, whose search_path must reach the tables of
// package migrations.
func New(pool *pgxpool.Pool, opts ...Option) *Store {
	s := &Store{pool: pool}
	for _, o := range opts {
		o(s)
	}
	return s
}

// timeParam is the $t of the statements: NULL for the server's clock.
func (s *Store) timeParam() any {
	if s.clock == nil {
		return nil
	}
	return s.clock()
}

// errRetry asks for one more attempt: a concurrent insert of the same row won.
var errRetry = errors.New("retry")

// inTx runs fn in a transaction, once more if it asks to.
func (s *Store) inTx(ctx context.Context, fn func(pgx.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	for range 2 {
		err := pgx.BeginFunc(ctx, s.pool, fn)
		if !errors.Is(err, errRetry) {
			return err
		}
	}
	return fmt.Errorf("lost two races to insert the lease row")
}

// AcquireNode implements lease.Store.
func (s *Store) AcquireNode(ctx context.Context, node cluster.UniqueAddress, ttl time.Duration) error {
	if err := s.extendNode(ctx, node, ttl, true); err != nil {
		return fmt.Errorf("lease/postgres: acquire node %s: %w", node, err)
	}
	return nil
}

// RenewNode implements lease.Store.
func (s *Store) RenewNode(ctx context.Context, node cluster.UniqueAddress, ttl time.Duration) error {
	if err := s.extendNode(ctx, node, ttl, false); err != nil {
		return fmt.Errorf("lease/postgres: renew node %s: %w", node, err)
	}
	return nil
}

func (s *Store) extendNode(ctx context.Context, node cluster.UniqueAddress, ttl time.Duration, create bool) error {
	if err := lease.ValidateNode(node); err != nil {
		return err
	}
	if err := lease.ValidateTTL(ttl); err != nil {
		return err
	}
	id, inc := node.Node, int64(node.Incarnation)
	return s.inTx(ctx, func(tx pgx.Tx) error {
		// FOR NO KEY UPDATE, as the UPDATE below takes: the journal's
		// fenced writes hold the row FOR KEY SHARE (journal/postgres.Fence),
		// and a renewal must not wait for them.
		if _, err := tx.Exec(ctx, `SELECT 1 FROM node_leases WHERE node_id = $1 AND incarnation = $2 FOR NO KEY UPDATE`, id, inc); err != nil {
			return err
		}
		var (
			now           time.Time
			found, down   bool
			live, younger bool
		)
		err := tx.QueryRow(ctx, `SELECT t.now, l.node_id IS NOT NULL, coalesce(l.down, false), coalesce(l.expires_at > t.now, false),
				EXISTS (SELECT 1 FROM node_leases WHERE node_id = $1 AND incarnation > $2)
			FROM (SELECT coalesce($3::timestamptz, clock_timestamp()) AS now) t
			LEFT JOIN node_leases l ON l.node_id = $1 AND l.incarnation = $2`,
			id, inc, s.timeParam()).Scan(&now, &found, &down, &live, &younger)
		if err != nil {
			return err
		}
		expires := now.Add(ttl)
		switch {
		case !found && !create:
			return lease.ErrNoLease
		case !found && younger:
			return fmt.Errorf("%w: %s#%d, a newer incarnation holds a lease", lease.ErrStaleIncarnation, id, inc)
		case !found:
			tag, err := tx.Exec(ctx, `INSERT INTO node_leases (node_id, incarnation, expires_at)
				VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`, id, inc, expires)
			if err == nil && tag.RowsAffected() == 0 {
				return errRetry
			}
			return err
		case down:
			return lease.ErrNodeDown
		case !live:
			return lease.ErrLeaseExpired
		}
		_, err = tx.Exec(ctx, `UPDATE node_leases SET expires_at = $3 WHERE node_id = $1 AND incarnation = $2`, id, inc, expires)
		return err
	})
}

// DownNode implements lease.Store.
func (s *Store) DownNode(ctx context.Context, node cluster.UniqueAddress) error {
	if err := s.endNode(ctx, node, false); err != nil {
		return fmt.Errorf("lease/postgres: down node %s: %w", node, err)
	}
	return nil
}

// ReleaseNode implements lease.Store.
func (s *Store) ReleaseNode(ctx context.Context, node cluster.UniqueAddress) error {
	if err := s.endNode(ctx, node, true); err != nil {
		return fmt.Errorf("lease/postgres: release node %s: %w", node, err)
	}
	return nil
}

// endNode marks an incarnation down, expiring its lease now when expireNow;
// an unknown incarnation is recorded down and expired.
func (s *Store) endNode(ctx context.Context, node cluster.UniqueAddress, expireNow bool) error {
	if err := lease.ValidateNode(node); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	_, err := s.pool.Exec(ctx, `WITH t AS (SELECT coalesce($3::timestamptz, clock_timestamp()) AS now)
		INSERT INTO node_leases AS l (node_id, incarnation, expires_at, down)
		SELECT $1, $2, t.now, true FROM t
		ON CONFLICT (node_id, incarnation) DO UPDATE SET
			down = true,
			expires_at = CASE WHEN $4 THEN least(l.expires_at, excluded.expires_at) ELSE l.expires_at END`,
		node.Node, int64(node.Incarnation), s.timeParam(), expireNow)
	return err
}

// NodeLeaseExpired implements lease.Store.
func (s *Store) NodeLeaseExpired(ctx context.Context, node cluster.UniqueAddress) (bool, error) {
	if err := lease.ValidateNode(node); err != nil {
		return false, err
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	var expired bool
	err := s.pool.QueryRow(ctx, `SELECT expires_at <= coalesce($3::timestamptz, clock_timestamp())
		FROM node_leases WHERE node_id = $1 AND incarnation = $2`,
		node.Node, int64(node.Incarnation), s.timeParam()).Scan(&expired)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return false, fmt.Errorf("lease/postgres: node %s: %w", node, lease.ErrNoLease)
	case err != nil:
		return false, fmt.Errorf("lease/postgres: node %s: %w", node, err)
	case !expired:
		return false, nil
	}
	// Expired, for good. Before the shards may move, wait for the writes
	// that saw the lease live and still hold it FOR KEY SHARE
	// (journal/postgres.Fence): once this lock is granted they have
	// committed or rolled back, and later ones see it expired.
	if _, err := s.pool.Exec(ctx, `SELECT 1 FROM node_leases WHERE node_id = $1 AND incarnation = $2 FOR UPDATE`,
		node.Node, int64(node.Incarnation)); err != nil {
		return false, fmt.Errorf("lease/postgres: node %s: wait for its writes in flight: %w", node, err)
	}
	return true, nil
}

// PruneNodes implements lease.NodePruner in one statement: it deletes the
// rows expired more than olderThan ago but the newest incarnation's of
// each node id, which it marks down. The DELETE locks each row, so it
// waits for fenced journal writes that still hold one FOR KEY SHARE.
func (s *Store) PruneNodes(ctx context.Context, olderThan time.Duration) (int, error) {
	if olderThan < 0 {
		return 0, fmt.Errorf("lease/postgres: %w: prune node leases older than %v", lease.ErrInvalidConfig, olderThan)
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	var n int64
	err := s.pool.QueryRow(ctx, `WITH t AS (SELECT coalesce($2::timestamptz, clock_timestamp()) - $1::bigint * interval '1 microsecond' AS before),
		old AS (SELECT l.node_id, l.incarnation,
				l.incarnation = (SELECT max(m.incarnation) FROM node_leases m WHERE m.node_id = l.node_id) AS newest
			FROM node_leases l, t WHERE l.expires_at <= t.before),
		deleted AS (DELETE FROM node_leases l USING old
			WHERE l.node_id = old.node_id AND l.incarnation = old.incarnation AND NOT old.newest RETURNING 1),
		downed AS (UPDATE node_leases l SET down = true FROM old
			WHERE l.node_id = old.node_id AND l.incarnation = old.incarnation AND old.newest AND NOT l.down RETURNING 1)
		SELECT (SELECT count(*) FROM deleted) + (SELECT count(*) FROM downed)`,
		olderThan.Microseconds(), s.timeParam()).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("lease/postgres: prune node leases: %w", err)
	}
	return int(n), nil
}

// ExpiredNodes returns those of nodes whose lease has expired in the
// store's time (downed and released ones included), in no order; an
// incarnation the store does not know is not among them. next is the time
// left, in the store's time, on the first of the others' leases to end (0
// when none is live): a poller that asks again then sees a crashed node's
// lease expired as soon as the store does. It locks nothing: a caller that
// moves shards on the answer asks NodeLeaseExpired.
func (s *Store) ExpiredNodes(ctx context.Context, nodes []cluster.UniqueAddress) (expired []cluster.UniqueAddress, next time.Duration, err error) {
	ids, incs := make([]string, 0, len(nodes)), make([]int64, 0, len(nodes))
	for _, n := range nodes {
		if err := lease.ValidateNode(n); err != nil {
			return nil, 0, err
		}
		ids, incs = append(ids, n.Node), append(incs, int64(n.Incarnation))
	}
	rows, err := s.pool.Query(ctx, `SELECT l.node_id, l.incarnation,
			extract(epoch FROM l.expires_at - t.now)::float8
		FROM (SELECT coalesce($3::timestamptz, clock_timestamp()) AS now) t
		CROSS JOIN unnest($1::text[], $2::bigint[]) AS n(id, inc)
		JOIN node_leases l ON l.node_id = n.id AND l.incarnation = n.inc`, ids, incs, s.timeParam())
	if err != nil {
		return nil, 0, fmt.Errorf("lease/postgres: expired nodes: %w", err)
	}
	var a cluster.UniqueAddress
	var inc int64
	var left float64
	_, err = pgx.ForEachRow(rows, []any{&a.Node, &inc, &left}, func() error {
		switch {
		case left <= 0:
			a.Incarnation = uint64(inc)
			expired = append(expired, a)
		case left < math.MaxInt64/float64(time.Second):
			if d := time.Duration(math.Round(left * float64(time.Second))); next == 0 || d < next {
				next = max(d, 1)
			}
		}
		return nil
	})
	if err != nil {
		return nil, 0, fmt.Errorf("lease/postgres: expired nodes: %w", err)
	}
	return expired, next, nil
}

// coordinatorRow is the coordinator lease row read under its lock, with
// the database time of the reading.
type coordinatorRow struct {
	now   time.Time
	found bool
	epoch int64
	owner string
	live  bool    // expires_at > now; 'infinity' (sharding/postgres's Acquire) is always live
	left  float64 // seconds from now to expires_at (+Inf for 'infinity', and without a row)
}

func (s *Store) lockCoordinator(ctx context.Context, tx pgx.Tx, name string) (coordinatorRow, error) {
	var r coordinatorRow
	if _, err := tx.Exec(ctx, `SELECT 1 FROM coordinator_lease WHERE type_name = $1 FOR UPDATE`, name); err != nil {
		return r, err
	}
	err := tx.QueryRow(ctx, `SELECT t.now, l.type_name IS NOT NULL, coalesce(l.epoch, 0), coalesce(l.owner, ''),
			coalesce(l.expires_at > t.now, false),
			CASE WHEN l.expires_at < 'infinity' THEN extract(epoch FROM l.expires_at - t.now)::float8 ELSE 'Infinity' END
		FROM (SELECT coalesce($2::timestamptz, clock_timestamp()) AS now) t
		LEFT JOIN coordinator_lease l ON l.type_name = $1`,
		name, s.timeParam()).Scan(&r.now, &r.found, &r.epoch, &r.owner, &r.live, &r.left)
	return r, err
}

// AcquireCoordinator implements lease.Store.
func (s *Store) AcquireCoordinator(ctx context.Context, name, owner string, ttl time.Duration) (uint64, error) {
	if err := lease.ValidateName(name); err != nil {
		return 0, err
	}
	if err := lease.ValidateOwner(owner); err != nil {
		return 0, err
	}
	if err := lease.ValidateTTL(ttl); err != nil {
		return 0, err
	}
	var epoch int64
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		r, err := s.lockCoordinator(ctx, tx, name)
		if err != nil {
			return err
		}
		expires := r.now.Add(ttl)
		switch {
		case !r.found:
			err := tx.QueryRow(ctx, `INSERT INTO coordinator_lease (type_name, epoch, owner, expires_at)
				VALUES ($1, 1, $2, $3) ON CONFLICT DO NOTHING RETURNING epoch`, name, owner, expires).Scan(&epoch)
			if errors.Is(err, pgx.ErrNoRows) {
				return errRetry
			}
			return err
		case r.live && r.owner != owner:
			held := &lease.HeldError{Name: name, Owner: r.owner}
			if r.left > 0 && r.left < math.MaxInt64/float64(time.Second) {
				held.Left = time.Duration(math.Round(r.left * float64(time.Second)))
			}
			return held
		}
		return tx.QueryRow(ctx, `UPDATE coordinator_lease SET epoch = epoch + 1, owner = $2, expires_at = $3
			WHERE type_name = $1 RETURNING epoch`, name, owner, expires).Scan(&epoch)
	})
	if err != nil {
		return 0, fmt.Errorf("lease/postgres: acquire coordinator %s for %s: %w", name, owner, err)
	}
	return uint64(epoch), nil
}

// RenewCoordinator implements lease.Store.
func (s *Store) RenewCoordinator(ctx context.Context, name string, epoch uint64, ttl time.Duration) error {
	if err := lease.ValidateTTL(ttl); err != nil {
		return err
	}
	err := s.withCoordinator(ctx, name, epoch, func(tx pgx.Tx, r coordinatorRow) error {
		if !r.live {
			return lease.ErrLeaseExpired
		}
		_, err := tx.Exec(ctx, `UPDATE coordinator_lease SET expires_at = $2 WHERE type_name = $1`, name, r.now.Add(ttl))
		return err
	})
	if err != nil {
		return fmt.Errorf("lease/postgres: renew coordinator %s epoch %d: %w", name, epoch, err)
	}
	return nil
}

// ReleaseCoordinator implements lease.Store.
func (s *Store) ReleaseCoordinator(ctx context.Context, name string, epoch uint64) error {
	err := s.withCoordinator(ctx, name, epoch, func(tx pgx.Tx, r coordinatorRow) error {
		_, err := tx.Exec(ctx, `UPDATE coordinator_lease SET expires_at = least(expires_at, $2) WHERE type_name = $1`, name, r.now)
		return err
	})
	if err != nil {
		return fmt.Errorf("lease/postgres: release coordinator %s epoch %d: %w", name, epoch, err)
	}
	return nil
}

// withCoordinator runs fn on the locked lease row of name when epoch is its
// current one.
func (s *Store) withCoordinator(ctx context.Context, name string, epoch uint64, fn func(pgx.Tx, coordinatorRow) error) error {
	if err := lease.ValidateName(name); err != nil {
		return err
	}
	return s.inTx(ctx, func(tx pgx.Tx) error {
		r, err := s.lockCoordinator(ctx, tx, name)
		switch {
		case err != nil:
			return err
		case !r.found:
			return lease.ErrNoLease
		case epoch > math.MaxInt64 || r.epoch != int64(epoch):
			return fmt.Errorf("%w: current epoch %d", lease.ErrStaleEpoch, r.epoch)
		}
		return fn(tx, r)
	})
}

// NodeLease is a node lease that was not downed or released, for
// operators: Expired says whether it has expired in the store's time (a
// crashed incarnation nobody downed yet).
type NodeLease struct {
	Node      cluster.UniqueAddress
	ExpiresAt time.Time
	Expired   bool
}

// CoordinatorLease is the coordinator lease of one name, for operators.
type CoordinatorLease struct {
	Name, Owner string
	Epoch       uint64
	ExpiresAt   time.Time
	Expired     bool
}

// NodeLeases lists the node leases that were neither downed nor
// released, by node id and incarnation.
func (s *Store) NodeLeases(ctx context.Context) ([]NodeLease, error) {
	rows, err := s.pool.Query(ctx, `SELECT node_id, incarnation, expires_at,
			expires_at <= coalesce($1::timestamptz, clock_timestamp())
		FROM node_leases WHERE NOT down ORDER BY node_id COLLATE "C", incarnation`, s.timeParam())
	if err != nil {
		return nil, fmt.Errorf("lease/postgres: list node leases: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (NodeLease, error) {
		var l NodeLease
		var inc int64
		err := row.Scan(&l.Node.Node, &inc, &l.ExpiresAt, &l.Expired)
		l.Node.Incarnation = uint64(inc)
		return l, err
	})
	if err != nil {
		return nil, fmt.Errorf("lease/postgres: list node leases: %w", err)
	}
	return out, nil
}

// CoordinatorLeases lists every coordinator lease, by name.
func (s *Store) CoordinatorLeases(ctx context.Context) ([]CoordinatorLease, error) {
	rows, err := s.pool.Query(ctx, `SELECT type_name, owner, epoch, expires_at,
			expires_at <= coalesce($1::timestamptz, clock_timestamp())
		FROM coordinator_lease ORDER BY type_name COLLATE "C"`, s.timeParam())
	if err != nil {
		return nil, fmt.Errorf("lease/postgres: list coordinator leases: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (CoordinatorLease, error) {
		var l CoordinatorLease
		var epoch int64
		err := row.Scan(&l.Name, &l.Owner, &epoch, &l.ExpiresAt, &l.Expired)
		l.Epoch = uint64(epoch)
		return l, err
	})
	if err != nil {
		return nil, fmt.Errorf("lease/postgres: list coordinator leases: %w", err)
	}
	return out, nil
}
