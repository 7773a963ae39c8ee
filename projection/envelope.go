package projection

import (
	"github.com/shoal-dev/shoal/eventsourced"
	"github.com/shoal-dev/shoal/journal"
)

// Envelope is one decoded event as a handler sees it: the journal's queries'
// typed envelope. A stored event that decodes to several values (an
// upcaster split it) gives several envelopes with its persistence id, seq nr
// and offset, always handed to the handler together.
type Envelope[E any] = eventsourced.Envelope[E]

// unit is one stored event as the runner moves it: its decoded envelopes,
// or the error decoding it gave.
type unit[E any] struct {
	event journal.QueriedEvent
	envs  []Envelope[E]
	err   error
}

// decode turns a queried event into its envelopes. A manifest the codec
// does not know, or a value that is not an E, is the unit's error (an
// *eventsourced.EventDecodeError): it goes through the failure policy like
// a handler's error.
func decode[E any](decodeAll func(string, []byte) ([]any, error), qe journal.QueriedEvent) unit[E] {
	envs, err := eventsourced.DecodeEnvelopes[E](decodeAll, qe)
	return unit[E]{event: qe, envs: envs, err: err}
}
