package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Journal holds an event journal's collectors. A nil *Journal is off.
type Journal struct {
	persist, replay prometheus.Observer
	batchEvents     prometheus.Observer
}

// NewJournal registers an event journal's collectors on reg; nil when reg is nil.
func NewJournal(reg prometheus.Registerer) *Journal {
	if reg == nil {
		return nil
	}
	histogram := func(name, help string, buckets []float64) prometheus.Histogram {
		return register(reg, prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: Namespace, Subsystem: "journal", Name: name, Help: help, Buckets: buckets,
		}))
	}
	return &Journal{
		persist: histogram("persist_duration_seconds",
			"Time from a write (persisting events) to its outcome, waiting for a batch included.", latencyBuckets),
		replay: histogram("replay_duration_seconds",
			"Time a replay of one persistence id took, the caller's handling of the events included.", latencyBuckets),
		batchEvents: histogram("batch_events",
			"Events in one batch (one round trip) of the journal's writers.", prometheus.ExponentialBuckets(1, 2, 12)),
	}
}

// Persisted records a write's time from call to outcome.
func (j *Journal) Persisted(d time.Duration) {
	if j != nil {
		j.persist.Observe(seconds(d))
	}
}

// Replayed records a replay's duration.
func (j *Journal) Replayed(d time.Duration) {
	if j != nil {
		j.replay.Observe(seconds(d))
	}
}

// Batch records the events of one batch.
func (j *Journal) Batch(events int) {
	if j != nil {
		j.batchEvents.Observe(float64(events))
	}
}
