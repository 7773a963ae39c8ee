package allocation

import (
	"errors"
	"fmt"
	"github.com/shoal-dev/shoal/cluster"
	"slices"
	"testing"
)

// The vectors of Akka's LeastShardAllocationStrategySpec (identical in
// Pekko): three Up regions A, B, C of the same version; shards 001, 002, …
// given out in order, the first aCount to A, the next bCount to B, then C.

func shardRange(from, to int) []string { // from..to inclusive, 3 digits
	var out []string
	for i := from; i <= to; i++ {
		out = append(out, fmt.Sprintf("%03d", i))
	}
	return out
}

func upRegion(id string) Region {
	return Region{ID: node(id), AppVersion: "1.0.0", Status: cluster.Up, Reachable: true}
}

// abcSim is Akka's createAllocations(aCount, bCount, cCount).
func abcSim(t *testing.T, s Strategy, limit func(int) int, a, b, c int) *sim {
	sm := newSim(t, s, limit)
	for _, id := range []string{"A", "B", "C"} {
		sm.upsert(upRegion(id))
	}
	sm.assign("A", shardRange(1, a)...)
	sm.assign("B", shardRange(a+1, a+b)...)
	sm.assign("C", shardRange(a+b+1, a+b+c)...)
	return sm
}

func leastLimit(cfg LeastShardConfig) func(int) int {
	return func(total int) int { return rebalanceLimit(cfg.AbsoluteLimit, cfg.RelativeLimit, total) }
}

// Akka's strategyWithoutLimits.
var noLimits = LeastShardConfig{AbsoluteLimit: 1000, RelativeLimit: 1.0}

func TestLeastShardAkkaVectors(t *testing.T) {
	type round struct {
		moved  []string // expected Rebalance result
		counts []int    // A, B, C after the moved shards are allocated again
	}
	tests := []struct {
		name    string
		cfg     LeastShardConfig
		a, b, c int
		rounds  []round
	}{
		{"[1,2,0]", noLimits, 1, 2, 0, []round{{[]string{"002"}, []int{1, 1, 1}}}},
		{"[2,0,0]", noLimits, 2, 0, 0, []round{{[]string{"001"}, []int{1, 1, 0}}}},
		{"[1,1,0] not rebalanced", noLimits, 1, 1, 0, []round{{nil, []int{1, 1, 0}}}},
		{"[3,0,0]", noLimits, 3, 0, 0, []round{{[]string{"001", "002"}, []int{1, 1, 1}}}},
		{"[4,4,0]", noLimits, 4, 4, 0, []round{{[]string{"001", "005"}, []int{3, 3, 2}}}},
		{"[4,4,2] phase 2", noLimits, 4, 4, 2, []round{{[]string{"001"}, []int{3, 4, 3}}}},
		{"[5,5,0] phase 1 then phase 2", noLimits, 5, 5, 0, []round{
			{[]string{"001", "006"}, []int{4, 4, 2}},
			{[]string{"002"}, []int{3, 4, 3}},
		}},
		// Akka's spec: A=50, C=50, B empty; it compares sorted counts
		// [34,34,32] then [33,34,33]; the per-region counts are exact here.
		{"[50,0,50] as in Akka's spec", noLimits, 50, 0, 50, []round{
			{append(shardRange(1, 16), shardRange(51, 66)...), []int{34, 32, 34}},
			{[]string{"017"}, []int{33, 33, 34}},
		}},
		// The same with the empty region third.
		{"[50,50,0]", noLimits, 50, 50, 0, []round{
			{append(shardRange(1, 16), shardRange(51, 66)...), []int{34, 34, 32}},
			{[]string{"017"}, []int{33, 34, 33}},
		}},
		{"absolute limit", LeastShardConfig{AbsoluteLimit: 3, RelativeLimit: 1.0}, 1, 9, 0, []round{
			{[]string{"002", "003", "004"}, []int{2, 6, 2}},
		}},
		{"relative limit", LeastShardConfig{AbsoluteLimit: 5, RelativeLimit: 0.3}, 1, 9, 0, []round{
			{[]string{"002", "003", "004"}, []int{2, 6, 2}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sm := abcSim(t, NewLeastShard(tt.cfg), leastLimit(tt.cfg), tt.a, tt.b, tt.c)
			for i, want := range tt.rounds {
				got := sm.round()
				if !slices.Equal(got, want.moved) {
					t.Fatalf("round %d: rebalance = %v, want %v", i+1, got, want.moved)
				}
				if !slices.Equal(sm.counts(), want.counts) {
					t.Fatalf("round %d: counts = %v, want %v", i+1, sm.counts(), want.counts)
				}
			}
		})
	}
}

func TestLeastShardAllocateToLeastShards(t *testing.T) {
	// Akka: "allocate to region with least number of shards".
	sm := abcSim(t, NewLeastShard(noLimits), nil, 1, 1, 0)
	got, err := NewLeastShard(noLimits).Allocate(node("A"), "003", sm.state())
	if err != nil || got != node("C") {
		t.Fatalf("Allocate = %q, %v; want C", got, err)
	}
}

func TestLeastShardNotWhileInProgress(t *testing.T) {
	sm := abcSim(t, NewLeastShard(noLimits), nil, 10, 0, 0)
	if got := NewLeastShard(noLimits).Rebalance(sm.state(), map[string]bool{"002": true, "003": true}); got != nil {
		t.Fatalf("Rebalance with rebalance in progress = %v, want nothing", got)
	}
	if got := NewLeastShard(noLimits).Rebalance(sm.state(), map[string]bool{}); len(got) == 0 {
		t.Fatalf("Rebalance with empty in-progress set = nothing, want shards")
	}
}

// Akka: "not rebalance when rolling update in progress", "… when regions are
// unreachable", "… when members are joining dc".
func TestLeastShardNotAGoodTimeToRebalance(t *testing.T) {
	tests := []struct {
		name   string
		change func(*Region)
	}{
		{"rolling update in progress", func(r *Region) { r.AppVersion = "1.0.1" }},
		{"region unreachable", func(r *Region) { r.Reachable = false }},
		{"region joining", func(r *Region) { r.Status = cluster.Joining }},
	}
	s := NewLeastShard(noLimits)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sm := abcSim(t, s, nil, 5, 5, 0)
			tt.change(sm.region("B"))
			for _, inProgress := range []map[string]bool{nil, {"001": true, "002": true}} {
				if got := s.Rebalance(sm.state(), inProgress); got != nil {
					t.Fatalf("Rebalance = %v, want nothing", got)
				}
			}
		})
	}
	// Versions compare numerically: "1.0" and "1.0.0" are the same version.
	sm := abcSim(t, s, nil, 5, 5, 0)
	sm.region("B").AppVersion = "1.0"
	if got := s.Rebalance(sm.state(), nil); len(got) == 0 {
		t.Fatalf("Rebalance with versions 1.0 and 1.0.0 = nothing, want shards")
	}
	// No regions, no shards.
	if got := s.Rebalance(State{}, nil); got != nil {
		t.Fatalf("Rebalance of empty state = %v", got)
	}
	sm = abcSim(t, s, nil, 0, 0, 0)
	if got := s.Rebalance(sm.state(), nil); got != nil {
		t.Fatalf("Rebalance without shards = %v", got)
	}
}

