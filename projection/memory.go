package projection

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/shoal-dev/shoal/journal"
)

// MemoryStore is a Store in memory, for tests and single-process use: its
// offsets end with the process. Lease expiry uses time.Now (a synctest
// bubble's clock in tests).
type MemoryStore struct {
	mu   sync.Mutex
	rows map[string]*memoryRow // by instance key
}

type memoryRow struct {
	offset  journal.Offset
	epoch   int64
	holder  string
	expires time.Time
	paused  bool
	dead    []DeadLetter
}

var _ Store = (*MemoryStore)(nil)

// NewMemoryStore returns an empty store.
func NewMemoryStore() *MemoryStore { return &MemoryStore{rows: make(map[string]*memoryRow)} }

// Acquire implements Store.
func (s *MemoryStore) Acquire(ctx context.Context, inst Instance, holder string, ttl time.Duration) (Claim, error) {
	if err := inst.Validate(); err != nil {
		return Claim{}, err
	}
	if err := ValidateTTL(ttl); err != nil {
		return Claim{}, err
	}
	if err := ctx.Err(); err != nil {
		return Claim{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	r := s.rows[inst.Key()]
	if r == nil {
		r = &memoryRow{}
		s.rows[inst.Key()] = r
	} else if r.holder != holder && now.Before(r.expires) {
		return Claim{}, fmt.Errorf("%w: %s by %s", ErrInstanceHeld, inst, r.holder)
	}
	r.epoch++
	r.holder = holder
	r.expires = now.Add(ttl)
	return Claim{Fence: Fence{Instance: inst, Epoch: r.epoch}, Offset: r.offset, Paused: r.paused}, nil
}

// fenced returns f's row, or ErrFenced.
func (s *MemoryStore) fenced(f Fence) (*memoryRow, error) {
	r := s.rows[f.Instance.Key()]
	if r == nil || r.epoch != f.Epoch {
		return nil, fmt.Errorf("%w: %s epoch %d", ErrFenced, f.Instance, f.Epoch)
	}
	return r, nil
}

func (s *MemoryStore) write(ctx context.Context, f Fence, fn func(*memoryRow)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.fenced(f)
	if err != nil {
		return err
	}
	fn(r)
	return nil
}

// Renew implements Store.
func (s *MemoryStore) Renew(ctx context.Context, f Fence, ttl time.Duration) error {
	if err := ValidateTTL(ttl); err != nil {
		return err
	}
	return s.write(ctx, f, func(r *memoryRow) { r.expires = time.Now().Add(ttl) })
}

// Release implements Store.
func (s *MemoryStore) Release(ctx context.Context, f Fence) error {
	return s.write(ctx, f, func(r *memoryRow) { r.expires = time.Now() })
}

// Save implements Store.
func (s *MemoryStore) Save(ctx context.Context, f Fence, offset journal.Offset, deadLetters []DeadLetter) error {
	return s.write(ctx, f, func(r *memoryRow) {
		r.offset = offset
		now := time.Now()
	next:
		for _, d := range deadLetters {
			d.Payload = slices.Clone(d.Payload)
			d.At = now
			for i, old := range r.dead {
				if old.PersistenceID == d.PersistenceID && old.SeqNr == d.SeqNr {
					r.dead[i] = d
					continue next
				}
			}
			r.dead = append(r.dead, d)
		}
	})
}

// SetPaused implements Store.
func (s *MemoryStore) SetPaused(ctx context.Context, f Fence, paused bool) error {
	return s.write(ctx, f, func(r *memoryRow) { r.paused = paused })
}

// Offset implements Store.
func (s *MemoryStore) Offset(ctx context.Context, inst Instance) (journal.Offset, bool, error) {
	if err := ctx.Err(); err != nil {
		return journal.Offset{}, false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.rows[inst.Key()]
	if r == nil {
		return journal.Offset{}, false, nil
	}
	return r.offset, true, nil
}

// DeadLetters implements Store.
func (s *MemoryStore) DeadLetters(ctx context.Context, inst Instance) ([]DeadLetter, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.rows[inst.Key()]
	if r == nil {
		return nil, nil
	}
	out := make([]DeadLetter, len(r.dead))
	for i, d := range r.dead {
		d.Payload = slices.Clone(d.Payload)
		out[i] = d
	}
	return out, nil
}
