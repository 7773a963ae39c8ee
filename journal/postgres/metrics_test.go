package postgres_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/shoal-dev/shoal/internal/metrics/metricstest"
	"github.com/shoal-dev/shoal/journal/postgres"
)

// One write of three events is one persist observation and one batch of
// three; reading them back is one replay observation.
func TestMetricsPersistReplayAndBatchSize(t *testing.T) {
	reg := prometheus.NewRegistry()
	j := newJournal(t, postgres.Config{Metrics: reg})
	mustWrite(t, j, evs("metrics-pid", 1, 3, "w"))
	if got := len(stored(t, j, "metrics-pid")); got != 3 {
		t.Fatalf("%d events stored, want 3", got)
	}
	for name, want := range map[string]float64{
		"shoal_journal_persist_duration_seconds": 1,
		"shoal_journal_batch_events":             1,
		"shoal_journal_replay_duration_seconds":  1,
	} {
		if got := metricstest.Value(t, reg, name, nil); got != want {
			t.Errorf("%s: %v observations, want %v", name, got, want)
		}
	}
	if sum := metricstest.HistogramSum(t, reg, "shoal_journal_batch_events", nil); sum != 3 {
		t.Errorf("batch events sum %v, want 3", sum)
	}
}
