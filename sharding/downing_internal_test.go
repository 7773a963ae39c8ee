package sharding

import (
	"errors"
	"slices"
	"testing"

	"github.com/shoal-dev/shoal/sharding/allocation"
)

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
	d := newDowning()
	b := up("b")
	b.Reachable = false
	view := []Member{up("a"), b}
	// c is named by a stored allocation but absent from the view.
	d.observe(view, []string{"a", "b", "c"})
	calls := d.due()
	if want := []downCall{{node: "b", down: true}, {node: "c"}}; !slices.Equal(calls, want) {
		t.Fatalf("calls %v, want %v: down the failed member, only check the absent one", calls, want)
	}
	if again := d.due(); len(again) != 0 {
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
	if calls := d.due(); !slices.Contains(calls, downCall{node: "b", down: true}) {
		t.Fatalf("calls %v: the failed down is not retried", calls)
	}
	d.result(downResult{call: downCall{node: "b", down: true}})
	d.result(downResult{call: downCall{node: "c"}, expired: false})
	if calls := d.due(); !slices.Equal(calls, []downCall{{node: "b"}, {node: "c"}}) {
		t.Fatalf("calls %v, want expiry checks of b and c", calls)
	}
	if d.result(downResult{call: downCall{node: "b"}, expired: false}) {
		t.Fatal("an unexpired lease reported as expired")
	}
	// c turns up in the view, healthy: the view had lagged. It is left alone.
	view = append(view, up("c"))
	d.observe(view, []string{"a", "b", "c"})
	if st, reachable, _ := statusOf(d.filter(view, nil), "c"); st != allocation.Up || !reachable {
		t.Fatal("a member that turned up healthy is still held back")
	}
	// b refutes its failure after it was downed: it is doomed all the same.
	view[1].Reachable = true
	d.observe(view, []string{"a", "b", "c"})
	if st, _, _ := statusOf(d.filter(view, nil), "b"); st == allocation.Up {
		t.Fatal("a downed member came back Up")
	}
	d.due()
	if !d.result(downResult{call: downCall{node: "b"}, expired: true}) {
		t.Fatal("the expiry was not reported")
	}
	if st, _, _ := statusOf(d.filter(view, nil), "b"); st != allocation.Down {
		t.Fatalf("b is %v once its lease expired, want Down", st)
	}
	if calls := d.due(); slices.ContainsFunc(calls, func(c downCall) bool { return c.node == "b" }) {
		t.Fatalf("calls %v: an expired node is asked about again", calls)
	}
	// Once neither the view nor the core names b, it is forgotten.
	view = []Member{up("a"), up("c")}
	d.observe(view, []string{"a", "c"})
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
	d := newDowning()
	b := up("b")
	b.Reachable = false
	view := []Member{up("a"), b}
	d.observe(view, []string{"a", "b"})
	d.due()
	d.result(downResult{call: downCall{node: "b", down: true}})
	d.due()
	if !d.result(downResult{call: downCall{node: "b"}, expired: true}) {
		t.Fatal("the expiry was not reported")
	}
	// c registered meanwhile; the view does not hold it yet.
	core := d.filter(view, []string{"a", "b", "c"})
	if st, reachable, ok := statusOf(core, "c"); !ok || st == allocation.Down || reachable {
		t.Fatalf("c seen by the core as (%v, reachable %v, present %v): it would lose its shards while it runs them", st, reachable, ok)
	}
	if calls := d.due(); !slices.Contains(calls, downCall{node: "c"}) {
		t.Fatalf("calls %v: c's lease is never checked", calls)
	}
	// The view catches up: c is a healthy member again.
	view = append(view, up("c"))
	d.observe(view, []string{"a", "b", "c"})
	if st, reachable, _ := statusOf(d.filter(view, []string{"a", "b", "c"}), "c"); st != allocation.Up || !reachable {
		t.Fatal("c is still held back once the view holds it")
	}
}
