// Package lease makes the database the arbiter of who may act (see
// docs/DESIGN.md, "Leases and self-fencing"): node leases, one per node
// incarnation, and named coordinator leases with a fencing epoch, both
// expiring on the store's clock and renewed by their holders; plus the pure
// Keeper that tells a holder, by its own monotonic clock, when it must stop
// acting (self-fencing).
//
// How the pieces fit:
//
//   - A node incarnation acquires its node lease before it hosts anything
//     and renews it every Timing.RenewEvery. Its Keeper counts from the
//     start of the last successful renewal: at start + Length − Margin the
//     node stops every shard it hosts at once, whether or not it could
//     reach the store. The store's expiry is later (it counts from when
//     the store handled the renewal), so the node has fenced itself before
//     the store says its lease expired.
//   - The coordinator downs an incarnation that membership declares dead
//     (DownNode): its next renewal fails, so it fences itself. Its shards
//     move only once NodeLeaseExpired says so, in the store's time. It
//     also polls the leases of the members membership still shows
//     healthy: an expired one is as final as a down, so a crash costs
//     about a lease, whatever the failure detector takes.
//   - A holder may be frozen past its fence time (a pause) and resume
//     before its fence callback runs: what acts on the lease checks
//     Holder.Holds itself (the journal and the transport of package node
//     do), and an expired lease is never renewed.
//   - A coordinator acts only while it holds the coordinator lease of its
//     name; every acquisition increments the epoch, and a write or renewal
//     under an older epoch is refused (ErrStaleEpoch).
//
// "Time" inside a Store is the store's own: the database server's clock
// for the Postgres store (cluster/lease/postgres), an injected clock for
// the memory store. Holders never compare their clock with the store's:
// the Keeper only measures intervals on the holder's monotonic clock.
// A Holder runs a Keeper for one lease: it renews in the background and
// calls its owner's fence function on time.
package lease

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/shoal-dev/shoal/cluster"
)

var (
	// ErrNoLease: the store holds no lease of that incarnation or name.
	ErrNoLease = errors.New("lease: no such lease")
	// ErrLeaseExpired: the lease expired in the store's time. An expired
	// node lease never comes back: the node must fence itself and rejoin
	// as a new incarnation; an expired coordinator lease must be acquired
	// again, under a new epoch.
	ErrLeaseExpired = errors.New("lease: expired")
	// ErrNodeDown: the incarnation was downed or released; it can neither
	// renew nor acquire again.
	ErrNodeDown = errors.New("lease: node incarnation is down")
	// ErrStaleIncarnation: a newer incarnation of the node id holds or
	// held a lease, so an older one may not start one. It is
	// cluster.ErrStaleIncarnation, what a Transport reports for the same
	// meaning.
	ErrStaleIncarnation = cluster.ErrStaleIncarnation
	// ErrLeaseHeld: another owner holds the coordinator lease and it has
	// not expired.
	ErrLeaseHeld = errors.New("lease: held by another owner")
	// ErrStaleEpoch: a newer epoch of the coordinator lease was handed out.
	ErrStaleEpoch = errors.New("lease: stale epoch")
	// ErrInvalidConfig: an empty name, owner or node id, a lease length
	// that is not positive, a Timing that Validate refuses, a Holder
	// without its functions. It is cluster.ErrInvalidConfig.
	ErrInvalidConfig = cluster.ErrInvalidConfig
)

// HeldError is how both stores refuse AcquireCoordinator while another
// owner holds the lease: it matches ErrLeaseHeld and says how long the
// lease has left in the store's time, so that the one waiting for it asks
// again as it expires rather than a polling interval later (a crashed
// holder's lease ends about when its node lease does; see docs/DESIGN.md,
// "Leases and self-fencing").
type HeldError struct {
	Name, Owner string
	// Left is the lease's time left when the store refused; 0 when
	// unknown, negative never.
	Left time.Duration
}

func (e *HeldError) Error() string {
	return fmt.Errorf("%w: %s by %s for %v more", ErrLeaseHeld, e.Name, e.Owner, e.Left).Error()
}

// Is makes errors.Is(err, ErrLeaseHeld) true.
func (e *HeldError) Is(target error) bool { return target == ErrLeaseHeld }

// HeldFor reports the time left on a lease held elsewhere that err
// (a HeldError, wrapped or not) refused an acquisition for.
func HeldFor(err error) (time.Duration, bool) {
	var h *HeldError
	if errors.As(err, &h) && h.Left > 0 {
		return h.Left, true
	}
	return 0, false
}

