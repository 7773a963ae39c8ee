package lease_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/shoal-dev/shoal/cluster/lease"
	"github.com/shoal-dev/shoal/internal/metrics/metricstest"
)

// Renewals are counted by outcome; the lag of a renewal that needed two
// retries is the time from when it was due to its success; a refusal
// counts once.
func TestMetricsRenewalsAndLag(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewRegistry()
		mem := lease.NewMemoryStore(nil)
		store := &flakyStore{Store: mem}
		var f fenceRecorder
		h, err := lease.HoldNode(context.Background(), store, node, timing, f.fence, lease.WithMetrics(reg, "node"))
		if err != nil {
			t.Fatal(err)
		}
		defer h.Stop()
		renewals := func(result string) float64 {
			return metricstest.Value(t, reg, "shoal_lease_renewals_total", map[string]string{"lease": "node", "result": result})
		}
		lag := map[string]string{"lease": "node"}
		time.Sleep(5*time.Second + time.Millisecond) // renewed on time at 5 s
		synctest.Wait()
		store.down.Store(true)
		time.Sleep(6500 * time.Millisecond) // due at 10 s: fails then and at 11.25 s
		synctest.Wait()
		if ok, failed := renewals("ok"), renewals("failed"); ok != 1 || failed != 2 {
			t.Fatalf("renewals ok %v, failed %v, want 1 and 2", ok, failed)
		}
		store.down.Store(false)
		time.Sleep(time.Second) // the retry at 12.5 s succeeds, 2.5 s after it was due
		synctest.Wait()
		if ok := renewals("ok"); ok != 2 {
			t.Fatalf("renewals ok %v, want 2", ok)
		}
		if n, sum := metricstest.Value(t, reg, "shoal_lease_renewal_lag_seconds", lag), metricstest.HistogramSum(t, reg, "shoal_lease_renewal_lag_seconds", lag); n != 2 || sum != 2.5 {
			t.Fatalf("renewal lag: %v observations summing to %v s, want 2 summing to 2.5", n, sum)
		}
		if err := mem.DownNode(context.Background(), node); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if refused := renewals("refused"); refused != 1 {
			t.Fatalf("refused renewals %v, want 1", refused)
		}
	})
}
