package sharding

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/sharding/allocation"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func up(node string) Member { return Member{Node: node, Status: allocation.Up, Reachable: true} }

func statusOf(members []Member, node string) (allocation.Status, bool, bool) {
	for _, m := range members {
		if m.Node == node {
			return m.Status, m.Reachable, true
		}
	}
	return 0, false, false
}

func TestDowningMachine(t *testing.T) {
	d := newDowning("a", "", 0)
	b := up("b")
	b.Reachable = false
	view := []Member{up("a"), b}
	// c is named by a stored allocation but absent from the view.
	d.observe(view, []string{"a", "b", "c"}, t0)
	calls := d.due(t0)
	if want := []downCall{{node: "b", down: true}, {node: "c"}}; !slices.Equal(calls, want) {
		t.Fatalf("calls %v, want %v: down the failed member, only check the absent one", calls, want)
	}
	if again := d.due(t0); len(again) != 0 {
		t.Fatalf("calls %v while the first are under way", again)
	}
	core := d.filter(view, nil)
	for _, n := range []string{"b", "c"} {
		st, reachable, ok := statusOf(core, n)
		if !ok || st == allocation.Down || reachable {
			t.Fatalf("%s seen by the core as (%v, reachable %v, present %v) before its lease expired", n, st, reachable, ok)
		}
	}
	if st, reachable, _ := statusOf(core, "a"); st != allocation.Up || !reachable {
		t.Fatal("a healthy member changed")
	}

	// A failed DownNode is retried; a confirmed one is followed by expiry checks.
	if d.result(downResult{call: downCall{node: "b", down: true}, err: errors.New("db down")}) {
		t.Fatal("a failed down reported an expiry")
	}
	if calls := d.due(t0); !slices.Contains(calls, downCall{node: "b", down: true}) {
		t.Fatalf("calls %v: the failed down is not retried", calls)
	}
	d.result(downResult{call: downCall{node: "b", down: true}})
	d.result(downResult{call: downCall{node: "c"}, expired: false})
	if calls := d.due(t0); !slices.Equal(calls, []downCall{{node: "b"}, {node: "c"}}) {
		t.Fatalf("calls %v, want expiry checks of b and c", calls)
	}
	if d.result(downResult{call: downCall{node: "b"}, expired: false}) {
		t.Fatal("an unexpired lease reported as expired")
	}
	// c turns up in the view, healthy: the view had lagged. It is left alone.
	view = append(view, up("c"))
	d.observe(view, []string{"a", "b", "c"}, t0)
	if st, reachable, _ := statusOf(d.filter(view, nil), "c"); st != allocation.Up || !reachable {
		t.Fatal("a member that turned up healthy is still held back")
	}
	// b refutes its failure after it was downed: it is doomed all the same.
	view[1].Reachable = true
	d.observe(view, []string{"a", "b", "c"}, t0)
	if st, _, _ := statusOf(d.filter(view, nil), "b"); st == allocation.Up {
		t.Fatal("a downed member came back Up")
	}
	d.due(t0)
	if !d.result(downResult{call: downCall{node: "b"}, expired: true}) {
		t.Fatal("the expiry was not reported")
	}
	if st, _, _ := statusOf(d.filter(view, nil), "b"); st != allocation.Down {
		t.Fatalf("b is %v once its lease expired, want Down", st)
	}
	if calls := d.due(t0); slices.ContainsFunc(calls, func(c downCall) bool { return c.node == "b" }) {
		t.Fatalf("calls %v: an expired node is asked about again", calls)
	}
	// Once neither the view nor the core names b, it is forgotten.
	view = []Member{up("a"), up("c")}
	d.observe(view, []string{"a", "c"}, t0)
	if _, _, ok := statusOf(d.filter(view, nil), "b"); ok {
		t.Fatal("a removed node is still shown to the core")
	}
}

// A region that registered after the coordinator's last view (the view
// lags behind the region's Register) is not gone when another node's
// lease expiry makes the coordinator show its core the view again: the
// core would move the shards just allocated to it while it runs them
// (simulator, views fault, seed 23).
func TestDowningHoldsARegionTheViewHasNotCaughtUpWith(t *testing.T) {
	d := newDowning("a", "", 0)
	b := up("b")
	b.Reachable = false
	view := []Member{up("a"), b}
	d.observe(view, []string{"a", "b"}, t0)
	d.due(t0)
	d.result(downResult{call: downCall{node: "b", down: true}})
	d.due(t0)
	if !d.result(downResult{call: downCall{node: "b"}, expired: true}) {
		t.Fatal("the expiry was not reported")
	}
	// c registered meanwhile; the view does not hold it yet.
	core := d.filter(view, []string{"a", "b", "c"})
	if st, reachable, ok := statusOf(core, "c"); !ok || st == allocation.Down || reachable {
		t.Fatalf("c seen by the core as (%v, reachable %v, present %v): it would lose its shards while it runs them", st, reachable, ok)
	}
	if calls := d.due(t0); !slices.Contains(calls, downCall{node: "c"}) {
		t.Fatalf("calls %v: c's lease is never checked", calls)
	}
	// The view catches up: c is a healthy member again.
	view = append(view, up("c"))
	d.observe(view, []string{"a", "b", "c"}, t0)
	if st, reachable, _ := statusOf(d.filter(view, []string{"a", "b", "c"}), "c"); st != allocation.Up || !reachable {
		t.Fatal("c is still held back once the view holds it")
	}
}

