package sharding_test

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/shoal-dev/shoal/internal/metrics/metricstest"
	"github.com/shoal-dev/shoal/sharding"
)

func metricsSim(t *testing.T, settings sharding.Settings) (*sim, *prometheus.Registry) {
	reg := prometheus.NewRegistry()
	s := newSim(t, settings)
	s.metrics = reg
	return s, reg
}

func typeLabels(node string) map[string]string {
	return map[string]string{"node": node, "type": "Test"}
}

// A passivation counts once; a crash counts one back-off, and the start
// after it one restart; entities per shard are read at scrape time.
func TestMetricsPassivationBackOffRestartAndActiveEntities(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, reg := metricsSim(t, sharding.Settings{})
		n := s.join("a", "host")
		value := func(name string) float64 { return metricstest.Value(t, reg, name, typeLabels("a")) }
		n.tell(t, "p", note{Text: "x"})
		n.tell(t, "p", passivate{})
		synctest.Wait()
		if got := value("shoal_entity_passivations_total"); got != 1 {
			t.Fatalf("passivations %v, want 1", got)
		}
		n.tell(t, "c", note{Text: "before"})
		n.tell(t, "c", crash{})
		synctest.Wait()
		n.tell(t, "c", note{Text: "during back-off"}) // waits for the restart
		if got, restarts := value("shoal_entity_backoffs_total"), value("shoal_entity_restarts_total"); got != 1 || restarts != 0 {
			t.Fatalf("back-offs %v, restarts %v during the back-off, want 1 and 0", got, restarts)
		}
		time.Sleep(time.Second) // the first back-off: 200 ms ± 50%
		synctest.Wait()
		if got := value("shoal_entity_restarts_total"); got != 1 {
			t.Fatalf("restarts %v after the back-off, want 1", got)
		}
		shard := n.region.ShardID("c")
		active := map[string]string{"node": "a", "type": "Test", "shard": shard}
		if got := metricstest.Value(t, reg, "shoal_sharding_active_entities", active); got != 1 {
			t.Fatalf("active entities of shard %s: %v, want 1 (c)", shard, got)
		}
		_ = n.sh.Shutdown(context.Background())
	})
}

// A hand-off counts once and records its duration: here the entity holds
// its stop message, so the hand-off timeout (60 s) ends it.
func TestMetricsHandOffDuration(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, reg := metricsSim(t, sharding.Settings{})
		n := s.join("a", "host")
		n.tell(t, "e", slowStop{})
		synctest.Wait()
		n.region.StopShards(n.region.ShardID("e"))
		synctest.Wait()
		if got := metricstest.Value(t, reg, "shoal_sharding_handoffs_total", typeLabels("a")); got != 0 {
			t.Fatalf("%v hand-offs finished while the entity holds its stop message", got)
		}
		time.Sleep(61 * time.Second)
		synctest.Wait()
		if got := metricstest.Value(t, reg, "shoal_sharding_handoffs_total", typeLabels("a")); got != 1 {
			t.Fatalf("hand-offs %v, want 1", got)
		}
		if n := metricstest.Value(t, reg, "shoal_sharding_handoff_duration_seconds", typeLabels("a")); n != 1 {
			t.Fatalf("%v hand-off duration observations, want 1", n)
		}
		if sum := metricstest.HistogramSum(t, reg, "shoal_sharding_handoff_duration_seconds", typeLabels("a")); sum != 60 {
			t.Fatalf("hand-off took %v s, want 60 (the hand-off timeout)", sum)
		}
		_ = n.sh.Shutdown(context.Background())
	})
}

// Messages for shards without a home wait in the region buffer, which the
// gauge reports.
func TestMetricsRegionBufferDepth(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, reg := metricsSim(t, sharding.Settings{MinMembers: 2})
		n := s.join("a", "host")
		for i := range 3 {
			n.tell(t, fmt.Sprint("e", i), note{Text: "x"})
		}
		if got := metricstest.Value(t, reg, "shoal_sharding_region_buffer_depth", typeLabels("a")); got != 3 {
			t.Fatalf("region buffer depth %v, want 3", got)
		}
		n.sh.Terminate()
	})
}

// Shards the coordinator moves to rebalance are counted on its node, one
// per shard, and each is handed off once by the node it leaves.
func TestMetricsRebalances(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, reg := metricsSim(t, sharding.Settings{NumberOfShards: 10})
		a := s.join("a", "host")
		for i := range 40 {
			a.tell(t, fmt.Sprint("e", i), note{Text: "x"})
		}
		synctest.Wait()
		b := s.join("b", "host")
		time.Sleep(25 * time.Second) // rebalance ticks every 10 s
		synctest.Wait()
		moved := metricstest.Value(t, reg, "shoal_sharding_rebalanced_shards_total", typeLabels("a"))
		if moved == 0 {
			t.Fatalf("no shard rebalanced to the new node; b hosts %v", b.region.Stats())
		}
		if handedOff := metricstest.Value(t, reg, "shoal_sharding_handoffs_total", typeLabels("a")); handedOff != moved {
			t.Fatalf("%v shards rebalanced, %v handed off by a", moved, handedOff)
		}
		if got := len(b.region.Stats()); float64(got) != moved {
			t.Fatalf("b hosts %d shards, %v moved", got, moved)
		}
		b.sh.Terminate()
		a.sh.Terminate()
	})
}

// The coordinator's lease renewals are counted, each with its lag: on a
// healthy store, renewals happen when due.
func TestMetricsCoordinatorLeaseRenewals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, reg := metricsSim(t, sharding.Settings{})
		n := s.join("a", "host")
		n.tell(t, "e", note{Text: "x"})
		time.Sleep(1600 * time.Millisecond) // renewals every 500 ms
		synctest.Wait()
		labels := map[string]string{"node": "a", "lease": "coordinator"}
		ok := metricstest.Value(t, reg, "shoal_lease_renewals_total", map[string]string{"node": "a", "lease": "coordinator", "result": "ok"})
		if ok != 3 {
			t.Fatalf("%v coordinator lease renewals in 1.6 s, want 3", ok)
		}
		if lags, sum := metricstest.Value(t, reg, "shoal_lease_renewal_lag_seconds", labels), metricstest.HistogramSum(t, reg, "shoal_lease_renewal_lag_seconds", labels); lags != ok || sum != 0 {
			t.Fatalf("%v lag observations summing to %v s, want %v summing to 0", lags, sum, ok)
		}
		n.sh.Terminate()
	})
}

// An operator's rebalance of one shard (the admin API's) counts as one
// rebalanced shard on the coordinator's node, as the strategy's do.
func TestMetricsCountAnOperatorsRebalance(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, reg := metricsSim(t, sharding.Settings{NumberOfShards: 4, RebalanceInterval: time.Hour})
		a := s.join("a", "host")
		a.tell(t, "e1", note{Text: "x"})
		synctest.Wait()
		b := s.join("b", "host")
		synctest.Wait()
		shard := a.region.ShardID("e1")
		before := metricstest.Value(t, reg, "shoal_sharding_rebalanced_shards_total", typeLabels("a"))
		if err := a.sh.RebalanceShard("Test", shard); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if got := metricstest.Value(t, reg, "shoal_sharding_rebalanced_shards_total", typeLabels("a")); got != before+1 {
			t.Fatalf("rebalanced shards %v after an operator's rebalance, want %v", got, before+1)
		}
		b.sh.Terminate()
		a.sh.Terminate()
	})
}