// Akka: "prefer least shards, latest version, non downed, leaving or exiting
// nodes". Allocating repeatedly while removing the winner yields the order.
func TestLeastShardSuitabilityOrder(t *testing.T) {
	es := []entry{
		{Region{ID: node("fewest"), AppVersion: "1.0.1", Status: cluster.Up, Reachable: true}, nil},
		{Region{ID: node("leaving"), AppVersion: "1.0.0", Status: cluster.Leaving, Reachable: true}, nil},
		{Region{ID: node("most"), AppVersion: "1.0.1", Status: cluster.Up, Reachable: true}, []string{"ShardId2", "ShardId3"}},
		{Region{ID: node("oldapp"), AppVersion: "1.0.0", Status: cluster.Up, Reachable: true}, nil},
		{Region{ID: node("oneshard"), AppVersion: "1.0.1", Status: cluster.Up, Reachable: true}, []string{"ShardId1"}},
	}
	slices.SortFunc(es, compareSuitability)
	var order []string
	for _, e := range es {
		order = append(order, e.ID.Node)
	}
	want := []string{"fewest", "oneshard", "most", "oldapp", "leaving"}
	if !slices.Equal(order, want) {
		t.Fatalf("suitability order = %v, want %v", order, want)
	}

	// Through Allocate: the winner is removed each time; leaving never wins.
	st := State{Shards: map[cluster.UniqueAddress][]string{}}
	for _, e := range es {
		st.Regions = append(st.Regions, e.Region)
		st.Shards[e.ID] = e.shards
	}
	s := NewLeastShard(DefaultLeastShardConfig())
	var got []string
	for {
		r, err := s.Allocate(node("oldapp"), "x", st)
		if err != nil {
			if !errors.Is(err, ErrNoRegion) {
				t.Fatalf("Allocate: %v", err)
			}
			break
		}
		got = append(got, r.Node)
		st.Regions = slices.DeleteFunc(st.Regions, func(x Region) bool { return x.ID == r })
	}
	if !slices.Equal(got, want[:4]) {
		t.Fatalf("allocation order = %v, want %v", got, want[:4])
	}
}

