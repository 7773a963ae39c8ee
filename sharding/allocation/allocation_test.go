package allocation

import (
	"errors"
	"fmt"
	"github.com/shoal-dev/shoal/cluster"
	"testing"
)

func TestCompareVersions(t *testing.T) {
	tests := []struct {
		a, b string
		want int
	}{
		{"1.10.0", "1.9.2", 1},
		{"1.9.2", "1.10.0", -1},
		{"1.2", "1.2.0", 0},
		{"1.0.0", "1.0.0", 0},
		{"", "0", -1},
		{"", "", 0},
		{"0.0.1", "", 1},
		{"2.0.0-RC1", "2.0.0", -1},
		{"2.0.0-RC2", "2.0.0-RC1", 1},
		{"2.0.0-RC1", "1.9.9", 1},
		{"1.0.x", "1.0.1", 1},
		{" 1.0 ", "1.0", 0},
		{"10", "9.99.99", 1},
	}
	for _, tt := range tests {
		if got := CompareVersions(tt.a, tt.b); got != tt.want {
			t.Errorf("CompareVersions(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
		if got := CompareVersions(tt.b, tt.a); got != -tt.want {
			t.Errorf("CompareVersions(%q, %q) = %d, want %d", tt.b, tt.a, got, -tt.want)
		}
	}
}

func TestErrNoRegionIsWrapped(t *testing.T) {
	for _, s := range []Strategy{NewLeastShard(DefaultLeastShardConfig()), NewCoordinatorAvoidance(DefaultCoordinatorAvoidanceConfig())} {
		_, err := s.Allocate(node("r1"), "shard-7", State{Regions: []Region{{ID: node("r1"), Status: cluster.Down}}})
		if !errors.Is(err, ErrNoRegion) {
			t.Fatalf("%v: Allocate error %v, want ErrNoRegion", s, err)
		}
		t.Logf("%v: %v", s, err)
	}
}

// Strategies must not modify their input.
func TestStrategiesDoNotModifyState(t *testing.T) {
	mk := func() State {
		return State{
			Regions: []Region{{ID: node("b"), JoinOrder: 2, Status: cluster.Up, Reachable: true}, {ID: node("a"), JoinOrder: 1, Status: cluster.Up, Reachable: true}, {ID: node("c"), JoinOrder: 3, Status: cluster.Up, Reachable: true}},
			Shards:  map[cluster.UniqueAddress][]string{node("a"): shardRange(1, 9), node("b"): shardRange(10, 11)},
		}
	}
	for _, s := range []Strategy{NewLeastShard(noLimits), NewCoordinatorAvoidance(CoordinatorAvoidanceConfig{OldestExcluded: 1, RelativeLimit: 1})} {
		st := mk()
		if _, err := s.Allocate(node("a"), "x", st); err != nil {
			t.Fatal(err)
		}
		s.Rebalance(st, nil)
		if fmt.Sprint(st) != fmt.Sprint(mk()) {
			t.Fatalf("%v modified its input: %v", s, st)
		}
	}
}
