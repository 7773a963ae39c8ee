package lease

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/shoal-dev/shoal/cluster"
)

// MemoryStore is a Store for one process, on an injected clock. It decides
// exactly as the Postgres store does; the suite in cluster/lease/leasetest
// holds both to that.
type MemoryStore struct {
	now func() time.Time

	mu     sync.Mutex
	nodes  map[cluster.UniqueAddress]*nodeLease
	latest map[string]uint64 // node id → highest incarnation in nodes
	coords map[string]*coordinatorLease
}

type nodeLease struct {
	expires time.Time
	down    bool
}

type coordinatorLease struct {
	epoch   uint64
	owner   string
	expires time.Time
}

var (
	_ Store      = (*MemoryStore)(nil)
	_ NodePruner = (*MemoryStore)(nil)
)

// NewMemoryStore returns an empty store whose time is now (time.Now when nil).
func NewMemoryStore(now func() time.Time) *MemoryStore {
	if now == nil {
		now = time.Now
	}
	return &MemoryStore{
		now:    now,
		nodes:  make(map[cluster.UniqueAddress]*nodeLease),
		latest: make(map[string]uint64),
		coords: make(map[string]*coordinatorLease),
	}
}

func (s *MemoryStore) lock(ctx context.Context) (time.Time, error) {
	if err := ctx.Err(); err != nil {
		return time.Time{}, err
	}
	s.mu.Lock()
	return s.now(), nil
}

// AcquireNode implements Store.
func (s *MemoryStore) AcquireNode(ctx context.Context, node cluster.UniqueAddress, ttl time.Duration) error {
	return s.extendNode(ctx, node, ttl, true)
}

// RenewNode implements Store.
func (s *MemoryStore) RenewNode(ctx context.Context, node cluster.UniqueAddress, ttl time.Duration) error {
	return s.extendNode(ctx, node, ttl, false)
}

func (s *MemoryStore) extendNode(ctx context.Context, node cluster.UniqueAddress, ttl time.Duration, create bool) error {
	if err := ValidateNode(node); err != nil {
		return err
	}
	if err := ValidateTTL(ttl); err != nil {
		return err
	}
	now, err := s.lock(ctx)
	if err != nil {
		return err
	}
	defer s.mu.Unlock()
	l := s.nodes[node]
	switch {
	case l == nil && !create:
		return fmt.Errorf("%w: node %s", ErrNoLease, node)
	case l == nil && node.Incarnation < s.latest[node.Node]:
		return fmt.Errorf("%w: %s, latest incarnation %d", ErrStaleIncarnation, node, s.latest[node.Node])
	case l == nil:
		s.nodes[node] = &nodeLease{expires: now.Add(ttl)}
		s.latest[node.Node] = max(s.latest[node.Node], node.Incarnation)
		return nil
	case l.down:
		return fmt.Errorf("%w: %s", ErrNodeDown, node)
	case !now.Before(l.expires):
		return fmt.Errorf("%w: node %s at %v", ErrLeaseExpired, node, l.expires)
	}
	l.expires = now.Add(ttl)
	return nil
}

// DownNode implements Store.
func (s *MemoryStore) DownNode(ctx context.Context, node cluster.UniqueAddress) error {
	return s.endNode(ctx, node, false)
}

// ReleaseNode implements Store.
func (s *MemoryStore) ReleaseNode(ctx context.Context, node cluster.UniqueAddress) error {
	return s.endNode(ctx, node, true)
}

func (s *MemoryStore) endNode(ctx context.Context, node cluster.UniqueAddress, expireNow bool) error {
	if err := ValidateNode(node); err != nil {
		return err
	}
	now, err := s.lock(ctx)
	if err != nil {
		return err
	}
	defer s.mu.Unlock()
	l := s.nodes[node]
	if l == nil {
		s.nodes[node] = &nodeLease{expires: now, down: true}
		s.latest[node.Node] = max(s.latest[node.Node], node.Incarnation)
		return nil
	}
	l.down = true
	if expireNow && now.Before(l.expires) {
		l.expires = now
	}
	return nil
}

