// Package projection keeps read models from the journal's queries: a named
// projection over an entity type and a slice range reads the events in
// offset order, hands them to a handler, and records how far it got in an
// offset store, fenced so that one instance writes at a time. See
// docs/DESIGN.md, "The read side".
//
// Delivery. Every event of the range is handed to the handler in offset
// order (so each persistence id's events in seq nr order), one group at a
// time. An exactly-once handler (projection/postgres) writes the read model
// in the transaction that stores the offset: a crash, a lost connection or
// a lost lease rolls both back, and the events are handled again from the
// stored offset, so each commits once. An at-least-once handler
// (AtLeastOnce) has its offset saved every Settings.SaveEvery events or
// SaveInterval: events handled after the last save are handled again after
// a crash (see AtLeastOnce).
//
// Failures. A handler's error or panic is retried with back-off
// (Settings.Retry), then Settings.OnFailure decides: stop, skip, or
// dead-letter the event (a row in the store, in the transaction that moves
// the offset past it). An event the codec cannot decode goes to the policy
// at once. Errors marked Transient (projection/postgres marks lost
// connections) and failures of the source and the store are retried until
// they pass: an outage delays a projection, it never skips events.
//
// Instances. An Instance is a name and a slice range; Run takes its lease
// in the store (ErrInstanceHeld while another runner holds it) and renews
// it; every write names the lease's epoch, so a runner that lost the
// instance gets ErrFenced and stops. Run returns when its context ends, so
// a cluster layer starts and stops instances with contexts
// (projection/sharded runs them across a cluster).
//
// Operations from any node. With a ControlStore (both stores are), the
// runner's lease renewal is a heartbeat that stores its status and picks
// up operations any node queued for the instance; see control.go and
// ControlStore.
package projection

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/internal/metrics"
	"github.com/shoal-dev/shoal/journal"
)

// Config names a projection instance and where its events come from.
type Config struct {
	// Name is the projection's name, shared by its instances.
	Name string
	// EntityType is whose events it reads.
	EntityType string
	// Slices is this instance's range; journal.AllSlices for one instance.
	Slices journal.SliceRange
	// Source answers the queries; Codec decodes the events.
	Source journal.Queries
	Codec  *codec.Registry
	// Decode, when not nil, decodes in place of Codec.DecodeAll (same
	// contract: one value or several for one stored event); Codec may
	// then be nil.
	Decode func(manifest string, payload []byte) ([]any, error)
	// Settings; zero fields take DefaultSettings' values.
	Settings Settings
}

// Projection is one instance of a projection: Run it, and operate it from
// other goroutines while it runs.
type Projection struct {
	inst    Instance
	cfg     Config
	store   Store
	run     func(ctx context.Context, ops <-chan op, ready func()) error
	metrics *metrics.Projection

	mu      sync.Mutex
	inRun   bool          // a Run is active
	ops     chan op       // nil until the active Run took the lease
	runDone chan struct{} // closed when the active Run ends
	status  Status
}

// New returns the instance cfg names, handled by h.
func New[E any](cfg Config, h Handler[E]) (*Projection, error) {
	inst := Instance{Name: cfg.Name, Slices: cfg.Slices}
	if err := inst.Validate(); err != nil {
		return nil, err
	}
	switch {
	case cfg.EntityType == "":
		return nil, fmt.Errorf("%w: %s: empty entity type", ErrInvalidConfig, inst)
	case cfg.Source == nil || (cfg.Codec == nil && cfg.Decode == nil) || h == nil || h.Store() == nil:
		return nil, fmt.Errorf("%w: %s: a source, a codec, a handler and its store are required", ErrInvalidConfig, inst)
	case h.GroupSize() < 1:
		return nil, fmt.Errorf("%w: %s: group size %d", ErrInvalidConfig, inst, h.GroupSize())
	}
	if cfg.Decode == nil {
		cfg.Decode = cfg.Codec.DecodeAll
	}
	s, err := cfg.Settings.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", inst, err)
	}
	if s.Holder == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		s.Holder = hex.EncodeToString(b[:])
	}
	p := &Projection{inst: inst, cfg: cfg, store: h.Store()}
	p.status.Instance = inst
	p.metrics = metrics.NewProjection(s.Registerer, inst.Name, inst.Key(), p.report)
	p.run = func(ctx context.Context, ops <-chan op, ready func()) error {
		r := &runner[E]{p: p, h: h, s: s, store: h.Store(), ops: ops}
		return r.run(ctx, ready)
	}
	return p, nil
}

// Instance is the instance this projection runs.
func (p *Projection) Instance() Instance { return p.inst }

