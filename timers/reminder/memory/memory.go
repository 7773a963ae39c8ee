// Package memory is a reminder.Store held in memory, for tests and a node
// without a database; its reminders die with the process. It is also the
// memory journal's side store (journal/memory.WithSideStore), so that an
// effect's reminder changes go in with its events or not at all.
package memory

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/shoal-dev/shoal/journal"
	"github.com/shoal-dev/shoal/timers/reminder"
)

// Store is a reminder.Store in memory.
type Store struct {
	now func() time.Time

	mu      sync.Mutex
	byKey   map[reminder.Key]*reminder.Reminder
	byShard map[shardKey]map[reminder.Key]struct{}
	observe []reminder.Observer
}

type shardKey struct{ entityType, shard string }

// Option configures a Store.
type Option func(*Store)

// WithClock makes now the store's clock (the "database time" of a memory
// store); default time.Now.
func WithClock(now func() time.Time) Option { return func(s *Store) { s.now = now } }

// New returns an empty store.
func New(opts ...Option) *Store {
	s := &Store{now: time.Now, byKey: map[reminder.Key]*reminder.Reminder{}, byShard: map[shardKey]map[reminder.Key]struct{}{}}
	for _, o := range opts {
		o(s)
	}
	return s
}

var _ reminder.Store = (*Store)(nil)

// Observe adds o, called after every batch the store applies.
func (s *Store) Observe(o reminder.Observer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.observe = append(s.observe, o)
}

// Apply implements reminder.Store.
func (s *Store) Apply(ctx context.Context, b reminder.Batch) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := b.Validate(); err != nil {
		return err
	}
	if b.Empty() {
		return nil
	}
	s.mu.Lock()
	now := s.now()
	for _, a := range b.Acks {
		r, ok := s.byKey[a.Key]
		if !ok || r.Generation != a.Generation {
			continue // set again, cancelled or acknowledged meanwhile
		}
		if r.Period == 0 {
			s.remove(a.Key)
			continue
		}
		r.Due = reminder.NextDue(r.Due, r.Period, now)
		r.Generation = a.Next
	}
	for _, c := range b.Changes {
		s.remove(c.Key)
		if c.Cancel {
			continue
		}
		due := c.At
		if due.IsZero() {
			due = now.Add(c.After)
		}
		s.byKey[c.Key] = &reminder.Reminder{
			Key: c.Key, ShardID: c.ShardID, Due: due, Period: c.Period,
			Manifest: c.Manifest, Payload: slices.Clone(c.Payload), Generation: c.Generation,
		}
		sk := shardKey{c.EntityType, c.ShardID}
		if s.byShard[sk] == nil {
			s.byShard[sk] = map[reminder.Key]struct{}{}
		}
		s.byShard[sk][c.Key] = struct{}{}
	}
	observers := s.observe
	s.mu.Unlock()
	for _, o := range observers {
		o(b, now)
	}
	return nil
}

// remove drops k; s.mu is held.
func (s *Store) remove(k reminder.Key) {
	r, ok := s.byKey[k]
	if !ok {
		return
	}
	delete(s.byKey, k)
	sk := shardKey{k.EntityType, r.ShardID}
	delete(s.byShard[sk], k)
	if len(s.byShard[sk]) == 0 {
		delete(s.byShard, sk)
	}
}

// SideStore implements journal/memory.SideStore.
func (s *Store) SideStore() string { return reminder.SideStoreName }

// ApplySide implements journal/memory.SideStore: side is a reminder.Batch.
func (s *Store) ApplySide(ctx context.Context, side journal.Side) error {
	b, ok := side.(reminder.Batch)
	if !ok {
		return fmt.Errorf("%w: side %T is not a reminder.Batch", reminder.ErrInvalid, side)
	}
	return s.Apply(ctx, b)
}

// CheckSide implements journal/memory.SideStore: it validates side without
// applying it, so that the journal refuses a write before storing its
// events.
func (s *Store) CheckSide(side journal.Side) error {
	b, ok := side.(reminder.Batch)
	if !ok {
		return fmt.Errorf("%w: side %T is not a reminder.Batch", reminder.ErrInvalid, side)
	}
	return b.Validate()
}

// Due implements reminder.Store.
func (s *Store) Due(ctx context.Context, q reminder.Query) (reminder.Window, error) {
	if err := ctx.Err(); err != nil {
		return reminder.Window{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	w := reminder.Window{Now: s.now()}
	until := w.Now.Add(q.Within)
	for _, shard := range q.Shards {
		for k := range s.byShard[shardKey{q.EntityType, shard}] {
			if r := s.byKey[k]; !r.Due.After(until) {
				c := *r
				c.Payload = slices.Clone(r.Payload)
				w.Reminders = append(w.Reminders, c)
			}
		}
	}
	slices.SortFunc(w.Reminders, byDue)
	if q.Limit > 0 && len(w.Reminders) > q.Limit {
		w.Reminders = w.Reminders[:q.Limit]
	}
	return w, nil
}

func byDue(a, b reminder.Reminder) int {
	return cmp.Or(a.Due.Compare(b.Due), cmp.Compare(a.EntityID, b.EntityID), cmp.Compare(a.Name, b.Name))
}

// DueShards implements reminder.Store.
func (s *Store) DueShards(ctx context.Context, entityType string, within time.Duration) (map[string]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	until := s.now().Add(within)
	out := map[string]string{}
	for sk, keys := range s.byShard {
		if sk.entityType != entityType {
			continue
		}
		var first *reminder.Reminder
		for k := range keys {
			if r := s.byKey[k]; !r.Due.After(until) && (first == nil || byDue(*r, *first) < 0) {
				first = r
			}
		}
		if first != nil {
			out[sk.shard] = first.EntityID
		}
	}
	return out, nil
}

// Get implements reminder.Store.
func (s *Store) Get(ctx context.Context, k reminder.Key) (reminder.Reminder, bool, error) {
	if err := ctx.Err(); err != nil {
		return reminder.Reminder{}, false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.byKey[k]
	if !ok {
		return reminder.Reminder{}, false, nil
	}
	c := *r
	c.Payload = slices.Clone(r.Payload)
	return c, true, nil
}

// Now implements reminder.Store.
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	if err := ctx.Err(); err != nil {
		return time.Time{}, err
	}
	return s.now(), nil
}

// Stats implements reminder.Store.
func (s *Store) Stats(ctx context.Context, entityType string, late time.Duration) ([]reminder.ShardStats, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	var out []reminder.ShardStats
	for sk, keys := range s.byShard {
		if sk.entityType != entityType {
			continue
		}
		st := reminder.ShardStats{ShardID: sk.shard}
		for k := range keys {
			r := s.byKey[k]
			st.Total++
			if !r.Due.After(now) {
				st.Due++
			}
			if r.Due.Before(now.Add(-late)) {
				st.Late++
			}
		}
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b reminder.ShardStats) int { return cmp.Compare(a.ShardID, b.ShardID) })
	return out, nil
}
