package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/internal/metrics"
)

// ErrFenced is what a Holder passes to its fence callback (wrapping the
// store's refusal when there was one): the owner must stop acting now.
var ErrFenced = errors.New("lease: fenced")

// Holder keeps a lease: it renews it every
// Timing.RenewEvery (retrying a failed renewal every RenewEvery/4) and
// calls fence once, at the Keeper's fence time or as soon as the store
// refuses a renewal. A renewal that hangs does not delay the fence: the
// fence timer runs beside it, and the renewal's context ends at the fence
// time. Times come from time.Now, so tests run a Holder in a
// testing/synctest bubble.
type Holder struct {
	timing Timing
	renew  func(context.Context) error
	fence  func(error)

	cancel context.CancelFunc
	done   chan struct{}
	// renewals counts renewal calls still running: a fence does not wait
	// for one, but Stop does.
	renewals sync.WaitGroup

	mu     sync.Mutex
	keeper *Keeper

	m *metrics.Lease // nil without WithMetrics

	log      *slog.Logger // nil without WithLogger
	kind     string
	logged   time.Time // when the last failed renewal was logged
	unlogged int       // failed renewals not logged since then
}

// failureLogEvery bounds how often a Holder logs failed renewals: a store
// that stays unreachable fails one renewal every RenewEvery/4, and a line
// each time would bury the one that says why.
const failureLogEvery = 5 * time.Second

// HoldOption tunes a Holder.
type HoldOption func(*Holder)

// WithMetrics registers the Holder's renewal metrics (renewals by outcome,
// renewal lag) on reg, labelled lease=kind ("node", "coordinator"). A nil
// reg records nothing.
func WithMetrics(reg prometheus.Registerer, kind string) HoldOption {
	return func(h *Holder) { h.m = metrics.NewLease(reg, kind) }
}

// WithLogger makes the Holder log each failed renewal (the store could not
// be asked: a timeout, a lost connection) at Warn with its error, how long
// it took and how long remains before the holder fences itself, and each
// refusal at Error; failures are logged at most once per 5 s, the line
// counting those left out. kind names the lease in the lines ("node",
// "coordinator"). A nil logger logs nothing.
func WithLogger(log *slog.Logger, kind string) HoldOption {
	return func(h *Holder) { h.log, h.kind = log, kind }
}

// HoldNode acquires node's lease in store and starts a Holder that keeps
// it, fencing from the moment before the acquisition was sent: a caller
// timing the call itself could read the clock after it and fence late.
// It returns the store's error when the acquisition fails, and checks
// timing and fence as Hold does before it asks the store.
func HoldNode(ctx context.Context, store Store, node cluster.UniqueAddress, timing Timing, fence func(error), opts ...HoldOption) (*Holder, error) {
	if err := checkHold(timing, fence); err != nil {
		return nil, err
	}
	start := time.Now()
	if err := store.AcquireNode(ctx, node, timing.Length); err != nil {
		return nil, err
	}
	return Hold(timing, start, func(ctx context.Context) error {
		return store.RenewNode(ctx, node, timing.Length)
	}, fence, opts...)
}

// HoldCoordinator acquires the coordinator lease name for owner and starts
// a Holder that keeps it under the epoch it returns, as HoldNode does for
// a node lease.
func HoldCoordinator(ctx context.Context, store Store, name, owner string, timing Timing, fence func(error), opts ...HoldOption) (*Holder, uint64, error) {
	if err := checkHold(timing, fence); err != nil {
		return nil, 0, err
	}
	start := time.Now()
	epoch, err := store.AcquireCoordinator(ctx, name, owner, timing.Length)
	if err != nil {
		return nil, 0, err
	}
	h, err := Hold(timing, start, func(ctx context.Context) error {
		return store.RenewCoordinator(ctx, name, epoch, timing.Length)
	}, fence, opts...)
	return h, epoch, err
}

// checkHold refuses what Hold refuses but renew.
func checkHold(timing Timing, fence func(error)) error {
	if err := timing.Validate(); err != nil {
		return err
	}
	if fence == nil {
		return fmt.Errorf("%w: a Holder needs a fence function", ErrInvalidConfig)
	}
	return nil
}

