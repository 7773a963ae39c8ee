package sharding

import (
	"context"
	"fmt"
	"github.com/shoal-dev/shoal/cluster"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/shoal-dev/shoal/cluster/lease"
)

var (
	// ErrStaleEpoch is returned by a CoordinatorStore write or renewal from
	// a coordinator that a newer one has replaced: it must stop acting. It
	// is lease.ErrStaleEpoch: the coordinator lease is a lease like any.
	ErrStaleEpoch = lease.ErrStaleEpoch
	// ErrLeaseHeld is returned by Acquire while another owner holds the
	// coordinator lease of the type and it has not expired. It is
	// lease.ErrLeaseHeld.
	ErrLeaseHeld = lease.ErrLeaseHeld
	// ErrLeaseExpired is returned by Renew once the lease expired in the
	// store's time (or was released): acquire again, under a new epoch. It
	// is lease.ErrLeaseExpired.
	ErrLeaseExpired = lease.ErrLeaseExpired
)

// CoordinatorStore keeps allocations across coordinator moves, and the
// coordinator lease of each type (docs/DESIGN.md, "Coordinator store"): only
// the lease's holder acts as coordinator, and every write carries the epoch
// Acquire handed out; only the newest epoch may write, so two coordinators
// can never both win. Expiry is on the store's clock (the database's for
// Postgres); a holder renews well before it and stops acting, by its own
// clock, before the store could hand the lease to someone else (see
// lease.Keeper).
//
// The suite in sharding/shardingtest holds every implementation to this.
type CoordinatorStore interface {
	// Acquire makes owner, which names one node incarnation, the holder of
	// typeName's coordinator lease until the store's time + ttl, under an
	// epoch greater than any before, and returns what is stored of each
	// shard: its home and the region holding its mail. It fails with
	// ErrLeaseHeld while another owner holds an unexpired lease; the same
	// owner may acquire again at once (its new epoch fences its earlier
	// self).
	Acquire(ctx context.Context, typeName string, owner cluster.UniqueAddress, ttl time.Duration) (epoch uint64, shards map[string]Allocation, err error)
	// Renew extends the lease held under epoch until the store's time +
	// ttl: ErrStaleEpoch when a newer epoch exists, ErrLeaseExpired once
	// it expired.
	Renew(ctx context.Context, typeName string, epoch uint64, ttl time.Duration) error
	// Release expires the lease held under epoch now, so that a successor
	// need not wait for it: ErrStaleEpoch when a newer epoch exists.
	Release(ctx context.Context, typeName string, epoch uint64) error
	// Allocate records shard → region, with no region holding its mail:
	// ErrStaleEpoch unless epoch is the newest.
	Allocate(ctx context.Context, typeName string, epoch uint64, shard string, region cluster.UniqueAddress) error
	// Deallocate forgets shard's home, and who held its mail:
	// ErrStaleEpoch unless epoch is the newest.
	Deallocate(ctx context.Context, typeName string, epoch uint64, shard string) error
	// Update applies changes in order, all or none: ErrStaleEpoch, and
	// nothing written, unless epoch is the newest. One call is one round
	// trip (one transaction), so a coordinator handing off many shards
	// pays for one commit, not one per shard.
	Update(ctx context.Context, typeName string, epoch uint64, changes []AllocationChange) error
}

// Allocation is what a CoordinatorStore keeps of one shard: its home, and
// the region that holds mail for it, which the home must take before any
// other (docs/DESIGN.md, "Hand-over, not carry").
type Allocation struct {
	// Region is the shard's home; zero while it has none.
	Region cluster.UniqueAddress
	// MailHeldBy names the region that stopped the shard holding mail for
	// its next home: while the shard has no home, or until its home
	// reports that the shard started there. It is stored, not only known
	// to the coordinator that placed the shard: that coordinator may be
	// cut off or replaced before the shard starts, and a successor would
	// place it with no previous home, so that the held mail, handed over
	// after a partition heals or to a home that died meanwhile, arrives
	// behind newer mail.
	MailHeldBy cluster.UniqueAddress
}

// AllocationChange is one write of a CoordinatorStore.Update: shard's home
// becomes Region, or is forgotten when Region is zero, and MailHeldBy
// becomes the region holding its mail (zero for none).
type AllocationChange struct {
	Shard      string
	Region     cluster.UniqueAddress // zero deallocates
	MailHeldBy cluster.UniqueAddress
}

// RememberStore records which entities each shard runs, so that a shard
// restarts them where it starts next, and a new coordinator starts every
// shard that has some.
type RememberStore interface {
	// Shards lists the shards of typeName with remembered entities, sorted.
	Shards(ctx context.Context, typeName string) ([]string, error)
	// Entities lists a shard's remembered entities, sorted.
	Entities(ctx context.Context, typeName, shard string) ([]string, error)
	Add(ctx context.Context, typeName, shard, entityID string) error
	Remove(ctx context.Context, typeName, shard, entityID string) error
}

// MemoryCoordinatorStore is a CoordinatorStore for one process. Its
// leases are a lease.MemoryStore's, so they decide as the Postgres store
// does.
type MemoryCoordinatorStore struct {
	leases *lease.MemoryStore

	mu    sync.Mutex
	types map[string]*storedType
}

