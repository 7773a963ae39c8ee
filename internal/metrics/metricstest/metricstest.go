// Package metricstest reads metrics back from a Prometheus registry in tests.
package metricstest

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Value is the value of the metric name whose labels include labels: a
// counter's or gauge's value, or a histogram's observation count. It is 0
// when no such series exists (a counter never incremented).
func Value(t testing.TB, g prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	m := find(t, g, name, labels)
	switch {
	case m == nil:
		return 0
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	t.Fatalf("metric %s%v has no counter, gauge or histogram", name, labels)
	return 0
}

// HistogramSum is the sum of a histogram's observations.
func HistogramSum(t testing.TB, g prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	m := find(t, g, name, labels)
	if m == nil || m.Histogram == nil {
		t.Fatalf("no histogram %s%v", name, labels)
	}
	return m.Histogram.GetSampleSum()
}

func find(t testing.TB, g prometheus.Gatherer, name string, labels map[string]string) *dto.Metric {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if matches(m, labels) {
				return m
			}
		}
	}
	return nil
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
