// Package memory is an in-process journal.Journal, with its queries
// (journal.Queries): fast, for tests and the embedded default. Its contents
// die with the process.
package memory

import (
	"context"
	"fmt"
	"math"
	"sort"
	"sync"

	"github.com/shoal-dev/shoal/journal"
)

// Journal is a journal.Journal held in memory.
type Journal struct {
	mu       sync.RWMutex
	logs     map[string]*log
	ordering int64

	// byOrdering holds every stored event in ordering order, for the
	// queries; deleted ones stay until compact drops them.
	byOrdering []indexed
	deleted    int // entries of byOrdering whose events were deleted
	// written is closed, and replaced, by every write: live queries wait on it.
	written chan struct{}
	side    SideStore // nil without WithSideStore
}

// SideStore applies the sides of writes (journal.Side) in the same critical
// section as their events: CheckSide runs before anything is stored, and
// ApplySide, after the events passed their checks, must then not fail for a
// side CheckSide accepted (timers/reminder/memory is one).
type SideStore interface {
	SideStore() string
	CheckSide(side journal.Side) error
	ApplySide(ctx context.Context, side journal.Side) error
}

// Option configures a Journal.
type Option func(*Journal)

// WithSideStore makes the journal a journal.SideWriter for s.
func WithSideStore(s SideStore) Option { return func(j *Journal) { j.side = s } }

// indexed is an event as the queries see it.
type indexed struct {
	ev         journal.Event
	entityType string
	slice      int
}

// log holds one persistence id's events in chunks of at most chunkSize
// events, so appending to a long history never copies it. A chunk grows
// with its log (append's doubling) instead of being allocated whole: most
// persistence ids hold a handful of events, and a preallocated chunk cost
// each of them about 80 KB that was never released.
type log struct {
	chunks    [][]journal.Event // ascending SeqNr across chunks
	highest   uint64
	deletedTo uint64 // DeleteTo's highest bound
}

const chunkSize = 512

// append grows the last chunk with the log, so a persistence id with a few
// events does not hold a full chunk (512 events' worth, ~70 KB).
func (l *log) append(e journal.Event) {
	if n := len(l.chunks); n == 0 || len(l.chunks[n-1]) == chunkSize {
		l.chunks = append(l.chunks, nil)
	}
	last := &l.chunks[len(l.chunks)-1]
	*last = append(*last, e)
}

// position finds the first event with SeqNr >= seq.
func (l *log) position(seq uint64) (chunk, index int) {
	chunk = sort.Search(len(l.chunks), func(i int) bool {
		c := l.chunks[i]
		return c[len(c)-1].SeqNr >= seq
	})
	if chunk == len(l.chunks) {
		return chunk, 0
	}
	c := l.chunks[chunk]
	return chunk, sort.Search(len(c), func(i int) bool { return c[i].SeqNr >= seq })
}

var (
	_ journal.Journal         = (*Journal)(nil)
	_ journal.AsyncWriter     = (*Journal)(nil)
	_ journal.ImmediateReader = (*Journal)(nil)
	_ journal.SideWriter      = (*Journal)(nil)
)

// ReadsImmediately implements journal.ImmediateReader: reads take a lock,
// never IO.
func (*Journal) ReadsImmediately() {}

// New returns an empty journal.
func New(opts ...Option) *Journal {
	j := &Journal{logs: make(map[string]*log), written: make(chan struct{})}
	for _, o := range opts {
		o(j)
	}
	return j
}

// Write implements journal.Journal.
func (j *Journal) Write(ctx context.Context, events []journal.Event) error {
	return j.WriteWithSide(ctx, events, nil)
}

// SideStore implements journal.SideWriter.
func (j *Journal) SideStore() string {
	if j.side == nil {
		return ""
	}
	return j.side.SideStore()
}

// WriteAsyncWithSide implements journal.SideWriter; it completes before
// returning.
func (j *Journal) WriteAsyncWithSide(events []journal.Event, side journal.Side, done func(error)) {
	done(j.WriteWithSide(context.Background(), events, side))
}

// WriteWithSide implements journal.SideWriter: side is applied under the
// journal's lock, after the events passed their checks and before they are
// appended, so that readers never see the events without it.
func (j *Journal) WriteWithSide(ctx context.Context, events []journal.Event, side journal.Side) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := journal.Validate(events); err != nil {
		return err
	}
	if side != nil {
		switch {
		case j.side == nil:
			return fmt.Errorf("%w: a side for %q, and the journal has no side store", journal.ErrRejected, side.SideStore())
		case side.SideStore() != j.side.SideStore():
			return fmt.Errorf("%w: a side for %q, and the journal's side store is %q", journal.ErrRejected, side.SideStore(), j.side.SideStore())
		}
		if err := j.side.CheckSide(side); err != nil {
			return fmt.Errorf("%w: %w", journal.ErrRejected, err)
		}
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
	if side != nil {
		if err := j.side.ApplySide(ctx, side); err != nil {
			return err
		}
	}
	typ, slice := journal.EntityTypeOf(pid), journal.SliceOf(pid)
	for _, e := range events {
		j.ordering++
		e.Ordering = j.ordering
		e.Payload = append([]byte(nil), e.Payload...)
		e.Tags = append([]string(nil), e.Tags...)
		l.append(e)
		j.byOrdering = append(j.byOrdering, indexed{ev: e, entityType: typ, slice: slice})
	}
	l.highest = events[len(events)-1].SeqNr
	close(j.written)
	j.written = make(chan struct{})
	return nil
}

// WriteAsync implements journal.AsyncWriter; it completes before returning.
func (j *Journal) WriteAsync(events []journal.Event, done func(error)) {
	done(j.Write(context.Background(), events))
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
	var out []journal.Event
	for ci, i := l.position(from); ci < len(l.chunks) && len(out) < n; ci, i = ci+1, 0 {
		for c := l.chunks[ci]; i < len(c) && len(out) < n; i++ {
			e := c[i]
			if e.SeqNr > to {
				return out
			}
			e.Payload = append([]byte(nil), e.Payload...)
			e.Tags = append([]string(nil), e.Tags...)
			out = append(out, e)
		}
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
	j.countDeleted(l, to)
	l.deletedTo = max(l.deletedTo, to)
	defer j.compact()
	ci, i := l.position(to + 1)
	if to == math.MaxUint64 || ci == len(l.chunks) {
		l.chunks = nil
		return nil
	}
	l.chunks[ci] = append([]journal.Event(nil), l.chunks[ci][i:]...)
	l.chunks = append([][]journal.Event(nil), l.chunks[ci:]...)
	return nil
}
