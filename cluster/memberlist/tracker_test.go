package memberlist

import (
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/cluster"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func metaOf(id string, order uint64, leaving bool) Meta {
	return Meta{Address: cluster.UniqueAddress{Node: id, Incarnation: 1}, JoinOrder: order, Leaving: leaving}
}

func event(t *testing.T, kind nodeEventKind, m Meta) nodeEvent {
	t.Helper()
	b, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return nodeEvent{kind: kind, name: nodeName(m.Address), addr: "127.0.0.1:1", meta: b}
}

func testTracker() *tracker {
	timing := FastTiming()
	timing.ReconnectTimeout, timing.RemoveDownAfter = 10*time.Second, 5*time.Second
	return newTracker("self#1", metaOf("self", 1, false), timing, true)
}

func memberOf(t *testing.T, tr *tracker, id string) cluster.Member {
	t.Helper()
	m, ok := tr.view().Member(cluster.UniqueAddress{Node: id, Incarnation: 1})
	if !ok {
		t.Fatalf("%s not in view %v", id, tr.view().Members())
	}
	return m
}

func TestTrackerStatusFollowsMetadataAndNeverMovesBack(t *testing.T) {
	tr := testTracker()
	tr.apply(event(t, nodeJoined, metaOf("b", 0, false)), t0)
	if m := memberOf(t, tr, "b"); m.Status != cluster.Joining {
		t.Fatalf("b is %s, want Joining", m.Status)
	}
	tr.apply(event(t, nodeUpdated, metaOf("b", 2, false)), t0)
	if m := memberOf(t, tr, "b"); m.Status != cluster.Up || m.JoinOrder != 2 {
		t.Fatalf("b is %s order %d, want Up order 2", m.Status, m.JoinOrder)
	}
	tr.apply(event(t, nodeUpdated, metaOf("b", 2, true)), t0)
	// A late message from before the leave, and one that changes the order:
	// neither moves b back.
	tr.apply(event(t, nodeUpdated, metaOf("b", 0, false)), t0)
	tr.apply(event(t, nodeUpdated, metaOf("b", 7, false)), t0)
	if m := memberOf(t, tr, "b"); m.Status != cluster.Leaving || m.JoinOrder != 2 {
		t.Fatalf("b is %s order %d, want Leaving order 2", m.Status, m.JoinOrder)
	}
	if tr.maxJoinOrder != 7 {
		t.Errorf("maxJoinOrder %d, want 7 (the highest seen)", tr.maxJoinOrder)
	}
}

func TestTrackerLeaveWhileLeavingIsDownElseFailed(t *testing.T) {
	tr := testTracker()
	tr.apply(event(t, nodeJoined, metaOf("leaver", 2, true)), t0)
	tr.apply(event(t, nodeJoined, metaOf("crasher", 3, false)), t0)
	tr.apply(event(t, nodeLeft, metaOf("leaver", 2, true)), t0)
	tr.apply(event(t, nodeLeft, metaOf("crasher", 3, false)), t0)
	if m := memberOf(t, tr, "leaver"); m.Status != cluster.Down {
		t.Errorf("leaver is %s, want Down", m.Status)
	}
	if m := memberOf(t, tr, "crasher"); m.Status != cluster.Up || !m.Unreachable {
		t.Errorf("crasher is %s unreachable=%v, want Up and unreachable", m.Status, m.Unreachable)
	}
	if got := tr.failed(); !slices.Equal(got, []string{"crasher#1/127.0.0.1:1"}) {
		t.Errorf("failed() = %v, want the crasher only", got)
	}
	// It comes back: reachable again, no longer a reconnect target.
	tr.apply(event(t, nodeJoined, metaOf("crasher", 3, false)), t0.Add(time.Second))
	if m := memberOf(t, tr, "crasher"); m.Unreachable {
		t.Errorf("crasher still unreachable after rejoining")
	}
	if got := tr.failed(); len(got) != 0 {
		t.Errorf("failed() = %v after the rejoin, want none", got)
	}
}

