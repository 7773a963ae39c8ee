package projection

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/shoal-dev/shoal/journal"
)

// MemoryStore is a Store in memory, for tests and single-process use: its
// offsets end with the process. Lease expiry uses time.Now (a synctest
// bubble's clock in tests).
type MemoryStore struct {
	mu     sync.Mutex
	rows   map[string]*memoryRow // by instance key
	nextID int64                 // the last request id given
}

type memoryRow struct {
	inst    Instance
	offset  journal.Offset
	epoch   int64
	holder  string
	expires time.Time
	paused  bool
	dead    []DeadLetter
	updated time.Time

	report     Report
	reportedAt time.Time
	pending    []Request
}

var _ ControlStore = (*MemoryStore)(nil)

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
		r = &memoryRow{inst: inst}
		s.rows[inst.Key()] = r
	} else if r.holder != holder && now.Before(r.expires) {
		return Claim{}, fmt.Errorf("%w: %s by %s", ErrInstanceHeld, inst, r.holder)
	}
	r.epoch++
	r.holder = holder
	r.expires = now.Add(ttl)
	r.updated = now
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
		r.updated = now
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
	return s.write(ctx, f, func(r *memoryRow) { r.paused, r.updated = paused, time.Now() })
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

// Heartbeat implements ControlStore.
func (s *MemoryStore) Heartbeat(ctx context.Context, f Fence, ttl time.Duration, rep Report) ([]Request, error) {
	if err := ValidateTTL(ttl); err != nil {
		return nil, err
	}
	var pending []Request
	err := s.write(ctx, f, func(r *memoryRow) {
		now := time.Now()
		r.expires = now.Add(ttl)
		if rep.LastEventTime.IsZero() {
			rep.LastEventTime = r.report.LastEventTime // a new holder that handled nothing yet
		}
		r.report, r.reportedAt = rep, now
		pending = slices.Clone(r.pending)
	})
	return pending, err
}

// Complete implements ControlStore.
func (s *MemoryStore) Complete(ctx context.Context, f Fence, id int64) error {
	return s.write(ctx, f, func(r *memoryRow) {
		r.pending = slices.DeleteFunc(r.pending, func(q Request) bool { return q.ID == id })
	})
}

// Request implements ControlStore.
func (s *MemoryStore) Request(ctx context.Context, inst Instance, kind OpKind, to journal.Offset) (Request, error) {
	if err := kind.Validate(); err != nil {
		return Request{}, err
	}
	if err := ctx.Err(); err != nil {
		return Request{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.rows[inst.Key()]
	if r == nil || r.inst != inst {
		return Request{}, fmt.Errorf("%w: %s", ErrUnknownInstance, inst)
	}
	s.nextID++
	q := Request{ID: s.nextID, Kind: kind, At: time.Now()}
	if kind == OpReset {
		q.Offset = to
	}
	r.pending = append(r.pending, q)
	return q, nil
}

// Instances implements ControlStore.
func (s *MemoryStore) Instances(ctx context.Context, name string) ([]InstanceState, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	var out []InstanceState
	for _, r := range s.rows {
		if name != "" && r.inst.Name != name {
			continue
		}
		out = append(out, InstanceState{
			Instance: r.inst, Offset: r.offset, Paused: r.paused,
			Holder: r.holder, Epoch: r.epoch, Expires: r.expires, Held: now.Before(r.expires),
			UpdatedAt: r.updated, Report: r.report, ReportedAt: r.reportedAt, Pending: slices.Clone(r.pending),
		})
	}
	SortInstances(out)
	return out, nil
}

// SortInstances orders states by projection name, then range.
func SortInstances(states []InstanceState) {
	slices.SortFunc(states, func(a, b InstanceState) int {
		if a.Instance.Name != b.Instance.Name {
			return strings.Compare(a.Instance.Name, b.Instance.Name)
		}
		return a.Instance.Slices.Min - b.Instance.Slices.Min
	})
}