// Hold starts a Holder whose renew extends the lease; granted is when the
// acquisition that got it started. fence is called at most once, from the
// Holder's goroutine, and must not block for long. A timing that
// Timing.Validate refuses is an error wrapping ErrInvalidConfig (a zero
// RenewEvery would retry a failing store in a busy loop), and so is a nil
// renew or fence.
//
// granted may lack a monotonic clock reading (time.Now().UTC(), a time
// that went through a clock interface or a serializer): Hold reads it
// against the wall clock once and keeps the result on the monotonic
// clock, so that a later step of the wall clock cannot delay the fence.
func Hold(timing Timing, granted time.Time, renew func(context.Context) error, fence func(error), opts ...HoldOption) (*Holder, error) {
	if err := checkHold(timing, fence); err != nil {
		return nil, err
	}
	if renew == nil {
		return nil, fmt.Errorf("%w: a Holder needs a renew function", ErrInvalidConfig)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &Holder{timing: timing, renew: renew, fence: fence, cancel: cancel, done: make(chan struct{}), keeper: NewKeeper(timing)}
	for _, o := range opts {
		o(h)
	}
	now := time.Now()
	h.keeper.Granted(now.Add(-now.Sub(granted)), now)
	go h.run(ctx)
	return h, nil
}

// Holds reports whether the owner may act now.
func (h *Holder) Holds() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.keeper.Holds(time.Now())
}

// Stop stops renewing without calling fence (the owner releases the lease
// itself) and waits for a renewal in flight to end, so that no renewal
// reaches the store after Stop returns. fence may call Stop; a Stop from
// elsewhere racing the fence time may return while fence runs.
func (h *Holder) Stop() {
	h.cancel()
	<-h.done
	h.renewals.Wait()
}

type renewal struct {
	start, end time.Time
	err        error
}

// run renews until fenced or stopped; it calls fence after done is
// closed, so that fence may Stop the Holder.
func (h *Holder) run(ctx context.Context) {
	err := h.renewUntilFenced(ctx)
	h.cancel() // ends a renewal still in flight
	close(h.done)
	if err != nil {
		h.fence(err)
	}
}

// renewUntilFenced returns why the owner must fence, or nil once stopped.
func (h *Holder) renewUntilFenced(ctx context.Context) error {
	results := make(chan renewal, 1)
	inFlight := false
	nextTry := h.keeper.RenewAt()
	due := nextTry // when the renewal in progress was due, for its lag; retries keep it
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		h.mu.Lock()
		now := time.Now()
		fenced := h.keeper.Fenced(now)
		fenceAt := h.keeper.FenceAt()
		h.mu.Unlock()
		if fenced {
			return fmt.Errorf("%w: no successful renewal since %v", ErrFenced, fenceAt.Add(-(h.timing.Length - h.timing.Margin)))
		}
		if !inFlight && !now.Before(nextTry) {
			inFlight = true
			start := now
			h.renewals.Add(1)
			go func() {
				defer h.renewals.Done()
				rctx, cancel := context.WithDeadline(ctx, fenceAt)
				defer cancel()
				err := h.renew(rctx)
				results <- renewal{start: start, end: time.Now(), err: err}
			}()
		}
		wake := fenceAt
		if !inFlight && nextTry.Before(wake) {
			wake = nextTry
		}
		timer.Reset(wake.Sub(now))
		select {
		case <-ctx.Done():
			if inFlight {
				<-results
			}
			return nil
		case <-timer.C:
		case r := <-results:
			inFlight = false
			h.m.RenewalTook(r.end.Sub(r.start))
			switch {
			case r.err == nil:
				h.mu.Lock()
				now := time.Now()
				h.keeper.Granted(r.start, now)
				nextTry = h.keeper.RenewAt()
				h.mu.Unlock()
				h.m.Renewed(now.Sub(due))
				due = nextTry
			case Refused(r.err):
				h.m.Refused()
				if h.log != nil {
					h.log.Error("lease: renewal refused; fencing", "lease", h.kind, "err", r.err, "took", r.end.Sub(r.start))
				}
				h.mu.Lock()
				h.keeper.Refused()
				h.mu.Unlock()
				return fmt.Errorf("%w: %w", ErrFenced, r.err)
			default: // the store is unreachable or slow: try again soon
				h.m.Failed()
				now := time.Now()
				h.logFailure(r, fenceAt.Sub(now))
				nextTry = now.Add(h.timing.RenewEvery / 4)
			}
		}
	}
}

// logFailure logs a failed renewal, at most once per failureLogEvery.
func (h *Holder) logFailure(r renewal, beforeFence time.Duration) {
	if h.log == nil {
		return
	}
	if !h.logged.IsZero() && r.end.Sub(h.logged) < failureLogEvery {
		h.unlogged++
		return
	}
	h.log.Warn("lease: renewal failed; retrying", "lease", h.kind, "err", r.err,
		"took", r.end.Sub(r.start), "fence_in", max(beforeFence, 0), "not_logged", h.unlogged)
	h.logged, h.unlogged = r.end, 0
}

// Refused reports whether err is the store's verdict that the lease is
// gone (down, expired, unknown or superseded), on which the holder must
// fence at once, as opposed to a failure to ask, which it retries.
func Refused(err error) bool {
	return errors.Is(err, ErrNodeDown) || errors.Is(err, ErrLeaseExpired) ||
		errors.Is(err, ErrNoLease) || errors.Is(err, ErrStaleEpoch)
}
