package sharding

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
)

// ErrStaleEpoch is returned by a CoordinatorStore write from a coordinator
// that a newer one has replaced: it must stop acting.
var ErrStaleEpoch = errors.New("sharding: stale coordinator epoch")

// CoordinatorStore keeps shard allocations across coordinator moves. Every
// write carries the epoch Acquire handed out; only the newest epoch may
// write, so two coordinators can never both win.
type CoordinatorStore interface {
	// Acquire makes owner the coordinator of typeName under an epoch
	// greater than any before, and returns the stored allocations (shard → region).
	Acquire(ctx context.Context, typeName, owner string) (epoch uint64, shards map[string]string, err error)
	// Allocate records shard → region.
	Allocate(ctx context.Context, typeName string, epoch uint64, shard, region string) error
	// Deallocate forgets shard's home.
	Deallocate(ctx context.Context, typeName string, epoch uint64, shard string) error
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

// MemoryCoordinatorStore is a CoordinatorStore for one process.
type MemoryCoordinatorStore struct {
	mu    sync.Mutex
	types map[string]*storedType
}

type storedType struct {
	epoch  uint64
	owner  string
	shards map[string]string
}

// NewMemoryCoordinatorStore returns an empty store.
func NewMemoryCoordinatorStore() *MemoryCoordinatorStore {
	return &MemoryCoordinatorStore{types: make(map[string]*storedType)}
}

func (s *MemoryCoordinatorStore) get(typeName string) *storedType {
	t := s.types[typeName]
	if t == nil {
		t = &storedType{shards: make(map[string]string)}
		s.types[typeName] = t
	}
	return t
}

// Acquire implements CoordinatorStore.
func (s *MemoryCoordinatorStore) Acquire(ctx context.Context, typeName, owner string) (uint64, map[string]string, error) {
	if err := ctx.Err(); err != nil {
		return 0, nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.get(typeName)
	t.epoch++
	t.owner = owner
	return t.epoch, maps.Clone(t.shards), nil
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
func (s *MemoryCoordinatorStore) Allocate(ctx context.Context, typeName string, epoch uint64, shard, region string) error {
	return s.write(ctx, typeName, epoch, func(t *storedType) { t.shards[shard] = region })
}

// Deallocate implements CoordinatorStore.
func (s *MemoryCoordinatorStore) Deallocate(ctx context.Context, typeName string, epoch uint64, shard string) error {
	return s.write(ctx, typeName, epoch, func(t *storedType) { delete(t.shards, shard) })
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
