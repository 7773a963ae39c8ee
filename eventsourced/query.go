package eventsourced

import (
	"context"
	"fmt"
	"reflect"
	"time"

	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/journal"
)

// Envelope is a queried event decoded to its type, with where it came from.
// See docs/DESIGN.md, "The read side".
type Envelope[E any] struct {
	Event         E
	PersistenceID string
	SeqNr         uint64
	Timestamp     time.Time
	// Offset is the position after the stored event: resuming a query from
	// it delivers the next stored event. When an upcaster splits one stored
	// event into several, they all carry its offset and seq nr.
	Offset     journal.Offset
	EntityType string
	Slice      int
	Tags       []string
}

// EventDecodeError is why a query stopped at a stored event it could not
// decode as the query's event type. It unwraps to the codec's error
// (codec.ErrUnknownManifest, codec.ErrTypeMismatch, ...).
type EventDecodeError struct {
	PersistenceID string
	SeqNr         uint64
	Manifest      string
	Offset        journal.Offset
	Err           error
}

func (e *EventDecodeError) Error() string {
	return fmt.Sprintf("eventsourced: query: %s seq %d (manifest %q): %v", e.PersistenceID, e.SeqNr, e.Manifest, e.Err)
}

func (e *EventDecodeError) Unwrap() error { return e.Err }

// EventsBySlices runs q.EventsBySlices and hands fn each event decoded with
// reg as an E (see Envelope). An event that does not decode as an E stops
// the query with an *EventDecodeError; so does an error from fn, returned
// as is.
func EventsBySlices[E any](ctx context.Context, q journal.Queries, reg *codec.Registry, entityType string, r journal.SliceRange, after journal.Offset, mode journal.Mode, fn func(Envelope[E]) error) error {
	return q.EventsBySlices(ctx, entityType, r, after, mode, decoding(reg, fn))
}

// EventsByTag is EventsBySlices for q.EventsByTag.
func EventsByTag[E any](ctx context.Context, q journal.Queries, reg *codec.Registry, tag string, after journal.Offset, mode journal.Mode, fn func(Envelope[E]) error) error {
	return q.EventsByTag(ctx, tag, after, mode, decoding(reg, fn))
}

// decoding turns fn into a callback of the untyped queries: every value
// of a stored event is decoded before any is delivered.
func decoding[E any](reg *codec.Registry, fn func(Envelope[E]) error) func(journal.QueriedEvent) error {
	return func(qe journal.QueriedEvent) error {
		envs, err := DecodeEnvelopes[E](reg.DecodeAll, qe)
		if err != nil {
			return err
		}
		for _, env := range envs {
			if err := fn(env); err != nil {
				return err
			}
		}
		return nil
	}
}

// DecodeEnvelopes decodes a queried event into its envelopes with
// decodeAll (a codec.Registry's DecodeAll, the decoding entry of every read
// path, so that manifest aliases and upcasters apply as in recovery): one
// envelope per value, all with the stored event's seq nr and offset. A
// manifest decodeAll does not know, or a value that is not an E, is an
// *EventDecodeError.
func DecodeEnvelopes[E any](decodeAll func(manifest string, payload []byte) ([]any, error), qe journal.QueriedEvent) ([]Envelope[E], error) {
	vs, err := decodeAll(qe.Manifest, qe.Payload)
	if err != nil {
		return nil, &EventDecodeError{PersistenceID: qe.PersistenceID, SeqNr: qe.SeqNr, Manifest: qe.Manifest, Offset: qe.Offset, Err: err}
	}
	envs := make([]Envelope[E], len(vs))
	for i, v := range vs {
		e, ok := v.(E)
		if !ok {
			return nil, &EventDecodeError{PersistenceID: qe.PersistenceID, SeqNr: qe.SeqNr, Manifest: qe.Manifest, Offset: qe.Offset,
				Err: fmt.Errorf("%w: %T, want %v", codec.ErrTypeMismatch, v, reflect.TypeFor[E]())}
		}
		envs[i] = Envelope[E]{Event: e, PersistenceID: qe.PersistenceID, SeqNr: qe.SeqNr, Timestamp: qe.Timestamp,
			Offset: qe.Offset, EntityType: qe.EntityType, Slice: qe.Slice, Tags: qe.Tags}
	}
	return envs, nil
}
