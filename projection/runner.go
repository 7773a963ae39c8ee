package projection

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/shoal-dev/shoal/internal/metrics"
	"github.com/shoal-dev/shoal/journal"
)

// runner is one Run of a Projection: the lease, a reader goroutine that
// queries the source ahead into a channel, and the loop that hands groups
// to the handler and serves operations between groups. Everything but the
// reader and the lease's renewal runs on Run's goroutine.
type runner[E any] struct {
	p     *Projection
	h     Handler[E]
	s     Settings
	store Store
	ops   <-chan op
	// requests carries what a heartbeat found pending (ControlStore):
	// the renewing goroutine sends, the loop applies.
	requests chan []Request
	applied  int64 // the highest request id applied

	fence   Fence
	offset  journal.Offset // handled through
	saved   journal.Offset // stored
	pending int            // at-least-once: stored events handled since the last save
	paused  bool
	rd      *reading[E]
	saveT   *time.Timer // at-least-once: SaveInterval after the first unsaved event
}

// reading is a running query: its goroutine delivers units into events
// and its outcome into done.
type reading[E any] struct {
	cancel context.CancelFunc
	events chan unit[E]
	done   chan error
}

func (r *runner[E]) run(ctx context.Context, ready func()) error {
	claim, err := r.acquire(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	r.fence, r.offset, r.saved, r.paused = claim.Fence, claim.Offset, claim.Offset, claim.Paused
	r.p.update(func(s *Status) {
		s.Running, s.Paused, s.Epoch, s.Offset, s.SavedOffset = true, r.paused, r.fence.Epoch, r.offset, r.saved
	})

	rctx, cancel := context.WithCancelCause(ctx)
	r.requests = make(chan []Request, 1)
	var renewing sync.WaitGroup
	renewing.Add(1)
	go func() {
		defer renewing.Done()
		r.renew(rctx, cancel)
	}()
	ready()
	err = r.loop(rctx)
	r.stopReader()
	r.stopSaveTimer()
	if cause := context.Cause(rctx); err == nil && errors.Is(cause, ErrFenced) {
		err = cause
	}
	cancel(nil)
	renewing.Wait()
	if errors.Is(err, ErrFenced) {
		return err
	}
	// Stopping (asked to, or by the policy): keep what was handled and let
	// a successor take the instance at once.
	fctx, fcancel := context.WithTimeout(context.WithoutCancel(ctx), r.s.LeaseTTL)
	defer fcancel()
	if serr := r.savePendingOnce(fctx); serr != nil && err == nil && !errors.Is(serr, context.DeadlineExceeded) {
		err = serr
	}
	_ = r.store.Release(fctx, r.fence) // on failure the lease expires
	return err
}

// acquire takes the lease, retrying what may pass.
func (r *runner[E]) acquire(ctx context.Context) (Claim, error) {
	b := r.backoff()
	for {
		c, err := r.store.Acquire(ctx, r.p.inst, r.s.Holder, r.s.LeaseTTL)
		switch {
		case err == nil:
			return c, nil
		case ctx.Err() != nil:
			return Claim{}, ctx.Err()
		case errors.Is(err, ErrInstanceHeld), errors.Is(err, ErrInvalidConfig), errors.Is(err, journal.ErrOffsetMismatch):
			return Claim{}, fmt.Errorf("projection %s: %w", r.p.inst, err)
		}
		r.failed(err)
		if err := sleep(ctx, b.NextBackOff()); err != nil {
			return Claim{}, err
		}
	}
}

// renew keeps the lease until ctx ends; a refusal cancels the run with
// ErrFenced. A failed renewal is retried at the next tick: if the lease
// expires meanwhile and another runner takes it, the next write is fenced.
// With a ControlStore each renewal is a heartbeat, the first one at once:
// it stores the runner's report and hands pending requests to the loop.
func (r *runner[E]) renew(ctx context.Context, stop context.CancelCauseFunc) {
	t := time.NewTicker(max(r.s.LeaseTTL/3, time.Millisecond))
	defer t.Stop()
	control, _ := r.store.(ControlStore)
	first := control != nil
	for {
		if !first {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
		first = false
		r.countLag(ctx)
		var err error
		if control != nil {
			var pending []Request
			pending, err = control.Heartbeat(ctx, r.fence, r.s.LeaseTTL, r.report())
			if err == nil && len(pending) > 0 {
				select {
				case r.requests <- pending:
				default: // the loop has the last batch still; they stay pending
				}
			}
		} else {
			err = r.store.Renew(ctx, r.fence, r.s.LeaseTTL)
		}
		if errors.Is(err, ErrFenced) {
			stop(fmt.Errorf("projection %s: renew lease: %w", r.p.inst, err))
			return
		}
		if err != nil && ctx.Err() == nil {
			r.failed(err)
		}
	}
}

// countLag updates the lag in events when the source counts them.
func (r *runner[E]) countLag(ctx context.Context) {
	counter, ok := r.p.cfg.Source.(EventCounter)
	if !ok {
		return
	}
	n, err := counter.CountEventsBySlices(ctx, r.p.cfg.EntityType, r.p.cfg.Slices, r.p.Status().Offset)
	if err != nil {
		return // a failed count leaves the last one; the next tick tries again
	}
	r.p.update(func(s *Status) { s.LagEvents, s.LagEventsCounted = n, true })
}

// report is the runner's heartbeat report.
func (r *runner[E]) report() Report {
	st := r.p.Status()
	rep := Report{Offset: st.Offset, LastEventTime: st.LastEventTime, LagEvents: -1}
	if st.LagEventsCounted {
		rep.LagEvents = st.LagEvents
	}
	if st.LastError != nil {
		rep.LastError = st.LastError.Error()
	}
	return rep
}

// applyRequests applies the requests a heartbeat found, in ID order. A
// request refused for good (an offset of another journal) is completed
// with its error recorded; one that failed otherwise stays pending, and
// the ones after it wait, until the next heartbeat.
func (r *runner[E]) applyRequests(ctx context.Context, pending []Request) error {
	control := r.store.(ControlStore)
	for _, q := range pending {
		if q.ID <= r.applied {
			continue
		}
		err := r.apply(ctx, opFor(q))
		switch {
		case errors.Is(err, ErrFenced):
			return err
		case err != nil && !errors.Is(err, journal.ErrOffsetMismatch) && !errors.Is(err, ErrInvalidConfig):
			r.failed(fmt.Errorf("requested %s: %w", q.Kind, err))
			return nil
		case err != nil:
			r.failed(fmt.Errorf("requested %s refused: %w", q.Kind, err))
		}
		r.applied = q.ID
		if err := control.Complete(ctx, r.fence, q.ID); err != nil {
			if errors.Is(err, ErrFenced) {
				return fmt.Errorf("projection %s: %w", r.p.inst, err)
			}
			r.failed(err) // applied: it stays pending and is skipped by ID
		}
	}
	return nil
}

// loop handles events and operations until ctx ends (nil) or it must stop.
func (r *runner[E]) loop(ctx context.Context) error {
	if !r.paused {
		r.startReader(ctx)
	}
	for {
		var (
			events <-chan unit[E]
			done   <-chan error
			saveC  <-chan time.Time
		)
		if r.rd != nil {
			events, done = r.rd.events, r.rd.done
		}
		if r.saveT != nil {
			saveC = r.saveT.C
		}
		var err error
		select {
		case <-ctx.Done():
			return nil
		case o := <-r.ops:
			err = r.apply(ctx, o)
			o.reply <- err
			if !errors.Is(err, ErrFenced) {
				err = nil // the caller has it; the run goes on
			}
		case u := <-events:
			err = r.process(ctx, r.collect(u, events))
		case rerr := <-done:
			// The reader sent every unit before it ended: handle them.
			for err == nil && len(r.rd.events) > 0 {
				err = r.process(ctx, r.collect(<-r.rd.events, r.rd.events))
			}
			r.rd = nil
			if err == nil && rerr != nil && ctx.Err() == nil {
				err = fmt.Errorf("projection %s: read: %w", r.p.inst, rerr)
			}
			if err == nil && ctx.Err() == nil {
				return nil // StopAtEnd: the stored events are handled
			}
		case <-saveC:
			r.saveT = nil
			err = r.savePending(ctx)
		case pending := <-r.requests:
			err = r.applyRequests(ctx, pending)
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil // stopped (or fenced: see run) while handling
			}
			return err
		}
	}
}

// collect adds to first what the reader has ready, up to a group.
func (r *runner[E]) collect(first unit[E], events <-chan unit[E]) []unit[E] {
	group := []unit[E]{first}
	for len(group) < r.h.GroupSize() {
		select {
		case u := <-events:
			group = append(group, u)
		default:
			return group
		}
	}
	return group
}

// process handles a group; an event that could not be decoded goes to the
// policy, with the events before it handled first.
func (r *runner[E]) process(ctx context.Context, group []unit[E]) error {
	start := 0
	for i, u := range group {
		if u.err == nil {
			continue
		}
		if err := r.handle(ctx, group[start:i]); err != nil {
			return err
		}
		r.failed(u.err)
		if err := r.fail(ctx, group[i:i+1], u.err); err != nil {
			return err
		}
		start = i + 1
	}
	return r.handle(ctx, group[start:])
}

// handle hands units to the handler, retrying failures, then applies the
// policy.
func (r *runner[E]) handle(ctx context.Context, units []unit[E]) error {
	if len(units) == 0 {
		return nil
	}
	var envs []Envelope[E]
	for _, u := range units {
		envs = append(envs, u.envs...)
	}
	through := units[len(units)-1].event.Offset
	b := r.backoff()
	failures := 0
	for {
		err := r.call(ctx, envs, through)
		if err == nil {
			return r.handled(ctx, units, len(envs), through)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, ErrFenced) {
			return fmt.Errorf("projection %s: %w", r.p.inst, err)
		}
		r.failed(err)
		if !IsTransient(err) {
			if failures++; failures > r.s.Retry.MaxRetries {
				return r.fail(ctx, units, err)
			}
		}
		r.p.metrics.Failed(metrics.ProjectionRetried)
		r.p.update(func(s *Status) { s.Retried++ })
		if err := sleep(ctx, b.NextBackOff()); err != nil {
			return err
		}
	}
}

// call runs the handler, turning a panic into its error.
func (r *runner[E]) call(ctx context.Context, envs []Envelope[E], through journal.Offset) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("%w: %v\n%s", ErrHandlerPanic, v, debug.Stack())
		}
	}()
	return r.h.Handle(ctx, r.fence, envs, r.offset, through)
}

