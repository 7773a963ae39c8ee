// Package metricstest reads metrics back from a Prometheus registry in tests.
package metricstest

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Value sums the series of metric name whose labels include labels: their
// counter or gauge values, or their histograms' observation counts. It is
// 0 when no such series exists (a counter never incremented).
func Value(t testing.TB, g prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	total := 0.0
	for _, m := range find(t, g, name, labels) {
		switch {
		case m.Counter != nil:
			total += m.Counter.GetValue()
		case m.Gauge != nil:
			total += m.Gauge.GetValue()
		case m.Histogram != nil:
			total += float64(m.Histogram.GetSampleCount())
		default:
			t.Fatalf("metric %s%v has no counter, gauge or histogram", name, labels)
		}
	}
	return total
}

// HistogramSum sums the observations of the histograms of metric name
// whose labels include labels.
func HistogramSum(t testing.TB, g prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	ms := find(t, g, name, labels)
	if len(ms) == 0 {
		t.Fatalf("no histogram %s%v", name, labels)
	}
	total := 0.0
	for _, m := range ms {
		if m.Histogram == nil {
			t.Fatalf("%s%v is not a histogram", name, labels)
		}
		total += m.Histogram.GetSampleSum()
	}
	return total
}

func find(t testing.TB, g prometheus.Gatherer, name string, labels map[string]string) []*dto.Metric {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	var out []*dto.Metric
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if matches(m, labels) {
				out = append(out, m)
			}
		}
	}
	return out
}

func matches(m *dto.Metric, want map[string]string) bool {
	found := 0
	for _, l := range m.GetLabel() {
		if v, ok := want[l.GetName()]; ok {
			if v != l.GetValue() {
				return false
			}
			found++
		}
	}
	return found == len(want)
}