func upAt(node string, joined int64, reachable bool) Member {
	return Member{Node: node, JoinedAt: joined, Status: allocation.Up, Reachable: reachable}
}

// Keep the majority (issue 12): a coordinator downs unreachable members
// only while its side is the majority (on a tie, the side of the oldest),
// and on the minority side downs nobody and, once every member counted
// against it is known alive in the store, stands down.
func TestDowningKeepsTheMajority(t *testing.T) {
	for _, tc := range []struct {
		name     string
		self     string
		view     []Member
		expired  []string // leases the store reports expired
		majority bool
	}{
		{"1 vs 2: the cut-off coordinator", "a",
			[]Member{upAt("a", 1, true), upAt("b", 2, false), upAt("c", 3, false)}, nil, false},
		{"2 vs 1: the majority's coordinator", "b",
			[]Member{upAt("a", 1, false), upAt("b", 2, true), upAt("c", 3, true)}, nil, true},
		{"2 vs 2 with the oldest", "a",
			[]Member{upAt("a", 1, true), upAt("b", 2, true), upAt("c", 3, false), upAt("d", 4, false)}, nil, true},
		{"2 vs 2 without the oldest", "c",
			[]Member{upAt("a", 1, false), upAt("b", 2, false), upAt("c", 3, true), upAt("d", 4, true)}, nil, false},
		{"3 vs 2", "c",
			[]Member{upAt("a", 1, false), upAt("b", 2, false), upAt("c", 3, true), upAt("d", 4, true), upAt("e", 5, true)}, nil, true},
		{"members that left (Down) do not count", "b",
			[]Member{upAt("a", 1, false), upAt("b", 2, true), {Node: "c", JoinedAt: 3, Status: allocation.Down}, {Node: "d", JoinedAt: 4, Status: allocation.Down}}, nil, false},
		{"crashed members whose leases expired do not count", "c",
			[]Member{upAt("a", 1, false), upAt("b", 2, false), upAt("c", 3, true)}, []string{"a", "b"}, true},
		{"a lone survivor of a crashed oldest", "b",
			[]Member{upAt("a", 1, false), upAt("b", 2, true)}, []string{"a"}, true},
		{"a survivor of a live oldest", "b",
			[]Member{upAt("a", 1, false), upAt("b", 2, true)}, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newDowning(tc.self, "", 10*time.Second)
			d.observe(tc.view, nil, t0)
			if calls := d.due(t0); slices.ContainsFunc(calls, func(c downCall) bool { return c.down }) {
				t.Fatalf("calls %v before the view was stable", calls)
			}
			if d.standDown(t0) {
				t.Fatal("stood down before the view was stable")
			}
			for _, c := range d.due(t0) {
				t.Fatalf("call %v while the first checks are under way", c)
			}
			// The expiry checks answer.
			for _, m := range tc.view {
				if n := d.nodes[m.Node]; n != nil {
					d.result(downResult{call: downCall{node: m.Node}, expired: slices.Contains(tc.expired, m.Node)})
				}
			}
			later := t0.Add(10 * time.Second)
			calls := d.due(later)
			var downs []string
			for _, c := range calls {
				if c.down {
					downs = append(downs, c.node)
				}
			}
			var want []string
			if tc.majority {
				for _, m := range tc.view {
					if !m.Reachable && m.Status != allocation.Down && !slices.Contains(tc.expired, m.Node) {
						want = append(want, m.Node)
					}
				}
				// A Down member is downed too: harmless, it released its lease.
				for _, m := range tc.view {
					if m.Status == allocation.Down {
						want = append(want, m.Node)
					}
				}
				slices.Sort(want)
			}
			if !slices.Equal(downs, want) {
				t.Fatalf("downs %v, want %v (majority %v)", downs, want, tc.majority)
			}
			if got := d.standDown(later); got == tc.majority {
				t.Fatalf("standDown %v on the %s side", got, map[bool]string{true: "majority", false: "minority"}[tc.majority])
			}
		})
	}
}

// A coordinator that sees only part of the other side unreachable (the
// failure detector finds them one by one) waits: the change resets the
// stability clock, so it never downs the first before it sees the second
// and learns it is the minority.
func TestDowningWaitsForAStableView(t *testing.T) {
	d := newDowning("a", "", 10*time.Second)
	d.observe([]Member{upAt("a", 1, true), upAt("b", 2, false), upAt("c", 3, true)}, nil, t0)
	d.due(t0)
	d.result(downResult{call: downCall{node: "b"}})
	if calls := d.due(t0.Add(9 * time.Second)); slices.Contains(calls, downCall{node: "b", down: true}) {
		t.Fatalf("calls %v: b downed before the view was stable", calls)
	}
	d.result(downResult{call: downCall{node: "b"}})
	d.observe([]Member{upAt("a", 1, true), upAt("b", 2, false), upAt("c", 3, false)}, nil, t0.Add(9*time.Second))
	calls := d.due(t0.Add(15 * time.Second))
	if slices.ContainsFunc(calls, func(c downCall) bool { return c.down }) {
		t.Fatalf("calls %v: the minority downs", calls)
	}
	for _, c := range calls {
		d.result(downResult{call: c})
	}
	if d.standDown(t0.Add(15 * time.Second)) {
		t.Fatal("stood down before the view was stable for stableAfter")
	}
	if !d.standDown(t0.Add(19 * time.Second)) {
		t.Fatal("the minority coordinator does not stand down")
	}
}
