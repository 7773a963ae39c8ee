package sharding_test

import (
	"context"
	"github.com/shoal-dev/shoal/cluster"
	"maps"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shoal-dev/shoal/sharding"
)

func TestRegionStateAndStats(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, sharding.Settings{ShardID: func(id string) string { return id[:1] }})
		n := s.join("a", "host")
		for _, id := range []string{"x2", "x1", "y1"} {
			n.tell(t, id, note{Text: "hi"})
		}
		synctest.Wait()
		st := n.region.State()
		if want := map[string][]string{"x": {"x1", "x2"}, "y": {"y1"}}; !maps.EqualFunc(st.Shards, want, slices.Equal) {
			t.Fatalf("State %v, want %v", st.Shards, want)
		}
		if got, want := n.region.Stats(), map[string]int{"x": 2, "y": 1}; !maps.Equal(got, want) {
			t.Fatalf("Stats %v, want %v", got, want)
		}
		if got, want := sharding.HomesOf(n.region), map[string]cluster.UniqueAddress{"x": addr("a"), "y": addr("a")}; !maps.Equal(got, want) {
			t.Fatalf("Homes %v, want %v", got, want)
		}
		_ = n.sh.Shutdown(context.Background())
	})
}

func TestClusterStatsCountsEntitiesPerShardPerRegion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, sharding.Settings{NumberOfShards: 6})
		a := s.join("a", "host")
		b := s.join("b", "host")
		c := s.join("c", "host")
		proxy := s.join("p") // routes only: not asked
		synctest.Wait()
		ids := entityIDs(40)
		for _, id := range ids {
			proxy.tell(t, id, note{Text: "x"})
		}
		synctest.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		st := proxy.region.ClusterStats(ctx)
		if len(st.Failed) != 0 || len(st.Regions) != 3 {
			t.Fatalf("stats %+v", st)
		}
		total := 0
		for _, n := range []*node{a, b, c} {
			if got := st.Regions[addr(n.name)]; !maps.Equal(got, n.region.Stats()) {
				t.Fatalf("%s: cluster stats %v, region stats %v", n.name, got, n.region.Stats())
			}
			for _, count := range st.Regions[addr(n.name)] {
				total += count
			}
		}
		if total != len(ids) {
			t.Fatalf("%d entities counted, want %d", total, len(ids))
		}
		// A crashed member the membership still lists is reported, not waited for.
		c.sh.Terminate()
		st = a.region.ClusterStats(ctx)
		if !slices.Equal(st.Failed, addrs("c")) || len(st.Regions) != 2 {
			t.Fatalf("after c crashed: %+v", st)
		}
		proxy.sh.Terminate()
		b.sh.Terminate()
		a.sh.Terminate()
	})
}