func TestLeastShardAllocateSkipsUnavailable(t *testing.T) {
	s := NewLeastShard(DefaultLeastShardConfig())
	st := State{
		Regions: []Region{
			{ID: node("leaving"), Status: cluster.Leaving, Reachable: true, AppVersion: "9"},
			{ID: node("exiting"), Status: cluster.Leaving, Reachable: true, AppVersion: "9"},
			{ID: node("down"), Status: cluster.Down, Reachable: false, AppVersion: "9"},
			{ID: node("unreachable"), Status: cluster.Up, Reachable: false, AppVersion: "9"},
			{ID: node("busy"), Status: cluster.Up, Reachable: true, AppVersion: "1"},
			{ID: node("joining"), Status: cluster.Joining, Reachable: true, AppVersion: "1"},
		},
		Shards: map[cluster.UniqueAddress][]string{node("busy"): {"1", "2"}},
	}
	if got, err := s.Allocate(node("busy"), "3", st); err != nil || got != node("joining") {
		t.Fatalf("Allocate = %q, %v; want joining", got, err)
	}
	st.Regions = st.Regions[:4]
	if got, err := s.Allocate(node("leaving"), "3", st); !errors.Is(err, ErrNoRegion) {
		t.Fatalf("Allocate = %q, %v; want ErrNoRegion", got, err)
	}
	if _, err := s.Allocate(node("x"), "3", State{}); !errors.Is(err, ErrNoRegion) {
		t.Fatalf("Allocate without regions: %v, want ErrNoRegion", err)
	}
	// Shards of a region that is not registered are ignored.
	st = State{Regions: []Region{upRegion("A"), upRegion("B")}, Shards: map[cluster.UniqueAddress][]string{node("ghost"): {"1", "2", "3"}, node("A"): {"4"}}}
	if got, _ := s.Allocate(node("A"), "5", st); got != node("B") {
		t.Fatalf("Allocate = %q, want B", got)
	}
}

func TestLeastShardPrefersNewestVersion(t *testing.T) {
	s := NewLeastShard(DefaultLeastShardConfig())
	st := State{
		Regions: []Region{
			{ID: node("old"), AppVersion: "1.9.2", Status: cluster.Up, Reachable: true},
			{ID: node("new"), AppVersion: "1.10.0", Status: cluster.Up, Reachable: true},
		},
		Shards: map[cluster.UniqueAddress][]string{node("new"): shardRange(1, 100)},
	}
	if got, _ := s.Allocate(node("old"), "x", st); got != node("new") {
		t.Fatalf("Allocate = %q, want new (highest version wins over fewest shards)", got)
	}
}

func TestLeastShardTieBreakIsAgeThenID(t *testing.T) {
	s := NewLeastShard(DefaultLeastShardConfig())
	st := State{Regions: []Region{
		{ID: node("a"), JoinOrder: 3, Status: cluster.Up, Reachable: true},
		{ID: node("c"), JoinOrder: 1, Status: cluster.Up, Reachable: true},
		{ID: node("b"), JoinOrder: 1, Status: cluster.Up, Reachable: true},
	}}
	if got, _ := s.Allocate(node("a"), "x", st); got != node("b") {
		t.Fatalf("Allocate = %q, want b (oldest, then lowest ID)", got)
	}
}

func TestRebalanceLimit(t *testing.T) {
	tests := []struct {
		abs   int
		rel   float64
		total int
		want  int
	}{
		{1000, 1.0, 10, 10},
		{3, 1.0, 10, 3},
		{5, 0.3, 10, 3}, // 0.3*10 = 3.0000000000000004 → 3, as in Akka
		{30, 0.1, 300, 30},
		{30, 0.1, 1000, 30},
		{0, 0.1, 1000, 100}, // 0: no absolute limit
		{0, 0.1, 5, 1},      // at least one
		{10, 0, 100, 1},
		{-1, 2.0, 7, 14},
	}
	for _, tt := range tests {
		if got := rebalanceLimit(tt.abs, tt.rel, tt.total); got != tt.want {
			t.Errorf("rebalanceLimit(%d, %g, %d) = %d, want %d", tt.abs, tt.rel, tt.total, got, tt.want)
		}
	}
	if c := DefaultLeastShardConfig(); c.AbsoluteLimit != 0 || c.RelativeLimit != 0.1 {
		t.Errorf("DefaultLeastShardConfig() = %+v", c)
	}
}