// handled records a successful handling and saves an at-least-once
// offset when its cadence says so.
func (r *runner[E]) handled(ctx context.Context, units []unit[E], envs int, through journal.Offset) error {
	r.offset = through
	if r.h.ExactlyOnce() {
		r.saved = through
	} else {
		r.pending += len(units)
	}
	last := units[len(units)-1].event.Timestamp
	r.p.metrics.Handled(envs)
	r.p.update(func(s *Status) {
		s.Offset, s.SavedOffset, s.Handled, s.LastError = r.offset, r.saved, s.Handled+uint64(envs), nil
		if last.After(s.LastEventTime) {
			s.LastEventTime = last
		}
	})
	if r.h.ExactlyOnce() {
		return nil
	}
	if r.pending >= r.s.SaveEvery {
		return r.savePending(ctx)
	}
	if r.saveT == nil {
		r.saveT = time.NewTimer(r.s.SaveInterval)
	}
	return nil
}

// fail applies the policy to units whose handling failed with err.
func (r *runner[E]) fail(ctx context.Context, units []unit[E], err error) error {
	first, through := units[0].event, units[len(units)-1].event.Offset
	if r.s.OnFailure == StopOnFailure {
		r.p.metrics.Failed(metrics.ProjectionStopped)
		return &HandlerError{Instance: r.p.inst, PersistenceID: first.PersistenceID, SeqNr: first.SeqNr, Offset: first.Offset, Err: err}
	}
	var dead []DeadLetter
	if r.s.OnFailure == DeadLetterOnFailure {
		for _, u := range units {
			dead = append(dead, DeadLetter{
				PersistenceID: u.event.PersistenceID, SeqNr: u.event.SeqNr, Manifest: u.event.Manifest,
				Payload: u.event.Payload, Error: err.Error(), Offset: u.event.Offset,
			})
		}
	}
	// The offset moves past the units (and any handled before them) in
	// the transaction that stores the dead letters.
	if err := r.retry(ctx, func() error { return r.store.Save(ctx, r.fence, through, dead) }); err != nil {
		return err
	}
	r.offset, r.saved, r.pending = through, through, 0
	r.stopSaveTimer()
	n := uint64(len(units))
	for range units {
		if dead != nil {
			r.p.metrics.Failed(metrics.ProjectionDeadLettered)
		} else {
			r.p.metrics.Failed(metrics.ProjectionSkipped)
		}
	}
	r.p.update(func(s *Status) {
		s.Offset, s.SavedOffset = r.offset, r.saved
		if dead != nil {
			s.DeadLettered += n
		} else {
			s.Skipped += n
		}
	})
	return nil
}

