package node

import (
	"testing"
	"time"

	"github.com/shoal-dev/shoal/cluster/memberlist"
)

// The coordinators' keep-majority timing follows the memberlist timing in
// use and the planned cluster size (memberlist.Timing.CutSpread): a
// stable-after longer than the spread, never under the floor.
func TestDowningTimingFollowsMemberlist(t *testing.T) {
	lenient := memberlist.FastTiming() // the node tests' testTiming
	lenient.ProbeInterval, lenient.ProbeTimeout = time.Second, 500*time.Millisecond
	lenient.SuspicionMult, lenient.SuspicionMaxTimeoutMult = 4, 6
	for _, c := range []struct {
		name                string
		timing              memberlist.Timing
		size                int
		stableAfter, spread time.Duration
	}{
		{"defaults: LAN, 5 members", memberlist.Timing{}, 0, 66 * time.Second, 65 * time.Second},
		{"LAN, 3", memberlist.DefaultTiming(), 3, 14 * time.Second, 13 * time.Second},
		{"LAN, 10", memberlist.DefaultTiming(), 10, 146 * time.Second, 145 * time.Second},
		{"local, 5", memberlist.LocalTiming(), 5, 45 * time.Second, 44 * time.Second},
		{"test, 3", lenient, 3, memberlist.MinDowningStableAfter, 7 * time.Second},
		{"test, 5", lenient, 5, 50 * time.Second, 49 * time.Second},
		{"fast, 5", memberlist.FastTiming(), 5, memberlist.MinDowningStableAfter, 2900 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := Config{NodeID: "n", PostgresDSN: "postgres://x", Timing: c.timing, ClusterSize: c.size}.withDefaults()
			if err != nil {
				t.Fatal(err)
			}
			if stableAfter, spread := cfg.downing(); stableAfter != c.stableAfter || spread != c.spread {
				t.Errorf("stable-after %v over a spread of %v, want %v over %v", stableAfter, spread, c.stableAfter, c.spread)
			}
		})
	}
}
