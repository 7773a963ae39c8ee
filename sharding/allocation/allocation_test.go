package allocation

import (
	"errors"
	"fmt"
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

func TestStatusString(t *testing.T) {
	want := map[Status]string{Up: "up", Joining: "joining", Leaving: "leaving", Exiting: "exiting", Down: "down", Status(9): "status(9)"}
	for s, w := range want {
		if s.String() != w {
			t.Errorf("%d.String() = %q, want %q", int(s), s.String(), w)
		}
	}
	var r Region
	if r.Status != Up {
		t.Errorf("zero Status = %v, want up", r.Status)
	}
}

func TestErrNoRegionIsWrapped(t *testing.T) {
	for _, s := range []Strategy{NewLeastShard(DefaultLeastShardConfig()), NewCoordinatorAvoidance(DefaultCoordinatorAvoidanceConfig())} {
		_, err := s.Allocate("r1", "shard-7", State{Regions: []Region{{ID: "r1", Status: Down}}})
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
			Regions: []Region{{ID: "b", JoinedAt: 2, Reachable: true}, {ID: "a", JoinedAt: 1, Reachable: true}, {ID: "c", JoinedAt: 3, Reachable: true}},
			Shards:  map[string][]string{"a": shardRange(1, 9), "b": shardRange(10, 11)},
		}
	}
	for _, s := range []Strategy{NewLeastShard(noLimits), NewCoordinatorAvoidance(CoordinatorAvoidanceConfig{OldestExcluded: 1, RelativeLimit: 1})} {
		st := mk()
		if _, err := s.Allocate("a", "x", st); err != nil {
			t.Fatal(err)
		}
		s.Rebalance(st, nil)
		if fmt.Sprint(st) != fmt.Sprint(mk()) {
			t.Fatalf("%v modified its input: %v", s, st)
		}
	}
}