// Run takes the instance's lease and handles events until ctx ends
// (then it saves an at-least-once offset, releases the lease and returns
// nil), until the events are handled with Settings.StopAtEnd (nil), or
// until it must stop: the lease is held elsewhere (ErrInstanceHeld), it was
// fenced (ErrFenced), the policy stopped it (*HandlerError), or the stored
// offset is not the source's kind (journal.ErrOffsetMismatch). Run again
// after it returned to resume from the stored offset.
func (p *Projection) Run(ctx context.Context) error {
	p.mu.Lock()
	if p.inRun {
		p.mu.Unlock()
		return fmt.Errorf("%w: %s", ErrAlreadyRunning, p.inst)
	}
	p.inRun = true
	ops := make(chan op)
	done := make(chan struct{})
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.inRun = false
		p.ops, p.runDone = nil, nil
		p.status.Running = false
		p.mu.Unlock()
		close(done)
	}()
	return p.run(ctx, ops, func() {
		// Operations are accepted once the lease is taken.
		p.mu.Lock()
		p.ops, p.runDone = ops, done
		p.mu.Unlock()
	})
}

type opKind int

const (
	opPause opKind = iota
	opResume
	opReset
	opRebuild
)

type op struct {
	kind  opKind
	to    journal.Offset
	reply chan error
}

// do hands o to the running runner and waits for its outcome.
func (p *Projection) do(ctx context.Context, o op) error {
	p.mu.Lock()
	ops, done := p.ops, p.runDone
	p.mu.Unlock()
	if ops == nil {
		return fmt.Errorf("%w: %s", ErrNotRunning, p.inst)
	}
	o.reply = make(chan error, 1)
	select {
	case ops <- o:
	case <-done:
		return fmt.Errorf("%w: %s", ErrNotRunning, p.inst)
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-o.reply:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Pause stops handling after the current group: the at-least-once offset
// is saved and the paused flag stored, so the instance also starts paused
// after a restart until Resume.
func (p *Projection) Pause(ctx context.Context) error { return p.do(ctx, op{kind: opPause}) }

// Resume undoes Pause.
func (p *Projection) Resume(ctx context.Context) error { return p.do(ctx, op{kind: opResume}) }

// Reset moves the instance's offset to to (the zero Offset for the start)
// and goes on from there; the read model is left as it is. Events handled
// but not yet saved (at-least-once) are forgotten.
func (p *Projection) Reset(ctx context.Context, to journal.Offset) error {
	return p.do(ctx, op{kind: opReset, to: to})
}

// Rebuild clears the read model with the handler's clear function (in the
// transaction that resets the offset, for an exactly-once handler) and
// handles every event again from the start.
func (p *Projection) Rebuild(ctx context.Context) error { return p.do(ctx, op{kind: opRebuild}) }

// Status is a projection instance's state as its runner last saw it.
type Status struct {
	Instance Instance
	Running  bool
	Paused   bool
	// Epoch is the lease's fencing token of the current (or last) run.
	Epoch int64
	// Offset is where handling got to; SavedOffset where the store has
	// it (behind Offset between at-least-once saves).
	Offset      journal.Offset
	SavedOffset journal.Offset
	// Handled counts envelopes handled since New; Retried, Skipped and
	// DeadLettered count failures by outcome.
	Handled, Retried, Skipped, DeadLettered uint64
	// LastEventTime is the write timestamp of the last event handled.
	LastEventTime time.Time
	// Lag is now minus LastEventTime (0 before the first event): how far
	// behind the writers the read model is while events flow; it keeps
	// growing while none are written.
	Lag time.Duration
	// LagEvents is how many events of the range were stored after Offset
	// at the last heartbeat (every LeaseTTL/3 while running), when
	// LagEventsCounted: the source is an EventCounter.
	LagEvents        int64
	LagEventsCounted bool
	// LastError is the last failure seen (handler, source or store), nil
	// after a success.
	LastError error
}

// Status returns the instance's state.
func (p *Projection) Status() Status {
	p.mu.Lock()
	s := p.status
	p.mu.Unlock()
	if !s.LastEventTime.IsZero() {
		s.Lag = max(time.Since(s.LastEventTime), 0)
	}
	return s
}

func (p *Projection) report() metrics.ProjectionReport {
	s := p.Status()
	r := metrics.ProjectionReport{Running: s.Running, Paused: s.Paused, LagSeconds: s.Lag.Seconds(),
		LagEvents: s.LagEvents, LagEventsCounted: s.LagEventsCounted}
	if !s.LastEventTime.IsZero() {
		r.LastEventUnix = float64(s.LastEventTime.UnixNano()) / 1e9
	}
	return r
}

// update changes the status under the lock.
func (p *Projection) update(fn func(*Status)) {
	p.mu.Lock()
	fn(&p.status)
	p.mu.Unlock()
}