// PruneNodes implements NodePruner.
func (s *MemoryStore) PruneNodes(ctx context.Context, olderThan time.Duration) (int, error) {
	if olderThan < 0 {
		return 0, fmt.Errorf("%w: prune node leases older than %v", ErrInvalidConfig, olderThan)
	}
	now, err := s.lock(ctx)
	if err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	changed := 0
	for a, l := range s.nodes {
		if l.expires.After(now.Add(-olderThan)) {
			continue
		}
		switch {
		case a.Incarnation != s.latest[a.Node]:
			delete(s.nodes, a)
			changed++
		case !l.down:
			l.down = true
			changed++
		}
	}
	return changed, nil
}

// NodeLeaseExpired implements Store.
func (s *MemoryStore) NodeLeaseExpired(ctx context.Context, node cluster.UniqueAddress) (bool, error) {
	if err := ValidateNode(node); err != nil {
		return false, err
	}
	now, err := s.lock(ctx)
	if err != nil {
		return false, err
	}
	defer s.mu.Unlock()
	l := s.nodes[node]
	if l == nil {
		return false, fmt.Errorf("%w: node %s", ErrNoLease, node)
	}
	return !now.Before(l.expires), nil
}

// AcquireCoordinator implements Store.
func (s *MemoryStore) AcquireCoordinator(ctx context.Context, name, owner string, ttl time.Duration) (uint64, error) {
	if err := ValidateName(name); err != nil {
		return 0, err
	}
	if err := ValidateOwner(owner); err != nil {
		return 0, err
	}
	if err := ValidateTTL(ttl); err != nil {
		return 0, err
	}
	now, err := s.lock(ctx)
	if err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	l := s.coords[name]
	if l == nil {
		l = &coordinatorLease{}
		s.coords[name] = l
	} else if l.owner != owner && now.Before(l.expires) {
		return 0, &HeldError{Name: name, Owner: l.owner, Left: l.expires.Sub(now)}
	}
	l.epoch++
	l.owner = owner
	l.expires = now.Add(ttl)
	return l.epoch, nil
}

// RenewCoordinator implements Store.
func (s *MemoryStore) RenewCoordinator(ctx context.Context, name string, epoch uint64, ttl time.Duration) error {
	if err := ValidateTTL(ttl); err != nil {
		return err
	}
	return s.coordinator(ctx, name, epoch, func(l *coordinatorLease, now time.Time) error {
		if !now.Before(l.expires) {
			return fmt.Errorf("%w: %s epoch %d at %v", ErrLeaseExpired, name, epoch, l.expires)
		}
		l.expires = now.Add(ttl)
		return nil
	})
}

// ReleaseCoordinator implements Store.
func (s *MemoryStore) ReleaseCoordinator(ctx context.Context, name string, epoch uint64) error {
	return s.coordinator(ctx, name, epoch, func(l *coordinatorLease, now time.Time) error {
		if now.Before(l.expires) {
			l.expires = now
		}
		return nil
	})
}

// coordinator runs fn on the lease of name when epoch is its current one.
func (s *MemoryStore) coordinator(ctx context.Context, name string, epoch uint64, fn func(*coordinatorLease, time.Time) error) error {
	if err := ValidateName(name); err != nil {
		return err
	}
	now, err := s.lock(ctx)
	if err != nil {
		return err
	}
	defer s.mu.Unlock()
	l := s.coords[name]
	switch {
	case l == nil:
		return fmt.Errorf("%w: coordinator %s", ErrNoLease, name)
	case l.epoch != epoch:
		return fmt.Errorf("%w: %s epoch %d, current %d", ErrStaleEpoch, name, epoch, l.epoch)
	}
	return fn(l, now)
}
