package allocation

import (
	"flag"
	"fmt"
	"github.com/shoal-dev/shoal/cluster"
	"math/rand/v2"
	"slices"
	"testing"
)

// The randomized property tests of Akka's
// LeastShardAllocationStrategyRandomizedSpec, plus the same properties for
// the coordinator-avoidance strategy. Seeds are fixed so that a failure
// reproduces; -seed=N runs with another one.
var seedFlag = flag.Uint64("seed", 1, "seed of the randomized allocation tests")

func newRand(t *testing.T, salt uint64) *rand.Rand {
	t.Logf("seed %d (run with -seed=%d to change)", *seedFlag, *seedFlag)
	return rand.New(rand.NewPCG(*seedFlag, salt))
}

// randomSim creates n Up regions R1…Rn (random ages) with a random number
// of shards each, in [0, maxShards).
func randomSim(t *testing.T, rnd *rand.Rand, s Strategy, limit func(int) int, n, maxShards int) *sim {
	sm := newSim(t, s, limit)
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("R%d", i)
		sm.upsert(Region{ID: node(id), JoinOrder: uint64(rnd.IntN(n)), AppVersion: "1.0.0", Status: cluster.Up, Reachable: true})
		for j := 1; j <= rnd.IntN(maxShards); j++ {
			sm.assign(id, fmt.Sprintf("%s-%03d", id, j))
		}
	}
	return sm
}

// assertOrderIndependent checks that shuffling the regions of a state does
// not change what the strategy decides.
func assertOrderIndependent(t *testing.T, rnd *rand.Rand, s Strategy, st State) {
	t.Helper()
	a1, e1 := s.Allocate(node(""), "new-shard", st)
	r1 := s.Rebalance(st, nil)
	shuffled := State{Regions: slices.Clone(st.Regions), Shards: st.Shards}
	rnd.Shuffle(len(shuffled.Regions), func(i, j int) {
		shuffled.Regions[i], shuffled.Regions[j] = shuffled.Regions[j], shuffled.Regions[i]
	})
	a2, e2 := s.Allocate(node(""), "new-shard", shuffled)
	r2 := s.Rebalance(shuffled, nil)
	if a1 != a2 || (e1 == nil) != (e2 == nil) || !slices.Equal(r1, r2) {
		t.Fatalf("decision depends on region order: allocate %q/%q, rebalance %v / %v", a1, a2, r1, r2)
	}
}

func spread(sm *sim, ids []string) int {
	lo, hi := -1, 0
	for _, id := range ids {
		n := len(sm.shards[id])
		if lo < 0 || n < lo {
			lo = n
		}
		hi = max(hi, n)
	}
	return hi - lo
}

func TestLeastShardRandomized(t *testing.T) {
	tests := []struct {
		maxRegions, maxShards, maxRounds int
		limits                           bool
		iterations                       int
	}{
		{5, 5, 2, false, 100},
		{5, 100, 2, false, 100},
		{20, 5, 2, false, 100},
		{20, 20, 2, false, 100},
		{20, 200, 5, false, 50},
		{100, 100, 5, false, 20},
		{100, 1000, 5, false, 5},
		{20, 20, 20, true, 100},
	}
	rnd := newRand(t, 1)
	for _, tt := range tests {
		name := fmt.Sprintf("%d regions, %d shards, limits %v", tt.maxRegions, tt.maxShards, tt.limits)
		t.Run(name, func(t *testing.T) {
			for range tt.iterations {
				cfg := LeastShardConfig{AbsoluteLimit: 100000, RelativeLimit: 1.0}
				if tt.limits {
					cfg = LeastShardConfig{AbsoluteLimit: 3 + rnd.IntN(7) + 3, RelativeLimit: 0.05 + rnd.Float64()*0.95}
				}
				s := NewLeastShard(cfg)
				sm := randomSim(t, rnd, s, leastLimit(cfg), rnd.IntN(tt.maxRegions)+1, tt.maxShards)
				assertOrderIndependent(t, rnd, s, sm.state())
				var ids []string
				for _, r := range sm.regions {
					ids = append(ids, r.ID.Node)
				}
				start := fmt.Sprint(sm.counts())
				for round := 1; spread(sm, ids) > 1; round++ {
					if round > tt.maxRounds {
						t.Fatalf("%v: not balanced after %d rounds (start %s): %v", cfg, tt.maxRounds, start, sm.counts())
					}
					sm.round() // checks the limit, the total and the result's form
				}
				if got := s.Rebalance(sm.state(), nil); got != nil {
					t.Fatalf("balanced %v but Rebalance still moves %v", sm.counts(), got)
				}
			}
		})
	}
}

func TestCoordinatorAvoidanceRandomized(t *testing.T) {
	rnd := newRand(t, 2)
	for range 300 {
		cfg := CoordinatorAvoidanceConfig{
			OldestExcluded:     rnd.IntN(4),
			MinAllocationNodes: 1 + rnd.IntN(3),
			AbsoluteLimit:      rnd.IntN(20), // 0: none
			RelativeLimit:      0.05 + rnd.Float64()*0.95,
		}
		s := NewCoordinatorAvoidance(cfg)
		limit := func(total int) int { return rebalanceLimit(cfg.AbsoluteLimit, cfg.RelativeLimit, total) }
		sm := randomSim(t, rnd, s, limit, rnd.IntN(12)+1, 1+rnd.IntN(60))
		sm.newShards(rnd.IntN(30)) // some shards without a home
		assertOrderIndependent(t, rnd, s, sm.state())
		targets := names(AllocationTargets(cfg, sm.state()))
		sm.settle(10000)
		isTarget := map[string]bool{}
		for _, id := range targets {
			isTarget[id] = true
		}
		for _, r := range sm.regions {
			if !isTarget[r.ID.Node] && len(sm.shards[r.ID.Node]) > 0 {
				t.Fatalf("%v: excluded region %s keeps %d shards: %s", cfg, r.ID, len(sm.shards[r.ID.Node]), sm.countsString())
			}
		}
		if spread(sm, targets) > 1 {
			t.Fatalf("%v: targets not balanced: %s", cfg, sm.countsString())
		}
		want := len(sm.regions) - min(cfg.OldestExcluded, max(0, len(sm.regions)-cfg.MinAllocationNodes))
		if len(targets) != want {
			t.Fatalf("%v: %d targets of %d regions, want %d", cfg, len(targets), len(sm.regions), want)
		}
	}
}