// savePending stores the at-least-once offset, retrying what may pass.
func (r *runner[E]) savePending(ctx context.Context) error {
	return r.retry(ctx, func() error { return r.savePendingOnce(ctx) })
}

func (r *runner[E]) savePendingOnce(ctx context.Context) error {
	if r.saved == r.offset {
		r.pending = 0
		return nil
	}
	if err := r.store.Save(ctx, r.fence, r.offset, nil); err != nil {
		return err
	}
	r.saved, r.pending = r.offset, 0
	r.stopSaveTimer()
	r.p.update(func(s *Status) { s.SavedOffset = r.saved })
	return nil
}

func (r *runner[E]) stopSaveTimer() {
	if r.saveT != nil {
		r.saveT.Stop()
		r.saveT = nil
	}
}

// apply carries out an operation between groups. The reader is stopped
// (its read-ahead dropped) and started again from the handled offset.
func (r *runner[E]) apply(ctx context.Context, o op) (err error) {
	r.stopReader()
	defer func() {
		if !r.paused && ctx.Err() == nil {
			r.startReader(ctx)
		}
		if err != nil {
			err = fmt.Errorf("projection %s: %w", r.p.inst, err)
		}
	}()
	switch o.kind {
	case opPause:
		if r.paused {
			return nil
		}
		if err := r.savePendingOnce(ctx); err != nil {
			return err
		}
		if err := r.store.SetPaused(ctx, r.fence, true); err != nil {
			return err
		}
		r.paused = true
	case opResume:
		if !r.paused {
			return nil
		}
		if err := r.store.SetPaused(ctx, r.fence, false); err != nil {
			return err
		}
		r.paused = false
	case opReset, opRebuild:
		to := o.to
		if o.kind == opRebuild {
			to = journal.Offset{}
		}
		if !to.IsStart() && !r.offset.IsStart() && to.Kind != r.offset.Kind {
			return fmt.Errorf("%w: reset to %s from %s", journal.ErrOffsetMismatch, to, r.offset)
		}
		if err := r.h.Reset(ctx, r.fence, to, o.kind == opRebuild); err != nil {
			return err
		}
		r.offset, r.saved, r.pending = to, to, 0
		r.stopSaveTimer()
	}
	r.p.update(func(s *Status) { s.Paused, s.Offset, s.SavedOffset = r.paused, r.offset, r.saved })
	return nil
}