type storedType struct {
	epoch  uint64 // the newest epoch the lease handed out
	shards map[string]Allocation
}

// applyChange makes one change to shards; a shard with neither a home nor
// a holder of its mail is forgotten.
func applyChange(shards map[string]Allocation, c AllocationChange) {
	a := Allocation{Region: c.Region, MailHeldBy: c.MailHeldBy}
	if a == (Allocation{}) {
		delete(shards, c.Shard)
		return
	}
	shards[c.Shard] = a
}

// NewMemoryCoordinatorStore returns an empty store on the wall clock.
func NewMemoryCoordinatorStore() *MemoryCoordinatorStore {
	return NewMemoryCoordinatorStoreAt(time.Now)
}

// NewMemoryCoordinatorStoreAt returns an empty store whose leases expire
// on now's time: a fake clock in tests.
func NewMemoryCoordinatorStoreAt(now func() time.Time) *MemoryCoordinatorStore {
	return &MemoryCoordinatorStore{leases: lease.NewMemoryStore(now), types: make(map[string]*storedType)}
}

// Acquire implements CoordinatorStore.
func (s *MemoryCoordinatorStore) Acquire(ctx context.Context, typeName string, owner cluster.UniqueAddress, ttl time.Duration) (uint64, map[string]Allocation, error) {
	// Under s.mu, so that no write of the old epoch lands after the new
	// one is handed out.
	s.mu.Lock()
	defer s.mu.Unlock()
	epoch, err := s.leases.AcquireCoordinator(ctx, typeName, owner.String(), ttl)
	if err != nil {
		return 0, nil, fmt.Errorf("sharding: acquire %s for %s: %w", typeName, owner, err)
	}
	t := s.types[typeName]
	if t == nil {
		t = &storedType{shards: make(map[string]Allocation)}
		s.types[typeName] = t
	}
	t.epoch = epoch
	return epoch, maps.Clone(t.shards), nil
}

// Renew implements CoordinatorStore.
func (s *MemoryCoordinatorStore) Renew(ctx context.Context, typeName string, epoch uint64, ttl time.Duration) error {
	return s.leases.RenewCoordinator(ctx, typeName, epoch, ttl)
}

// Release implements CoordinatorStore.
func (s *MemoryCoordinatorStore) Release(ctx context.Context, typeName string, epoch uint64) error {
	return s.leases.ReleaseCoordinator(ctx, typeName, epoch)
}

func (s *MemoryCoordinatorStore) write(ctx context.Context, typeName string, epoch uint64, fn func(*storedType)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.types[typeName]
	if t == nil {
		return fmt.Errorf("%w: %s has no coordinator lease", ErrStaleEpoch, typeName)
	}
	if epoch != t.epoch {
		return fmt.Errorf("%w: %s epoch %d, current %d", ErrStaleEpoch, typeName, epoch, t.epoch)
	}
	fn(t)
	return nil
}

// Allocate implements CoordinatorStore.
func (s *MemoryCoordinatorStore) Allocate(ctx context.Context, typeName string, epoch uint64, shard string, region cluster.UniqueAddress) error {
	return s.write(ctx, typeName, epoch, func(t *storedType) { applyChange(t.shards, AllocationChange{Shard: shard, Region: region}) })
}

// Deallocate implements CoordinatorStore.
func (s *MemoryCoordinatorStore) Deallocate(ctx context.Context, typeName string, epoch uint64, shard string) error {
	return s.write(ctx, typeName, epoch, func(t *storedType) { applyChange(t.shards, AllocationChange{Shard: shard}) })
}

// Update implements CoordinatorStore.
func (s *MemoryCoordinatorStore) Update(ctx context.Context, typeName string, epoch uint64, changes []AllocationChange) error {
	return s.write(ctx, typeName, epoch, func(t *storedType) {
		for _, c := range changes {
			applyChange(t.shards, c)
		}
	})
}

// MemoryRememberStore is a RememberStore for one process.
type MemoryRememberStore struct {
	mu       sync.Mutex
	entities map[[2]string]map[string]bool
}

// NewMemoryRememberStore returns an empty store.
func NewMemoryRememberStore() *MemoryRememberStore {
	return &MemoryRememberStore{entities: make(map[[2]string]map[string]bool)}
}

// Shards implements RememberStore.
func (s *MemoryRememberStore) Shards(ctx context.Context, typeName string) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var shards []string
	for k, ids := range s.entities {
		if k[0] == typeName && len(ids) > 0 {
			shards = append(shards, k[1])
		}
	}
	slices.Sort(shards)
	return shards, nil
}

// Entities implements RememberStore.
func (s *MemoryRememberStore) Entities(ctx context.Context, typeName, shard string) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(maps.Keys(s.entities[[2]string{typeName, shard}])), nil
}

// Add implements RememberStore.
func (s *MemoryRememberStore) Add(ctx context.Context, typeName, shard, entityID string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k := [2]string{typeName, shard}
	if s.entities[k] == nil {
		s.entities[k] = make(map[string]bool)
	}
	s.entities[k][entityID] = true
	return nil
}

// Remove implements RememberStore.
func (s *MemoryRememberStore) Remove(ctx context.Context, typeName, shard, entityID string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.entities[[2]string{typeName, shard}], entityID)
	return nil
}
