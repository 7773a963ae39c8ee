package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Lease renewal results.
const (
	RenewalOK      = "ok"      // the store extended the lease
	RenewalFailed  = "failed"  // the store could not be asked; retried
	RenewalRefused = "refused" // the store refused: the holder fences
)

// Lease holds the collectors of one kept lease (node or coordinator). A
// nil *Lease is off.
type Lease struct {
	ok, failed, refused prometheus.Counter
	lag, duration       prometheus.Observer
}

// NewLease registers the renewal collectors of the lease kind (a bounded
// name: "node", "coordinator") on reg; nil when reg is nil.
func NewLease(reg prometheus.Registerer, kind string) *Lease {
	if reg == nil {
		return nil
	}
	renewals := register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Subsystem: "lease", Name: "renewals_total",
		Help: "Lease renewals by outcome: ok, failed (retried) or refused (fenced).",
	}, []string{"lease", "result"}))
	lag := register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: Namespace, Subsystem: "lease", Name: "renewal_lag_seconds",
		Help:    "Time from when a renewal was due to when it succeeded: retries and round trips; near the lease's slack means near fencing.",
		Buckets: latencyBuckets,
	}, []string{"lease"}))
	duration := register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: Namespace, Subsystem: "lease", Name: "renewal_duration_seconds",
		Help:    "Round trip of each lease renewal call, whatever its outcome: a renewal slower than the lease's margin fences its holder.",
		Buckets: latencyBuckets,
	}, []string{"lease"}))
	return &Lease{
		ok: renewals.WithLabelValues(kind, RenewalOK), failed: renewals.WithLabelValues(kind, RenewalFailed),
		refused: renewals.WithLabelValues(kind, RenewalRefused), lag: lag.WithLabelValues(kind),
		duration: duration.WithLabelValues(kind),
	}
}

// RenewalTook records the round trip of one renewal call, whatever its
// outcome.
func (l *Lease) RenewalTook(d time.Duration) {
	if l != nil {
		l.duration.Observe(seconds(max(d, 0)))
	}
}

// Renewed records a successful renewal, lag after it was due.
func (l *Lease) Renewed(lag time.Duration) {
	if l != nil {
		l.ok.Inc()
		l.lag.Observe(seconds(max(lag, 0)))
	}
}

// Failed counts a renewal the store did not answer.
func (l *Lease) Failed() {
	if l != nil {
		l.failed.Inc()
	}
}

// Refused counts a renewal the store refused.
func (l *Lease) Refused() {
	if l != nil {
		l.refused.Inc()
	}
}
