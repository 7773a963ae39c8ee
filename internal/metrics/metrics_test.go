package metrics_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/shoal-dev/shoal/internal/metrics"
	"github.com/shoal-dev/shoal/internal/metrics/metricstest"
)

// A nil Registerer gives nil handles whose methods do nothing and allocate nothing.
func TestNilRegistererIsANoOp(t *testing.T) {
	e := metrics.NewEntity(nil)
	s := metrics.NewSharding(nil, nil)
	j := metrics.NewJournal(nil)
	l := metrics.NewLease(nil, "node")
	tr := metrics.NewTransport(nil, nil)
	if e != nil || s != nil || j != nil || l != nil || tr != nil {
		t.Fatal("a nil Registerer built collectors")
	}
	allocs := testing.AllocsPerRun(100, func() {
		et, st, p := e.Type("x"), s.Type("x"), tr.Peer("p")
		et.Delivered(et.Stripe(), 1)
		et.DeadLetter()
		et.Queued(1)
		et.Asked(time.Second)
		st.Passivated()
		st.Restarted()
		st.BackedOff()
		st.HandedOff(time.Second)
		st.Rebalanced(1)
		j.Persisted(time.Second)
		j.Replayed(time.Second)
		j.Batch(3)
		l.Renewed(time.Second)
		l.Failed()
		l.Refused()
		p.Sent(1, 10)
		p.Received(1, 10)
	})
	if allocs != 0 {
		t.Fatalf("the no-op path allocates %v times", allocs)
	}
}

// Two runtimes on one registry and node label count into the same series
// instead of failing to register. (Their scrape-time collectors cannot
// both register: only the newer runtime's depths and delivered counts are
// reported, see TestRestartedRuntimeIsScraped; give each runtime its node
// label.)
func TestSecondRegistrationSharesTheCollectors(t *testing.T) {
	reg := prometheus.NewRegistry()
	a, b := metrics.NewEntity(reg), metrics.NewEntity(reg)
	a.Type("t").DeadLetter()
	b.Type("t").DeadLetter()
	if got := metricstest.Value(t, reg, "shoal_entity_dead_letters_total", map[string]string{"type": "t"}); got != 2 {
		t.Fatalf("dead letters %v, want 2, one from each", got)
	}
}

// WithNode labels every series registered through it.
func TestWithNodeLabels(t *testing.T) {
	reg := prometheus.NewRegistry()
	metrics.NewJournal(metrics.WithNode(reg, "n1")).Batch(4)
	if got := metricstest.Value(t, reg, "shoal_journal_batch_events", map[string]string{"node": "n1"}); got != 1 {
		t.Fatalf("%v batches labelled node n1, want 1", got)
	}
	if metrics.WithNode(nil, "n1") != nil {
		t.Fatal("WithNode(nil) is not nil")
	}
}

// A runtime started again in the process on the same registry and node
// label (a node restarted in place) is the one whose scrape-time gauges
// are reported, not the stopped one's frozen state.
func TestRestartedRuntimeIsScraped(t *testing.T) {
	reg := prometheus.NewRegistry()
	node := metrics.WithNode(reg, "n1")
	start := func(depth, buffered, queued int) {
		e := metrics.NewEntity(node)
		e.Type("t").Queued(depth)
		metrics.NewSharding(node, func() []metrics.RegionReport {
			return []metrics.RegionReport{{Type: "t", Buffered: buffered, Shards: map[string]int{"s": buffered}}}
		})
		metrics.NewTransport(node, func() map[string]int { return map[string]int{"peer": queued} })
	}
	start(3, 30, 300) // the first runtime, stopped without a word to the registry
	start(5, 50, 500) // its successor
	labels := map[string]string{"node": "n1"}
	for name, want := range map[string]float64{
		"shoal_entity_mailbox_depth":         5,
		"shoal_sharding_region_buffer_depth": 50,
		"shoal_sharding_active_entities":     50,
		"shoal_transport_queue_depth":        500,
	} {
		if got := metricstest.Value(t, reg, name, labels); got != want {
			t.Errorf("%s = %v after the restart, want %v (the new runtime's)", name, got, want)
		}
	}
}

// What belongs to no entity type is not reported as a type "none": its
// dead letters go to their own counter, and no mailbox, delivered or
// dead-letter series of type="none" exists.
func TestNoEntityTypeIsNotATypeNoneSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	e := metrics.NewEntity(reg)
	e.Type("real").DeadLetter()
	none := e.Type(metrics.NoEntityType)
	none.DeadLetter()
	none.DeadLetter()
	if got := metricstest.Value(t, reg, "shoal_entity_untyped_dead_letters_total", nil); got != 2 {
		t.Fatalf("untyped dead letters %v, want 2", got)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "type" && l.GetValue() == metrics.NoEntityType {
					t.Errorf("%s has a type=%q series", f.GetName(), metrics.NoEntityType)
				}
			}
		}
	}
	// An ask of a plain ref still has its latency, once there is one.
	none.Asked(time.Millisecond)
	if got := metricstest.HistogramSum(t, reg, "shoal_entity_ask_duration_seconds", map[string]string{"type": metrics.NoEntityType}); got != 0.001 {
		t.Fatalf("untyped asks took %v s in all, want 0.001", got)
	}
}
