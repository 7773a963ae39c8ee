// Package projectiontest holds what projection tests share: the offset
// store conformance suite (RunStore) that every projection.Store passes,
// and Source, a journal.Queries over events kept in memory, with live
// queries and injected failures.
package projectiontest

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/shoal-dev/shoal/journal"
)

// SourceKind is the Kind of Source's offsets.
const SourceKind = "test"

// Source is a journal.Queries over the events appended to it, in append
// order: the offset of the i-th event (from 1) is {SourceKind, 0, i}.
// Live queries wake on Append.
type Source struct {
	mu       sync.Mutex
	events   []journal.QueriedEvent
	changed  chan struct{} // closed and replaced by Append
	failures []error
	queries  int
}

var _ journal.Queries = (*Source)(nil)

// NewSource returns an empty source.
func NewSource() *Source { return &Source{changed: make(chan struct{})} }

// Append stores e (its EntityType from the persistence id "Type|id") and
// returns its offset.
func (s *Source) Append(e journal.Event) journal.Offset {
	s.mu.Lock()
	defer s.mu.Unlock()
	e.Tags = slices.Clone(e.Tags)
	e.Payload = slices.Clone(e.Payload)
	off := journal.Offset{Kind: SourceKind, Pos: int64(len(s.events) + 1)}
	e.Ordering = off.Pos
	s.events = append(s.events, journal.QueriedEvent{
		Event: e, EntityType: journal.EntityTypeOf(e.PersistenceID), Slice: journal.SliceOf(e.PersistenceID), Offset: off,
	})
	close(s.changed)
	s.changed = make(chan struct{})
	return off
}

// Events returns what was appended.
func (s *Source) Events() []journal.QueriedEvent {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.events)
}

// FailNext makes the next queries fail with errs, one each, after they
// delivered what they would before waiting (a live query that caught up
// fails instead of waiting).
func (s *Source) FailNext(errs ...error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failures = append(s.failures, errs...)
}

// Queries counts the queries started.
func (s *Source) Queries() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.queries
}

// EventsBySlices implements journal.Queries.
func (s *Source) EventsBySlices(ctx context.Context, entityType string, r journal.SliceRange, after journal.Offset, mode journal.Mode, fn func(journal.QueriedEvent) error) error {
	if err := r.Validate(); err != nil {
		return err
	}
	return s.query(ctx, after, mode, func(e journal.QueriedEvent) bool {
		return e.EntityType == entityType && r.Contains(e.Slice)
	}, fn)
}

// EventsByTag implements journal.Queries.
func (s *Source) EventsByTag(ctx context.Context, tag string, after journal.Offset, mode journal.Mode, fn func(journal.QueriedEvent) error) error {
	return s.query(ctx, after, mode, func(e journal.QueriedEvent) bool { return slices.Contains(e.Tags, tag) }, fn)
}

// CurrentPersistenceIDs implements journal.Queries.
func (s *Source) CurrentPersistenceIDs(ctx context.Context, entityType string, afterID string, limit int) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := map[string]bool{}
	var ids []string
	for _, e := range s.events {
		if e.EntityType == entityType && e.PersistenceID > afterID && !seen[e.PersistenceID] {
			seen[e.PersistenceID] = true
			ids = append(ids, e.PersistenceID)
		}
	}
	slices.Sort(ids)
	return ids[:min(limit, len(ids))], nil
}

func (s *Source) query(ctx context.Context, after journal.Offset, mode journal.Mode, match func(journal.QueriedEvent) bool, fn func(journal.QueriedEvent) error) error {
	if !after.IsStart() && after.Kind != SourceKind {
		return fmt.Errorf("%w: %s is not a %q offset", journal.ErrOffsetMismatch, after, SourceKind)
	}
	s.mu.Lock()
	s.queries++
	s.mu.Unlock()
	next := int(after.Pos) // index of the first event after it
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		s.mu.Lock()
		if next < len(s.events) {
			e := s.events[next]
			s.mu.Unlock()
			next++
			if match(e) {
				if err := fn(e); err != nil {
					return err
				}
			}
			continue
		}
		if len(s.failures) > 0 {
			err := s.failures[0]
			s.failures = s.failures[1:]
			s.mu.Unlock()
			return err
		}
		changed := s.changed
		s.mu.Unlock()
		if mode == journal.Current {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		}
	}
}

// CountEventsBySlices implements projection.EventCounter.
func (s *Source) CountEventsBySlices(ctx context.Context, entityType string, r journal.SliceRange, after journal.Offset) (int64, error) {
	if err := r.Validate(); err != nil {
		return 0, err
	}
	if !after.IsStart() && after.Kind != SourceKind {
		return 0, fmt.Errorf("%w: %s is not a %q offset", journal.ErrOffsetMismatch, after, SourceKind)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for _, e := range s.events[min(int(after.Pos), len(s.events)):] {
		if e.EntityType == entityType && r.Contains(e.Slice) {
			n++
		}
	}
	return n, nil
}
