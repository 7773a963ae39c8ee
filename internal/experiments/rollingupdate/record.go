// Package rollingupdate reproduces the rolling-update experiment of the
// coordinator-avoidance proposal (lerna-stack's, "Experiments"): a 4-node
// cluster under a steady load of asks is replaced node by node (start
// new-i, stop old-i, the oldest last), once per allocation strategy, and
// every request's latency is recorded with the cluster events, so that the
// latency of each stop window can be compared.
//
// The package holds the pure parts: the recording (Recorder), the window
// statistics (Windows) and the plot (WritePNG). The run itself is a test
// behind SHOAL_EXPERIMENT=1 (experiment_test.go); scripts/
// rolling-update-experiment.sh runs it end to end.
package rollingupdate

import (
	"math"
	"slices"
	"sync"
	"time"
)

// Sample is one request: when it was sent (since the start of the run),
// how long it took to be answered or to fail, whether it failed, and the
// entity it was for.
type Sample struct {
	At      time.Duration
	Latency time.Duration
	Failed  bool
	Entity  string
}

// Event is something the run did to the cluster, at At since its start.
// Stop marks the start of a graceful stop of a node: Windows measures from
// there to the next event that is not a Note. A Note (say, "a stop
// finished") is drawn on the plot but ends no window.
type Event struct {
	At    time.Duration
	Label string
	Stop  bool
	Note  bool
}

// Recorder collects samples and events from many goroutines, with times
// relative to its start.
type Recorder struct {
	start time.Time

	mu      sync.Mutex
	samples []Sample
	events  []Event
}

// NewRecorder returns a recorder whose times count from start.
func NewRecorder(start time.Time) *Recorder { return &Recorder{start: start} }

// Start is when the recording began.
func (r *Recorder) Start() time.Time { return r.start }

// Since is t relative to the recorder's start.
func (r *Recorder) Since(t time.Time) time.Duration { return t.Sub(r.start) }

// Request records a request to entity sent at sent that ended at ended.
func (r *Recorder) Request(entity string, sent, ended time.Time, failed bool) {
	s := Sample{At: r.Since(sent), Latency: ended.Sub(sent), Failed: failed, Entity: entity}
	r.mu.Lock()
	r.samples = append(r.samples, s)
	r.mu.Unlock()
}

// Event records e, happening at t.
func (r *Recorder) Event(t time.Time, e Event) {
	e.At = r.Since(t)
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

// Results returns copies of the samples (by send time) and the events
// (by time).
func (r *Recorder) Results() ([]Sample, []Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, e := slices.Clone(r.samples), slices.Clone(r.events)
	slices.SortStableFunc(s, func(a, b Sample) int { return compareDur(a.At, b.At) })
	slices.SortStableFunc(e, func(a, b Event) int { return compareDur(a.At, b.At) })
	return s, e
}

func compareDur(a, b time.Duration) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Stats summarises the requests sent within a window [From, To).
type Stats struct {
	Label    string
	From, To time.Duration
	Requests int
	Failed   int
	Max, P99 time.Duration
	P50      time.Duration
}

// Window computes the statistics of the samples sent in [from, to).
// Latencies of failed requests count too: a request that timed out was
// as slow as its timeout.
func Window(label string, samples []Sample, from, to time.Duration) Stats {
	return WindowWhere(label, samples, from, to, nil)
}

// WindowWhere is Window over the samples keep accepts (all when keep is
// nil): say, the requests to the shards a stopping node hosted.
func WindowWhere(label string, samples []Sample, from, to time.Duration, keep func(Sample) bool) Stats {
	st := Stats{Label: label, From: from, To: to}
	var lat []time.Duration
	for _, s := range samples {
		if s.At < from || s.At >= to || (keep != nil && !keep(s)) {
			continue
		}
		lat = append(lat, s.Latency)
		if s.Failed {
			st.Failed++
		}
	}
	st.Requests = len(lat)
	if len(lat) == 0 {
		return st
	}
	slices.Sort(lat)
	st.Max = lat[len(lat)-1]
	st.P99 = Percentile(lat, 0.99)
	st.P50 = Percentile(lat, 0.50)
	return st
}

// Percentile is the nearest-rank p-quantile (0 < p <= 1) of sorted: the
// smallest value with at least p of the values at or below it. Zero for
// an empty slice.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[min(max(rank, 0), len(sorted)-1)]
}

// Windows returns the statistics of the steady state before the first
// event that is not a Note ("before"), and of each stop window: from a
// Stop event to the next event that is not a Note, or to end for the
// last one. events must be sorted by time (as Results returns them).
func Windows(samples []Sample, events []Event, end time.Duration) []Stats {
	actions := slices.DeleteFunc(slices.Clone(events), func(e Event) bool { return e.Note })
	first := end
	if len(actions) > 0 {
		first = actions[0].At
	}
	out := []Stats{Window("before", samples, 0, first)}
	for i, e := range actions {
		if !e.Stop {
			continue
		}
		to := end
		if i+1 < len(actions) {
			to = actions[i+1].At
		}
		out = append(out, Window(e.Label, samples, e.At, to))
	}
	return out
}
