package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Projection handler failure outcomes.
const (
	ProjectionRetried      = "retried"       // tried again after back-off
	ProjectionSkipped      = "skipped"       // the skip policy moved past it
	ProjectionDeadLettered = "dead_lettered" // stored as a dead letter and moved past
	ProjectionStopped      = "stopped"       // the stop policy ended the run
)

// ProjectionReport is what a projection instance reports at scrape time.
type ProjectionReport struct {
	Running, Paused bool
	// LagSeconds is now minus the timestamp of the last event handled.
	LagSeconds float64
	// LagEvents is the events stored after the handled offset, exported
	// when LagEventsCounted (the source counts events).
	LagEvents        int64
	LagEventsCounted bool
	// LastEventUnix is that timestamp in Unix seconds; 0 before the first.
	LastEventUnix float64
}

// Projection holds the collectors of one projection instance. A nil
// *Projection is off.
type Projection struct {
	handled                                 prometheus.Counter
	retried, skipped, deadLettered, stopped prometheus.Counter
}

// NewProjection registers the collectors of the instance (its projection
// name and instance key, bounded: a projection has few instances) on reg;
// report is called at each scrape. nil when reg is nil.
func NewProjection(reg prometheus.Registerer, name, instance string, report func() ProjectionReport) *Projection {
	if reg == nil {
		return nil
	}
	handled := register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Subsystem: "projection", Name: "events_handled_total",
		Help: "Envelopes a projection instance handled (committed with its offset when exactly-once).",
	}, []string{"projection", "instance"}))
	failures := register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Subsystem: "projection", Name: "failures_total",
		Help: "Failed handlings (or decodings) of a projection instance, by outcome: retried, skipped, dead_lettered, stopped.",
	}, []string{"projection", "instance", "result"}))
	labels := prometheus.Labels{"projection": name, "instance": instance}
	desc := func(n, help string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(Namespace, "projection", n), help, nil, labels)
	}
	lag := desc("lag_seconds", "Now minus the write timestamp of the last event the instance handled; grows while the stream is idle, so read it with events_handled_total's rate.")
	last := desc("last_event_timestamp_seconds", "Write timestamp of the last event the instance handled, Unix seconds.")
	running := desc("running", "1 while the instance runs on this process (holds its lease).")
	paused := desc("paused", "1 while the instance is paused.")
	lagEvents := desc("lag_events", "Events of the instance's range stored after the offset it handled, counted at each lease renewal; only for sources that count events.")
	b := func(v bool) float64 {
		if v {
			return 1
		}
		return 0
	}
	registerScraped(reg, func(ch chan<- prometheus.Metric) {
		r := report()
		ch <- prometheus.MustNewConstMetric(running, prometheus.GaugeValue, b(r.Running))
		ch <- prometheus.MustNewConstMetric(paused, prometheus.GaugeValue, b(r.Paused))
		if r.LastEventUnix > 0 {
			ch <- prometheus.MustNewConstMetric(lag, prometheus.GaugeValue, r.LagSeconds)
			ch <- prometheus.MustNewConstMetric(last, prometheus.GaugeValue, r.LastEventUnix)
		}
		if r.LagEventsCounted {
			ch <- prometheus.MustNewConstMetric(lagEvents, prometheus.GaugeValue, float64(r.LagEvents))
		}
	}, lag, last, running, paused, lagEvents)
	return &Projection{
		handled:      handled.WithLabelValues(name, instance),
		retried:      failures.WithLabelValues(name, instance, ProjectionRetried),
		skipped:      failures.WithLabelValues(name, instance, ProjectionSkipped),
		deadLettered: failures.WithLabelValues(name, instance, ProjectionDeadLettered),
		stopped:      failures.WithLabelValues(name, instance, ProjectionStopped),
	}
}

// Handled counts n envelopes handled.
func (p *Projection) Handled(n int) {
	if p != nil {
		p.handled.Add(float64(n))
	}
}

// Failed counts a failure with its outcome (one of the Projection* results).
func (p *Projection) Failed(result string) {
	if p == nil {
		return
	}
	switch result {
	case ProjectionRetried:
		p.retried.Inc()
	case ProjectionSkipped:
		p.skipped.Inc()
	case ProjectionDeadLettered:
		p.deadLettered.Inc()
	case ProjectionStopped:
		p.stopped.Inc()
	}
}
