package projection

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Policy decides what happens to an event whose handling still fails after
// its retries, or that cannot be decoded.
type Policy int

const (
	// StopOnFailure ends Run with a *HandlerError; the offset stays before the
	// event, so the next Run starts with it again.
	StopOnFailure Policy = iota
	// SkipOnFailure moves the offset past the event.
	SkipOnFailure
	// DeadLetterOnFailure stores the event in the dead letters, in the
	// same transaction that moves the offset past it.
	DeadLetterOnFailure
)

func (p Policy) String() string {
	switch p {
	case StopOnFailure:
		return "stop"
	case SkipOnFailure:
		return "skip"
	case DeadLetterOnFailure:
		return "dead-letter"
	}
	return fmt.Sprintf("Policy(%d)", int(p))
}

// Retry is the back-off between attempts (cenkalti/backoff's exponential
// policy, randomized by ±RandomizationFactor).
type Retry struct {
	InitialInterval     time.Duration
	MaxInterval         time.Duration
	Multiplier          float64
	RandomizationFactor float64
	// MaxRetries is how often a failed handling is tried again before the
	// policy decides; 0 means the policy decides at the first failure.
	// Transient errors (see Transient) are retried without limit.
	MaxRetries int
}

// Settings tune a projection; zero fields take DefaultSettings' values.
type Settings struct {
	// LeaseTTL is how long the instance's lease lasts without renewal; it
	// is renewed every LeaseTTL/3. A holder cut off from the store longer
	// than this can lose the instance to another (and is then fenced).
	LeaseTTL time.Duration
	// SaveEvery and SaveInterval are the at-least-once offset cadence: the
	// offset is saved once SaveEvery events were handled since the last
	// save, or SaveInterval after the first of them, whichever comes first
	// (and when Run stops or pauses). Exactly-once handlers save with
	// every transaction and ignore them.
	SaveEvery    int
	SaveInterval time.Duration
	// Retry spaces the attempts of a failing handler, and of reads and
	// writes of the source and the store that failed. A zero Retry takes
	// DefaultSettings' whole (set InitialInterval too to keep MaxRetries 0).
	Retry Retry
	// OnFailure is the policy for events that still fail after retries.
	OnFailure Policy
	// ReadAhead is how many stored events the reader buffers ahead of
	// the handler.
	ReadAhead int
	// StopAtEnd ends Run with nil once the events stored when it started
	// are handled (the query's Current mode), instead of following new
	// ones: for batch rebuilds and tests.
	StopAtEnd bool
	// Holder names this runner in the lease; default a random id. Two
	// runners must never share one.
	Holder string
	// Registerer receives the projection's metrics; nil for none.
	Registerer prometheus.Registerer
}

// DefaultSettings returns the defaults.
func DefaultSettings() Settings {
	return Settings{
		LeaseTTL:     10 * time.Second,
		SaveEvery:    100,
		SaveInterval: time.Second,
		Retry: Retry{
			InitialInterval: 100 * time.Millisecond, MaxInterval: 10 * time.Second,
			Multiplier: 2, RandomizationFactor: 0.2, MaxRetries: 3,
		},
		OnFailure: StopOnFailure,
		ReadAhead: 256,
	}
}

// withDefaults fills zero fields and checks the rest.
func (s Settings) withDefaults() (Settings, error) {
	d := DefaultSettings()
	if s.LeaseTTL == 0 {
		s.LeaseTTL = d.LeaseTTL
	}
	if s.SaveEvery == 0 {
		s.SaveEvery = d.SaveEvery
	}
	if s.SaveInterval == 0 {
		s.SaveInterval = d.SaveInterval
	}
	if s.Retry == (Retry{}) {
		s.Retry = d.Retry
	}
	if s.Retry.InitialInterval == 0 {
		s.Retry.InitialInterval = d.Retry.InitialInterval
	}
	if s.Retry.MaxInterval == 0 {
		s.Retry.MaxInterval = d.Retry.MaxInterval
	}
	if s.Retry.Multiplier == 0 {
		s.Retry.Multiplier = d.Retry.Multiplier
	}
	if s.ReadAhead == 0 {
		s.ReadAhead = d.ReadAhead
	}
	switch {
	case s.LeaseTTL < 0, s.SaveInterval < 0, s.SaveEvery < 0, s.ReadAhead < 0:
		return s, fmt.Errorf("%w: negative setting in %+v", ErrInvalidConfig, s)
	case s.Retry.InitialInterval < 0 || s.Retry.MaxInterval < s.Retry.InitialInterval || s.Retry.Multiplier < 1 ||
		s.Retry.RandomizationFactor < 0 || s.Retry.RandomizationFactor >= 1 || s.Retry.MaxRetries < 0:
		return s, fmt.Errorf("%w: retry %+v", ErrInvalidConfig, s.Retry)
	case s.OnFailure < StopOnFailure || s.OnFailure > DeadLetterOnFailure:
		return s, fmt.Errorf("%w: policy %v", ErrInvalidConfig, s.OnFailure)
	}
	return s, nil
}
