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
