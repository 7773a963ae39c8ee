package eventsourcedtest

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/shoal-dev/shoal/journal"
	"github.com/shoal-dev/shoal/timers"
)

// Journal wraps a journal.Journal with fault injection and a record of every
// event it stored. It is safe for concurrent use.
type Journal struct {
	journal.Journal

	mu          sync.Mutex
	failWrite   error
	rejectWrite error
	failRead    error
	written     []journal.Event
	writeDelay  time.Duration
	readDelay   time.Duration
	clock       timers.Clock
}

// NewJournal wraps j. Its latency (DelayWrites, DelayReads) runs on the
// wall clock, or inside a Kit on Options.Clock.
func NewJournal(j journal.Journal) *Journal { return &Journal{Journal: j, clock: timers.Real{}} }

// DelayWrites makes every Write wait d before it writes (or fails), on the
// journal's clock, until DelayWrites(0). A write whose context ends first
// fails with the context's error, storing nothing.
func (j *Journal) DelayWrites(d time.Duration) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.writeDelay = d
}

// DelayReads makes every Replay and HighestSeqNr wait d first, as DelayWrites.
func (j *Journal) DelayReads(d time.Duration) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.readDelay = d
}

// wait sleeps the delay in *d on the journal's clock, or until ctx ends.
func (j *Journal) wait(ctx context.Context, d *time.Duration) error {
	j.mu.Lock()
	delay, clock := *d, j.clock
	j.mu.Unlock()
	if delay <= 0 {
		return nil
	}
	elapsed := make(chan struct{})
	t := clock.AfterFunc(delay, func() { close(elapsed) })
	defer t.Stop()
	select {
	case <-elapsed:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// FailNextPersist makes the next Write fail with err, storing nothing.
func (j *Journal) FailNextPersist(err error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.failWrite = err
}

// RejectNextPersist makes the next Write fail with an error matching
// journal.ErrRejected and err, storing nothing.
func (j *Journal) RejectNextPersist(err error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.rejectWrite = err
}

// FailNextRead makes the next Replay or HighestSeqNr fail with err.
func (j *Journal) FailNextRead(err error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.failRead = err
}

// Written returns a copy of every event stored through this wrapper, in write order.
func (j *Journal) Written() []journal.Event {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]journal.Event(nil), j.written...)
}

func (j *Journal) takeFault(f *error) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	err := *f
	*f = nil
	return err
}

// Write implements journal.Journal.
func (j *Journal) Write(ctx context.Context, events []journal.Event) error {
	if err := j.wait(ctx, &j.writeDelay); err != nil {
		return err
	}
	if err := j.takeFault(&j.failWrite); err != nil {
		return err
	}
	if err := j.takeFault(&j.rejectWrite); err != nil {
		return fmt.Errorf("%w: %w", journal.ErrRejected, err)
	}
	if err := j.Journal.Write(ctx, events); err != nil {
		return err
	}
	j.mu.Lock()
	j.written = append(j.written, events...)
	j.mu.Unlock()
	return nil
}

var _ journal.SideWriter = (*Journal)(nil)

// SideStore implements journal.SideWriter.
func (j *Journal) SideStore() string {
	if sw, ok := j.Journal.(journal.SideWriter); ok {
		return sw.SideStore()
	}
	return ""
}

// WriteWithSide implements journal.SideWriter: Write, with its delays and
// faults, and side stored with the events (a fault stores neither).
func (j *Journal) WriteWithSide(ctx context.Context, events []journal.Event, side journal.Side) error {
	if err := j.wait(ctx, &j.writeDelay); err != nil {
		return err
	}
	if err := j.takeFault(&j.failWrite); err != nil {
		return err
	}
	if err := j.takeFault(&j.rejectWrite); err != nil {
		return fmt.Errorf("%w: %w", journal.ErrRejected, err)
	}
	sw, ok := j.Journal.(journal.SideWriter)
	if !ok {
		return fmt.Errorf("%w: the wrapped journal writes no sides", journal.ErrRejected)
	}
	if err := sw.WriteWithSide(ctx, events, side); err != nil {
		return err
	}
	j.mu.Lock()
	j.written = append(j.written, events...)
	j.mu.Unlock()
	return nil
}

// WriteAsyncWithSide implements journal.SideWriter, on a goroutine of its
// own as the entity's plain writes are.
func (j *Journal) WriteAsyncWithSide(events []journal.Event, side journal.Side, done func(error)) {
	go func() { done(j.WriteWithSide(context.Background(), events, side)) }()
}

// Replay implements journal.Journal.
func (j *Journal) Replay(ctx context.Context, pid string, from, to uint64, fn func(journal.Event) error) error {
	if err := j.wait(ctx, &j.readDelay); err != nil {
		return err
	}
	if err := j.takeFault(&j.failRead); err != nil {
		return err
	}
	return j.Journal.Replay(ctx, pid, from, to, fn)
}

// HighestSeqNr implements journal.Journal.
func (j *Journal) HighestSeqNr(ctx context.Context, pid string) (uint64, error) {
	if err := j.wait(ctx, &j.readDelay); err != nil {
		return 0, err
	}
	if err := j.takeFault(&j.failRead); err != nil {
		return 0, err
	}
	return j.Journal.HighestSeqNr(ctx, pid)
}
