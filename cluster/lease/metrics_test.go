package lease_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"math"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/shoal-dev/shoal/cluster"
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

// slowStore answers every node renewal after delay (in the bubble's time),
// failing it while down is set.
type slowStore struct {
	lease.Store
	delay time.Duration
	down  atomic.Bool
}

func (s *slowStore) RenewNode(ctx context.Context, n cluster.UniqueAddress, ttl time.Duration) error {
	time.Sleep(s.delay)
	if s.down.Load() {
		return errOutage
	}
	return s.Store.RenewNode(ctx, n, ttl)
}

// Every renewal's round trip is observed, failed ones too.
func TestMetricsRenewalDuration(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewRegistry()
		store := &slowStore{Store: lease.NewMemoryStore(nil), delay: 300 * time.Millisecond}
		var f fenceRecorder
		h, err := lease.HoldNode(context.Background(), store, node, timing, f.fence, lease.WithMetrics(reg, "node"))
		if err != nil {
			t.Fatal(err)
		}
		defer h.Stop()
		time.Sleep(5*time.Second + 500*time.Millisecond) // renewed at 5 s, answered at 5.3 s
		synctest.Wait()
		store.down.Store(true)
		time.Sleep(5 * time.Second) // due at 10 s: fails at 10.3 s
		synctest.Wait()
		labels := map[string]string{"lease": "node"}
		n := metricstest.Value(t, reg, "shoal_lease_renewal_duration_seconds", labels)
		sum := metricstest.HistogramSum(t, reg, "shoal_lease_renewal_duration_seconds", labels)
		if n != 2 || math.Abs(sum-0.6) > 1e-9 {
			t.Fatalf("renewal durations: %v observations summing to %v s, want 2 summing to 0.6", n, sum)
		}
	})
}

// A store that stays unreachable is logged with each failure's error and
// duration, at most once per 5 s, the next line counting those left out.
func TestFailedRenewalsLoggedRateLimited(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf bytes.Buffer
		log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{
			ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
				if a.Key == slog.TimeKey {
					return slog.Attr{}
				}
				return a
			},
		}))
		store := &slowStore{Store: lease.NewMemoryStore(nil), delay: 100 * time.Millisecond}
		store.down.Store(true)
		var f fenceRecorder
		h, err := lease.HoldNode(context.Background(), store, node, timing, f.fence, lease.WithLogger(log, "node"))
		if err != nil {
			t.Fatal(err)
		}
		defer h.Stop()
		// Renewals fail from 5 s on, every 1.25 s, until the fence at 12 s:
		// 5, 6.35, 7.7, 9.05, 10.4, 11.75.
		time.Sleep(13 * time.Second)
		synctest.Wait()
		var lines []map[string]any
		for _, l := range bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n")) {
			var m map[string]any
			if err := json.Unmarshal(l, &m); err != nil {
				t.Fatalf("log line %q: %v", l, err)
			}
			lines = append(lines, m)
		}
		if len(lines) != 2 {
			t.Fatalf("logged %d lines, want 2 (at 5.1 s and 10.5 s):\n%s", len(lines), buf.String())
		}
		for i, want := range []float64{0, 3} {
			l := lines[i]
			if l["level"] != "WARN" || l["err"] != errOutage.Error() || l["lease"] != "node" ||
				l["took"] != float64(100*time.Millisecond) || l["not_logged"] != want {
				t.Errorf("line %d: %v; want WARN, lease node, err %q, took 100ms, not_logged %v", i, l, errOutage, want)
			}
		}
		if _, _, n := f.get(); n != 1 {
			t.Fatalf("fenced %d times, want 1", n)
		}
	})
}
