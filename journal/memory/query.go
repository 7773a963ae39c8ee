package memory

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/shoal-dev/shoal/journal"
)

var _ journal.Queries = (*Journal)(nil)

// offsetKind names the memory journal's offsets.
const offsetKind = "memory"

// queryPage is how many events a query copies under the lock at once, so
// that fn runs without it and may write to the journal.
const queryPage = 256

// Writes are atomic under the journal's lock and take the next ordering, so
// an event is visible to the queries only with every event before it: the
// memory journal's offset is the ordering alone.

// EventsBySlices implements journal.Queries.
func (j *Journal) EventsBySlices(ctx context.Context, entityType string, r journal.SliceRange, after journal.Offset, mode journal.Mode, fn func(journal.QueriedEvent) error) error {
	if err := r.Validate(); err != nil {
		return err
	}
	return j.query(ctx, after, mode, func(e *indexed) bool {
		return e.entityType == entityType && r.Contains(e.slice)
	}, fn)
}

// EventsByTag implements journal.Queries.
func (j *Journal) EventsByTag(ctx context.Context, tag string, after journal.Offset, mode journal.Mode, fn func(journal.QueriedEvent) error) error {
	return j.query(ctx, after, mode, func(e *indexed) bool { return slices.Contains(e.ev.Tags, tag) }, fn)
}

func (j *Journal) query(ctx context.Context, after journal.Offset, mode journal.Mode, match func(*indexed) bool, fn func(journal.QueriedEvent) error) error {
	if err := checkOffset(after); err != nil {
		return err
	}
	pos := after.Pos
	j.mu.RLock()
	end := j.ordering // Current ends at what is stored now
	j.mu.RUnlock()
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		bound := end
		if mode == journal.Live {
			bound = int64(^uint64(0) >> 1)
		}
		page, next, written := j.queryPage(pos, bound, match)
		for _, e := range page {
			if err := fn(e); err != nil {
				return err
			}
		}
		pos = next
		if len(page) == queryPage {
			continue
		}
		// A short page reached the end of what is stored.
		if mode != journal.Live {
			return nil
		}
		select {
		case <-written:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// queryPage copies up to queryPage matching events with pos < ordering <=
// bound. next is where the following page starts: the last ordering
// examined. written is closed by the next write after the page was taken.
func (j *Journal) queryPage(pos, bound int64, match func(*indexed) bool) (page []journal.QueriedEvent, next int64, written <-chan struct{}) {
	j.mu.RLock()
	defer j.mu.RUnlock()
	written, next = j.written, pos
	i := sort.Search(len(j.byOrdering), func(i int) bool { return j.byOrdering[i].ev.Ordering > pos })
	for ; i < len(j.byOrdering) && len(page) < queryPage; i++ {
		e := &j.byOrdering[i]
		if e.ev.Ordering > bound {
			break
		}
		next = e.ev.Ordering
		if !match(e) || e.ev.SeqNr <= j.logs[e.ev.PersistenceID].deletedTo {
			continue
		}
		ev := e.ev
		ev.Payload = append([]byte(nil), ev.Payload...)
		ev.Tags = append([]string(nil), ev.Tags...)
		page = append(page, journal.QueriedEvent{
			Event:      ev,
			EntityType: e.entityType,
			Slice:      e.slice,
			Offset:     journal.Offset{Kind: offsetKind, Pos: ev.Ordering},
		})
	}
	return page, next, written
}

// CurrentPersistenceIDs implements journal.Queries.
func (j *Journal) CurrentPersistenceIDs(ctx context.Context, entityType string, afterID string, limit int) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if limit < 1 {
		return nil, fmt.Errorf("%w: limit %d", journal.ErrInvalidQuery, limit)
	}
	j.mu.RLock()
	var ids []string
	for pid, l := range j.logs {
		if pid > afterID && len(l.chunks) > 0 && journal.EntityTypeOf(pid) == entityType {
			ids = append(ids, pid)
		}
	}
	j.mu.RUnlock()
	slices.SortFunc(ids, strings.Compare)
	if len(ids) > limit {
		ids = ids[:limit]
	}
	return ids, nil
}

// countDeleted adds the events of l that DeleteTo(to) removes to j.deleted.
func (j *Journal) countDeleted(l *log, to uint64) {
	for _, c := range l.chunks {
		for _, e := range c {
			if e.SeqNr > to {
				return
			}
			j.deleted++
		}
	}
}

// compact drops deleted events from byOrdering once they are half of it,
// so a journal whose events are deleted does not grow without bound.
func (j *Journal) compact() {
	if j.deleted < 1024 || j.deleted < len(j.byOrdering)/2 {
		return
	}
	kept := make([]indexed, 0, len(j.byOrdering)-j.deleted)
	for _, e := range j.byOrdering {
		if e.ev.SeqNr > j.logs[e.ev.PersistenceID].deletedTo {
			kept = append(kept, e)
		}
	}
	j.byOrdering, j.deleted = kept, 0
}

// CountEventsBySlices counts the stored events of entityType in r after
// offset after: a projection's lag in events (it implements
// projection.EventCounter).
func (j *Journal) CountEventsBySlices(ctx context.Context, entityType string, r journal.SliceRange, after journal.Offset) (int64, error) {
	if err := r.Validate(); err != nil {
		return 0, err
	}
	if err := checkOffset(after); err != nil {
		return 0, err
	}
	j.mu.RLock()
	defer j.mu.RUnlock()
	var n int64
	i := sort.Search(len(j.byOrdering), func(i int) bool { return j.byOrdering[i].ev.Ordering > after.Pos })
	for ; i < len(j.byOrdering); i++ {
		e := &j.byOrdering[i]
		if e.entityType == entityType && r.Contains(e.slice) && e.ev.SeqNr > j.logs[e.ev.PersistenceID].deletedTo {
			n++
		}
	}
	return n, nil
}

// checkOffset refuses an offset this journal did not make.
func checkOffset(after journal.Offset) error {
	if !after.IsStart() && after.Kind != offsetKind {
		return fmt.Errorf("%w: %s given to the memory journal", journal.ErrOffsetMismatch, after)
	}
	return nil
}
