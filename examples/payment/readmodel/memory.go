package readmodel

import (
	"context"
	"errors"
	"maps"
	"sync"

	"github.com/shoal-dev/shoal/journal"
	"github.com/shoal-dev/shoal/projection"
)

// EventOf reads a projection's envelope as the fold's Event.
func EventOf(env projection.Envelope[Change]) (Event, error) {
	return NewEvent(env.PersistenceID, env.SeqNr, env.Timestamp, env.Event)
}

// Memory is the read model in memory, for the example's embedded mode
// (memory journal). It is kept by an at-least-once projection, which may
// hand it an event again (after a retry or a restart of its runner before
// the offset was saved); Handle makes that harmless by skipping envelopes
// whose seq nr is at or below the last one applied to their payment. It is
// safe for concurrent use.
type Memory struct {
	mu          sync.Mutex
	settlements map[Key]Settlement
	totals      map[ShopKey]Totals
}

// NewMemory returns an empty read model.
func NewMemory() *Memory {
	return &Memory{settlements: make(map[Key]Settlement), totals: make(map[ShopKey]Totals)}
}

// Handle applies env once: a duplicate is skipped. It has the signature of
// projection.AtLeastOnce's handler.
func (m *Memory) Handle(_ context.Context, env projection.Envelope[Change]) error {
	e, err := EventOf(env)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	before := m.settlements[e.Key]
	after, err := Apply(before, e)
	if errors.Is(err, ErrDuplicate) {
		return nil // at-least-once: handled before
	}
	if err != nil {
		return err
	}
	m.settlements[e.Key] = after
	t := m.totals[e.Key.ShopKey]
	t.Move(before, after)
	m.totals[e.Key.ShopKey] = t
	return nil
}

// Clear returns the rebuild's clear function of the projection instance
// over slices r: it forgets the settlements of those slices only, which
// the instance handles again; the other instances' stay.
func (m *Memory) Clear(r journal.SliceRange) func(context.Context) error {
	return func(context.Context) error {
		m.mu.Lock()
		defer m.mu.Unlock()
		for k, s := range m.settlements {
			if r.Contains(s.Slice) {
				delete(m.settlements, k)
				t := m.totals[k.ShopKey]
				t.Move(s, Settlement{})
				m.totals[k.ShopKey] = t
			}
		}
		return nil
	}
}

// Shop returns a shop's settlements (by order id) and totals.
func (m *Memory) Shop(_ context.Context, k ShopKey) (Shop, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out Shop
	for key, s := range m.settlements {
		if key.ShopKey == k {
			out.Settlements = append(out.Settlements, s)
		}
	}
	sortByOrder(out.Settlements)
	out.Totals = m.totals[k]
	return out, nil
}

// All returns every settlement and every shop's totals, copies.
func (m *Memory) All(context.Context) (map[Key]Settlement, map[ShopKey]Totals, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.settlements), maps.Clone(m.totals), nil
}
