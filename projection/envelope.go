package projection

import (
	"fmt"
	"time"

	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/journal"
)

// Envelope is one decoded event as a handler sees it. A stored event that
// decodes to several values (an upcaster split it) gives several
// envelopes with its persistence id, seq nr and offset, always handed to
// the handler together.
type Envelope[E any] struct {
	Event         E
	PersistenceID string
	SeqNr         uint64
	// Timestamp is the writer's clock when the event was persisted.
	Timestamp time.Time
	// Offset is the position just after the stored event.
	Offset journal.Offset
	Tags   []string
}

// unit is one stored event as the runner moves it: its decoded envelopes,
// or the error decoding it gave.
type unit[E any] struct {
	event journal.QueriedEvent
	envs  []Envelope[E]
	err   error
}

// decode turns a queried event into its envelopes. A manifest the codec
// does not know, or a value that is not an E, is the unit's error: it goes
// through the failure policy like a handler's error.
func decode[E any](decodeAll func(string, []byte) ([]any, error), qe journal.QueriedEvent) unit[E] {
	u := unit[E]{event: qe}
	values, err := decodeAll(qe.Manifest, qe.Payload)
	if err != nil {
		u.err = fmt.Errorf("projection: decode %s seq %d: %w", qe.PersistenceID, qe.SeqNr, err)
		return u
	}
	u.envs = make([]Envelope[E], 0, len(values))
	for _, v := range values {
		e, ok := v.(E)
		if !ok {
			var want E
			u.envs, u.err = nil, fmt.Errorf("projection: decode %s seq %d: %w: manifest %q holds %T, want %T",
				qe.PersistenceID, qe.SeqNr, codec.ErrTypeMismatch, qe.Manifest, v, any(&want))
			return u
		}
		u.envs = append(u.envs, Envelope[E]{
			Event: e, PersistenceID: qe.PersistenceID, SeqNr: qe.SeqNr,
			Timestamp: qe.Timestamp, Offset: qe.Offset, Tags: qe.Tags,
		})
	}
	return u
}