// startReader starts a query from the handled offset.
func (r *runner[E]) startReader(ctx context.Context) {
	rctx, cancel := context.WithCancel(ctx)
	rd := &reading[E]{cancel: cancel, events: make(chan unit[E], r.s.ReadAhead), done: make(chan error, 1)}
	from := r.offset
	go func() { rd.done <- r.read(rctx, from, rd.events) }()
	r.rd = rd
}

// stopReader ends the query and drops what it read ahead.
func (r *runner[E]) stopReader() {
	rd := r.rd
	if rd == nil {
		return
	}
	r.rd = nil
	rd.cancel()
	for {
		select {
		case <-rd.events:
		case <-rd.done:
			return
		}
	}
}

// read queries the source from offset from into out until ctx ends, the
// stored events are read (StopAtEnd), or the offset does not fit the
// source. Other failures are retried from the last event delivered.
func (r *runner[E]) read(ctx context.Context, from journal.Offset, out chan<- unit[E]) error {
	mode := journal.Live
	if r.s.StopAtEnd {
		mode = journal.Current
	}
	b := r.backoff()
	for {
		progressed := false
		err := r.p.cfg.Source.EventsBySlices(ctx, r.p.cfg.EntityType, r.p.cfg.Slices, from, mode, func(qe journal.QueriedEvent) error {
			u := decode[E](r.p.cfg.Decode, qe)
			select {
			case out <- u:
				from, progressed = qe.Offset, true
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case err == nil && mode == journal.Current:
			return nil
		case errors.Is(err, journal.ErrOffsetMismatch), errors.Is(err, journal.ErrInvalidQuery):
			return err
		case err != nil:
			r.failed(fmt.Errorf("read: %w", err))
		}
		if progressed {
			b.Reset()
		}
		if err := sleep(ctx, b.NextBackOff()); err != nil {
			return err
		}
	}
}

// retry runs fn until it succeeds, is fenced, or ctx ends: for the
// store's writes, which an outage must only delay.
func (r *runner[E]) retry(ctx context.Context, fn func() error) error {
	b := r.backoff()
	for {
		err := fn()
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, ErrFenced):
			return fmt.Errorf("projection %s: %w", r.p.inst, err)
		}
		r.failed(err)
		if err := sleep(ctx, b.NextBackOff()); err != nil {
			return err
		}
	}
}

func (r *runner[E]) failed(err error) { r.p.update(func(s *Status) { s.LastError = err }) }

func (r *runner[E]) backoff() backoff.BackOff {
	rs := r.s.Retry
	return backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(rs.InitialInterval), backoff.WithMaxInterval(rs.MaxInterval),
		backoff.WithMultiplier(rs.Multiplier), backoff.WithRandomizationFactor(rs.RandomizationFactor),
		backoff.WithMaxElapsedTime(0))
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
