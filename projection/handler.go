package projection

import (
	"context"
	"errors"
	"fmt"

	"github.com/shoal-dev/shoal/journal"
)

// Handler is how a projection applies events and where its offset lives.
// AtLeastOnce and AtLeastOnceGrouped build one over any Store;
// projection/postgres's ExactlyOnce and ExactlyOnceGrouped build one whose
// handling commits with the offset.
type Handler[E any] interface {
	// Store keeps the instance's offset and lease.
	Store() Store
	// ExactlyOnce reports whether Handle stores the offset itself, in the
	// transaction of the handling.
	ExactlyOnce() bool
	// GroupSize is the most stored events one Handle call gets (1 for a
	// handler of single events).
	GroupSize() int
	// Handle applies envs: the envelopes of one or more stored events, in
	// offset order, all envelopes of a stored event together. An
	// exactly-once handler also moves f's stored offset from after (where
	// it stands) to through (the offset after the last of them),
	// atomically with the handling; ErrFenced if f is stale. Finding the
	// offset at through already, it handles nothing and returns nil: an
	// earlier attempt committed but its acknowledgement was lost.
	Handle(ctx context.Context, f Fence, envs []Envelope[E], after, through journal.Offset) error
	// Reset stores to as f's offset; when clear, it first clears the read
	// model (in the same transaction for an exactly-once handler).
	Reset(ctx context.Context, f Fence, to journal.Offset, clear bool) error
}

// AtLeastOnce returns a handler of single events whose offset the runner
// saves to store every Settings.SaveEvery events or SaveInterval.
//
// Duplicates: an event is handled again after a restart when it was
// handled but the offset after it was not saved yet — the runner crashed,
// was killed, lost its lease or could not reach the store between the
// handling and the next save. At most SaveEvery events (or SaveInterval's
// worth) are handled twice per such stop; a retried failure also handles
// the event again. handle must be idempotent or tolerate that.
//
// clear, when not nil, empties the read model for Rebuild; it runs before
// the offset is reset, so a crash between the two leaves the old offset
// on a cleared model (run Rebuild again).
func AtLeastOnce[E any](store Store, handle func(context.Context, Envelope[E]) error, clear func(context.Context) error) Handler[E] {
	return &atLeastOnce[E]{store: store, group: 1, clear: clear, handle: func(ctx context.Context, envs []Envelope[E]) error {
		for _, e := range envs {
			if err := handle(ctx, e); err != nil {
				return err
			}
		}
		return nil
	}}
}

// AtLeastOnceGrouped is AtLeastOnce for a handler that takes up to
// groupSize stored events' envelopes at once (what the reader has ready;
// it does not wait to fill a group). A failure retries, then applies the
// policy to, the whole group.
func AtLeastOnceGrouped[E any](store Store, groupSize int, handle func(context.Context, []Envelope[E]) error, clear func(context.Context) error) Handler[E] {
	return &atLeastOnce[E]{store: store, group: groupSize, handle: handle, clear: clear}
}

type atLeastOnce[E any] struct {
	store  Store
	group  int
	handle func(context.Context, []Envelope[E]) error
	clear  func(context.Context) error
}

func (h *atLeastOnce[E]) Store() Store      { return h.store }
func (h *atLeastOnce[E]) ExactlyOnce() bool { return false }
func (h *atLeastOnce[E]) GroupSize() int    { return h.group }

func (h *atLeastOnce[E]) Handle(ctx context.Context, _ Fence, envs []Envelope[E], _, _ journal.Offset) error {
	return h.handle(ctx, envs)
}

func (h *atLeastOnce[E]) Reset(ctx context.Context, f Fence, to journal.Offset, clear bool) error {
	if clear && h.clear != nil {
		if err := h.clear(ctx); err != nil {
			return fmt.Errorf("projection: clear read model: %w", err)
		}
	}
	return h.store.Save(ctx, f, to, nil)
}

// HandlerError is what Run returns when the StopOnFailure policy stopped the
// projection at an event.
type HandlerError struct {
	Instance      Instance
	PersistenceID string
	SeqNr         uint64
	// Offset is the position after the event; the stored offset is before it.
	Offset journal.Offset
	Err    error
}

func (e *HandlerError) Error() string {
	return fmt.Sprintf("projection %s: stopped at %s seq %d: %v", e.Instance, e.PersistenceID, e.SeqNr, e.Err)
}

func (e *HandlerError) Unwrap() error { return e.Err }

// ErrHandlerPanic marks a handler's panic, recovered and treated as its
// failure.
var ErrHandlerPanic = errors.New("projection: handler panicked")

// Transient marks err as a failure of the infrastructure (a lost database
// connection, say) rather than of the event: the runner retries it with
// back-off for as long as it lasts, without counting it against
// Retry.MaxRetries, so an outage never makes the policy skip events.
// projection/postgres marks connection failures itself.
func Transient(err error) error {
	if err == nil {
		return nil
	}
	return &transientError{err}
}

// IsTransient reports whether err was marked with Transient.
func IsTransient(err error) bool {
	var t *transientError
	return errors.As(err, &t)
}

type transientError struct{ err error }

func (e *transientError) Error() string { return "transient: " + e.err.Error() }
func (e *transientError) Unwrap() error { return e.err }