// Store keeps leases. Every method takes its time from the store's clock.
// Implementations: MemoryStore here, the Postgres store in
// cluster/lease/postgres; both pass the suite in cluster/lease/leasetest.
type Store interface {
	// AcquireNode starts, or extends, the lease of incarnation node until
	// store time + ttl. It fails with ErrNodeDown once the incarnation was
	// downed or released, ErrLeaseExpired once its lease expired, and
	// ErrStaleIncarnation when a newer incarnation of the node id exists.
	AcquireNode(ctx context.Context, node cluster.UniqueAddress, ttl time.Duration) error
	// RenewNode extends an existing node lease until store time + ttl.
	// Beyond AcquireNode's errors, it fails with ErrNoLease when there is
	// no lease: a renewal never creates one.
	RenewNode(ctx context.Context, node cluster.UniqueAddress, ttl time.Duration) error
	// DownNode marks the incarnation down, so that its next renewal or
	// acquisition fails. The lease keeps its expiry: shards of a downed
	// node move only after NodeLeaseExpired. Downing an incarnation the
	// store does not know records it as down and expired, so that it can
	// never acquire later. Downing twice is harmless.
	DownNode(ctx context.Context, node cluster.UniqueAddress) error
	// ReleaseNode ends the lease of a node leaving gracefully: down, and
	// expired now, so its shards may move at once.
	ReleaseNode(ctx context.Context, node cluster.UniqueAddress) error
	// NodeLeaseExpired reports whether node's lease has expired in the
	// store's time: only then may its shards be allocated elsewhere.
	// ErrNoLease when the store has never heard of the incarnation.
	NodeLeaseExpired(ctx context.Context, node cluster.UniqueAddress) (bool, error)

	// AcquireCoordinator makes owner (which names a node incarnation) the
	// holder of the coordinator lease name until store time + ttl, under
	// an epoch greater than any handed out before. It fails with
	// ErrLeaseHeld while another owner holds an unexpired lease; the same
	// owner may acquire again at once (a new epoch fences its old self).
	AcquireCoordinator(ctx context.Context, name, owner string, ttl time.Duration) (epoch uint64, err error)
	// RenewCoordinator extends the lease held under epoch until store time
	// + ttl: ErrStaleEpoch when a newer epoch exists, ErrLeaseExpired once
	// it expired (acquire again), ErrNoLease when name was never acquired.
	RenewCoordinator(ctx context.Context, name string, epoch uint64, ttl time.Duration) error
	// ReleaseCoordinator expires the lease held under epoch now, so a
	// successor need not wait: ErrStaleEpoch when a newer epoch exists.
	ReleaseCoordinator(ctx context.Context, name string, epoch uint64) error
}

// NodePruner is a Store that forgets node leases that expired long ago:
// without it the row of every incarnation that ever ran stays, and a
// crashed one shows in the admin API for ever. Both stores implement it.
type NodePruner interface {
	// PruneNodes forgets the node leases that expired more than olderThan
	// ago in the store's time, and reports how many it changed. The newest
	// incarnation of each node id is kept, marked down (it still keeps
	// older incarnations from acquiring: ErrStaleIncarnation); the others
	// are deleted (a renewal then fails with ErrNoLease). olderThan must
	// leave time for the coordinator to have moved the shards of the
	// expired incarnation (it asks NodeLeaseExpired first): minutes, not
	// a lease. A negative olderThan is ErrInvalidConfig.
	PruneNodes(ctx context.Context, olderThan time.Duration) (int, error)
}

// ValidateNode returns ErrInvalidConfig for an address without a node id.
// Stores call it first, so that every store refuses the same input.
func ValidateNode(node cluster.UniqueAddress) error {
	if node.Node == "" {
		return fmt.Errorf("%w: empty node id", ErrInvalidConfig)
	}
	if node.Incarnation > math.MaxInt64 {
		// Beyond a Postgres bigint.
		return fmt.Errorf("%w: incarnation %d too large", ErrInvalidConfig, node.Incarnation)
	}
	return nil
}

// ValidateName returns ErrInvalidConfig for an empty coordinator lease
// name.
func ValidateName(name string) error {
	if name == "" {
		return fmt.Errorf("%w: empty lease name", ErrInvalidConfig)
	}
	return nil
}

// ValidateOwner returns ErrInvalidConfig for an empty lease owner.
func ValidateOwner(owner string) error {
	if owner == "" {
		return fmt.Errorf("%w: empty lease owner", ErrInvalidConfig)
	}
	return nil
}

// ValidateTTL returns ErrInvalidConfig for a lease length under one
// microsecond, the resolution of Postgres timestamps.
func ValidateTTL(ttl time.Duration) error {
	if ttl < time.Microsecond {
		return fmt.Errorf("%w: lease length %v", ErrInvalidConfig, ttl)
	}
	return nil
}