func TestTrackerExpiresFailedThenDownMembers(t *testing.T) {
	tr := testTracker()
	tr.apply(event(t, nodeJoined, metaOf("b", 2, false)), t0)
	tr.apply(event(t, nodeLeft, metaOf("b", 2, false)), t0)
	tr.expire(t0.Add(9 * time.Second))
	if m := memberOf(t, tr, "b"); m.Status != cluster.Up {
		t.Fatalf("b is %s before ReconnectTimeout, want Up (unreachable)", m.Status)
	}
	tr.expire(t0.Add(10 * time.Second))
	if m := memberOf(t, tr, "b"); m.Status != cluster.Down {
		t.Fatalf("b is %s at ReconnectTimeout, want Down", m.Status)
	}
	if got := tr.failed(); len(got) != 0 {
		t.Errorf("failed() = %v: a Down member is not reconnected", got)
	}
	// Down is final: a late alive for the same incarnation is ignored.
	if tr.apply(event(t, nodeJoined, metaOf("b", 2, false)), t0.Add(11*time.Second)) {
		t.Errorf("an event for a Down member was applied")
	}
	tr.expire(t0.Add(14 * time.Second))
	if _, ok := tr.view().Member(cluster.UniqueAddress{Node: "b", Incarnation: 1}); !ok {
		t.Fatalf("b removed before RemoveDownAfter")
	}
	tr.expire(t0.Add(15 * time.Second))
	if _, ok := tr.view().Member(cluster.UniqueAddress{Node: "b", Incarnation: 1}); ok {
		t.Fatalf("b still in the view after RemoveDownAfter")
	}
	if tr.maxJoinOrder != 2 {
		t.Errorf("maxJoinOrder %d after removal, want 2 (kept)", tr.maxJoinOrder)
	}
}

func TestTrackerIgnoresBadMetadataAndMismatchedNames(t *testing.T) {
	tr := testTracker()
	if tr.apply(nodeEvent{kind: nodeJoined, name: "x#1", meta: []byte{9}}, t0) {
		t.Errorf("undecodable metadata applied")
	}
	ev := event(t, nodeJoined, metaOf("y", 2, false))
	ev.name = "z#1"
	if tr.apply(ev, t0) {
		t.Errorf("metadata naming another incarnation applied")
	}
	if tr.view().Len() != 1 {
		t.Errorf("view %v, want self only", tr.view().Members())
	}
}

func TestTrackerSelfLeavingIsDown(t *testing.T) {
	tr := testTracker()
	tr.apply(event(t, nodeLeft, metaOf("self", 1, false)), t0)
	if m := memberOf(t, tr, "self"); m.Status != cluster.Down {
		t.Errorf("self is %s after its own leave, want Down", m.Status)
	}
}

// With admission on, a member is in no view until it is admitted, and one
// that went Down awaits nothing; this node is in the view from the start.
func TestTrackerAdmission(t *testing.T) {
	timing := FastTiming()
	tr := newTracker("self#1", metaOf("self", 1, false), timing, false)
	memberOf(t, tr, "self")
	tr.apply(event(t, nodeJoined, metaOf("b", 2, false)), t0)
	tr.apply(event(t, nodeJoined, metaOf("c", 3, true)), t0)
	if n := tr.view().Len(); n != 1 {
		t.Fatalf("view has %d members before any admission, want 1: %v", n, tr.view().Members())
	}
	if got := slices.Sorted(maps.Keys(tr.awaiting())); !slices.Equal(got, []string{"b#1", "c#1"}) {
		t.Fatalf("awaiting %v", got)
	}
	if !tr.admit("b#1") {
		t.Fatal("b not tracked")
	}
	if m := memberOf(t, tr, "b"); m.Status != cluster.Up {
		t.Fatalf("b is %s, want Up", m.Status)
	}
	tr.apply(event(t, nodeLeft, metaOf("c", 3, true)), t0) // left while Leaving: Down
	if got := tr.awaiting(); len(got) != 0 {
		t.Fatalf("awaiting %v after c went Down", got)
	}
	if tr.admit("nobody#1") {
		t.Fatal("admitted an unknown member")
	}
}
