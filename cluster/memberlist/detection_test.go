package memberlist_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/cluster/memberlist"
	"github.com/shoal-dev/shoal/cluster/memberlist/faultnet"
)

// The bound, worked by hand from the formula in CutSpread's doc, for
// memberlist's LAN and local settings and the tests' fast timing.
func TestCutSpreadAndDowningStableAfter(t *testing.T) {
	for _, c := range []struct {
		name         string
		timing       memberlist.Timing
		n            int
		spread, want time.Duration
	}{
		{"lan/1", memberlist.DefaultTiming(), 1, 0, 10 * time.Second},
		// n−2 < k = 2: no confirmations asked, every timeout is min.
		{"lan/2", memberlist.DefaultTiming(), 2, 2 * time.Second, 10 * time.Second},
		{"lan/3", memberlist.DefaultTiming(), 3, 13 * time.Second, 14 * time.Second},
		// Probes of 1,4,7,8,8 intervals after the tick under way; 24 s − 4 s.
		{"lan/4", memberlist.DefaultTiming(), 4, 49 * time.Second, 50 * time.Second},
		{"lan/5", memberlist.DefaultTiming(), 5, 65 * time.Second, 66 * time.Second},
		{"lan/10", memberlist.DefaultTiming(), 10, 145 * time.Second, 146 * time.Second},
		// 37 probes: 285 s; log10 20 = 1.301: min 5.204 s, max 31.224 s.
		{"lan/20", memberlist.DefaultTiming(), 20, 311020 * time.Millisecond, 312020 * time.Millisecond},
		// k = 1: confirmations asked from n = 3 on; min 3 s, max 18 s.
		{"local/3", memberlist.LocalTiming(), 3, 22 * time.Second, 23 * time.Second},
		{"local/5", memberlist.LocalTiming(), 5, 44 * time.Second, 45 * time.Second},
		// SuspicionMult 2: k = 0, no confirmations, no max; the floor.
		{"fast/3", memberlist.FastTiming(), 3, 700 * time.Millisecond, memberlist.MinDowningStableAfter},
		{"fast/5", memberlist.FastTiming(), 5, 2900 * time.Millisecond, memberlist.MinDowningStableAfter},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := c.timing.CutSpread(c.n); got != c.spread {
				t.Errorf("CutSpread(%d) = %v, want %v", c.n, got, c.spread)
			}
			if got := c.timing.DowningStableAfter(c.n); got != c.want {
				t.Errorf("DowningStableAfter(%d) = %v, want %v", c.n, got, c.want)
			}
		})
	}
}

// A real memberlist cluster on the fake clock, with LAN timing: the
// members of the other side of a cut are declared failed one by one, and
// the spread between the first and the last, as one observer sees it,
// stays within CutSpread. The observer is alone on its side (the others
// probe for it: awareness, no confirmations) or one of two.
func TestCutIsSeenWithinCutSpread(t *testing.T) {
	const n = 5
	for _, mine := range []int{1, 2} {
		t.Run(fmt.Sprintf("%d of %d", mine, n), func(t *testing.T) {
			bubble(t, func(t *testing.T) {
				network := faultnet.NewNetwork(uint64(mine))
				var nodes []*node
				for i := range n {
					nodes = append(nodes, newNode(t, network, fmt.Sprintf("n%d", i), func(c *memberlist.Config) {
						c.Timing = memberlist.DefaultTiming()
					}))
				}
				startCluster(t, t.Context(), nodes...)
				observer := nodes[0]
				var (
					mu   sync.Mutex
					seen = map[string]time.Time{}
				)
				_, cancel := observer.Subscribe(func(c cluster.Change) {
					mu.Lock()
					defer mu.Unlock()
					for _, e := range c.Events {
						if e.Kind == cluster.MemberUnreachable {
							seen[e.Member.Address.Node] = time.Now()
						}
					}
				})
				defer cancel()
				var side, other []string
				for i, nd := range nodes {
					if i < mine {
						side = append(side, nd.transport.Addr())
					} else {
						other = append(other, nd.transport.Addr())
					}
				}
				cut := time.Now()
				network.Partition(side, other)
				// Longer than eventually's minute: the last may take CutSpread.
				seenAll := func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) == len(other) }
				for deadline := cut.Add(10 * time.Minute); !seenAll(); time.Sleep(100 * time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatalf("the observer saw %d of the %d members of the other side fail", len(seen), len(other))
					}
				}
				mu.Lock()
				var times []time.Time
				for _, at := range seen {
					times = append(times, at)
				}
				mu.Unlock()
				slices.SortFunc(times, time.Time.Compare)
				spread := times[len(times)-1].Sub(times[0])
				t.Logf("first declared %v after the cut, last %v: spread %v (bound %v)",
					times[0].Sub(cut), times[len(times)-1].Sub(cut), spread, memberlist.DefaultTiming().CutSpread(n))
				if bound := memberlist.DefaultTiming().CutSpread(n); spread > bound {
					t.Errorf("spread %v beyond CutSpread(%d) = %v", spread, n, bound)
				}
			})
		})
	}
}
