// Package memory is an in-process journal.Journal: fast, for tests and the
// embedded default. Its contents die with the process.
package memory

import (
	"context"
	"sort"
	"sync"

	"github.com/shoal-dev/shoal/journal"
)

// Journal is a journal.Journal held in memory.
type Journal struct {
	mu       sync.RWMutex
	logs     map[string]*log
	ordering int64
}

type log struct {
	events  []journal.Event // ascending SeqNr, contiguous after the deleted prefix
	highest uint64
}

var _ journal.Journal = (*Journal)(nil)

// New returns an empty journal.
func New() *Journal { return &Journal{logs: make(map[string]*log)} }

// Write implements journal.Journal.
func (j *Journal) Write(ctx context.Context, events []journal.Event) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := journal.Validate(events); err != nil {
		return err
	}
	pid := events[0].PersistenceID
	j.mu.Lock()
	defer j.mu.Unlock()
	l := j.logs[pid]
	if l == nil {
		l = &log{}
		j.logs[pid] = l
	}
	if first := events[0].SeqNr; first <= l.highest {
		return &journal.WriteConflictError{PersistenceID: pid, SeqNr: first}
	}
	for _, e := range events {
		j.ordering++
		e.Ordering = j.ordering
		e.Payload = append([]byte(nil), e.Payload...)
		e.Tags = append([]string(nil), e.Tags...)
		l.events = append(l.events, e)
	}
	l.highest = events[len(events)-1].SeqNr
	return nil
}

// Replay implements journal.Journal. It copies one page at a time so fn may
// call back into the journal.
func (j *Journal) Replay(ctx context.Context, pid string, from, to uint64, fn func(journal.Event) error) error {
	const page = 256
	for from <= to {
		if err := ctx.Err(); err != nil {
			return err
		}
		batch := j.page(pid, from, to, page)
		if len(batch) == 0 {
			return nil
		}
		for _, e := range batch {
			if err := fn(e); err != nil {
				return err
			}
		}
		last := batch[len(batch)-1].SeqNr
		if last == ^uint64(0) {
			return nil
		}
		from = last + 1
	}
	return nil
}

func (j *Journal) page(pid string, from, to uint64, n int) []journal.Event {
	j.mu.RLock()
	defer j.mu.RUnlock()
	l := j.logs[pid]
	if l == nil {
		return nil
	}
	i := sort.Search(len(l.events), func(i int) bool { return l.events[i].SeqNr >= from })
	var out []journal.Event
	for ; i < len(l.events) && len(out) < n && l.events[i].SeqNr <= to; i++ {
		e := l.events[i]
		e.Payload = append([]byte(nil), e.Payload...)
		e.Tags = append([]string(nil), e.Tags...)
		out = append(out, e)
	}
	return out
}

// HighestSeqNr implements journal.Journal.
func (j *Journal) HighestSeqNr(ctx context.Context, pid string) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	j.mu.RLock()
	defer j.mu.RUnlock()
	if l := j.logs[pid]; l != nil {
		return l.highest, nil
	}
	return 0, nil
}

// DeleteTo implements journal.Journal.
func (j *Journal) DeleteTo(ctx context.Context, pid string, to uint64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	l := j.logs[pid]
	if l == nil {
		return nil
	}
	i := sort.Search(len(l.events), func(i int) bool { return l.events[i].SeqNr > to })
	l.events = append([]journal.Event(nil), l.events[i:]...)
	return nil
}
