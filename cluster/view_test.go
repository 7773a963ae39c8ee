package cluster_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/shoal-dev/shoal/cluster"
)

func addr(node string, inc uint64) cluster.UniqueAddress {
	return cluster.UniqueAddress{Node: node, Incarnation: inc}
}

func member(node string, inc, order uint64, s cluster.Status, roles ...string) cluster.Member {
	return cluster.Member{Address: addr(node, inc), JoinOrder: order, Status: s, Roles: roles}
}

func mustView(t *testing.T, ms ...cluster.Member) cluster.View {
	t.Helper()
	v, err := cluster.NewView(ms...)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestNewViewRejectsBadMembers(t *testing.T) {
	for name, ms := range map[string][]cluster.Member{
		"empty node":     {member("", 1, 1, cluster.Up)},
		"no status":      {member("a", 1, 1, 0)},
		"unknown status": {member("a", 1, 1, 9)},
		"twice":          {member("a", 1, 1, cluster.Up), member("a", 1, 2, cluster.Joining)},
	} {
		if _, err := cluster.NewView(ms...); !errors.Is(err, cluster.ErrInvalidMember) {
			t.Errorf("%s: err %v, want ErrInvalidMember", name, err)
		}
	}
	// Two incarnations of one node id are two members.
	v := mustView(t, member("a", 1, 1, cluster.Down), member("a", 2, 3, cluster.Up))
	if v.Len() != 2 {
		t.Fatalf("two incarnations: %d members, want 2", v.Len())
	}
}

func TestViewIsImmutable(t *testing.T) {
	roles := []string{"r1"}
	in := member("a", 1, 1, cluster.Up)
	in.Roles = roles
	v := mustView(t, in)
	roles[0] = "changed"
	got := v.Members()
	got[0].Roles[0] = "changed too"
	got[0].Status = cluster.Down
	m, _ := v.Member(addr("a", 1))
	if m.Roles[0] != "r1" || m.Status != cluster.Up {
		t.Fatalf("view changed through its caller's slices: %+v", m)
	}
	w, err := v.With(member("b", 1, 2, cluster.Up))
	if err != nil {
		t.Fatal(err)
	}
	if v.Len() != 1 || w.Len() != 2 {
		t.Fatalf("With changed the old view: %d, new %d", v.Len(), w.Len())
	}
	if x := w.Without(addr("a", 1)); x.Len() != 1 || w.Len() != 2 {
		t.Fatalf("Without changed the old view")
	}
}

func TestWithRefusesRegression(t *testing.T) {
	v := mustView(t, member("a", 1, 1, cluster.Leaving))
	if _, err := v.With(member("a", 1, 1, cluster.Up)); !errors.Is(err, cluster.ErrStatusRegression) {
		t.Fatalf("Leaving → Up: %v, want ErrStatusRegression", err)
	}
	if _, err := v.With(member("a", 1, 7, cluster.Leaving)); !errors.Is(err, cluster.ErrStatusRegression) {
		t.Fatalf("join order change: %v, want ErrStatusRegression", err)
	}
	if _, err := v.With(member("a", 1, 1, cluster.Down)); err != nil {
		t.Fatalf("Leaving → Down: %v", err)
	}
}

func TestOldest(t *testing.T) {
	unreachable := member("u", 1, 1, cluster.Up, "r")
	unreachable.Unreachable = true
	v := mustView(t,
		unreachable,
		member("j", 1, 2, cluster.Joining, "r"),
		member("l", 1, 3, cluster.Leaving, "r"),
		member("d", 1, 4, cluster.Down, "r"),
		member("c", 1, 6, cluster.Up, "r"),
		member("b", 1, 5, cluster.Up),
		member("z", 1, 9, cluster.Up, "r"),
	)
	for role, want := range map[string]string{"": "b", "r": "c"} {
		m, ok := v.Oldest(role)
		if !ok || m.Address.Node != want {
			t.Errorf("Oldest(%q) = %v, %v; want %s", role, m, ok, want)
		}
	}
	if m, ok := v.Oldest("nobody"); ok {
		t.Errorf("Oldest of a role no one has = %v", m)
	}
	// Equal join orders (a broken membership): the smaller address wins,
	// the same on every node.
	tie := mustView(t, member("y", 1, 1, cluster.Up), member("x", 2, 1, cluster.Up))
	if m, _ := tie.Oldest(""); m.Address.Node != "x" {
		t.Errorf("tie: oldest %v, want x", m)
	}
}

func kinds(events []cluster.Event) []string {
	var out []string
	for _, e := range events {
		out = append(out, e.Member.Address.String()+" "+e.Kind.String())
	}
	return out
}

func TestDiff(t *testing.T) {
	a := member("a", 1, 1, cluster.Up)
	b := member("b", 1, 2, cluster.Joining)
	c := member("c", 1, 3, cluster.Up)
	from := mustView(t, a, b, c)

	a2 := a
	a2.Status = cluster.Leaving
	a2.Unreachable = true
	b2 := b
	b2.Status = cluster.Up
	b2.AppVersion = "1.1"
	d := member("d", 1, 4, cluster.Joining)
	to := mustView(t, a2, b2, d)

	got := kinds(cluster.Diff(from, to))
	want := []string{
		"a#1 MemberLeaving", "a#1 MemberUnreachable",
		"b#1 MemberUp", "b#1 MemberUpdated",
		"c#1 MemberRemoved",
		"d#1 MemberAdded",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Diff = %q\nwant %q", got, want)
	}
	if got := cluster.Diff(to, to); len(got) != 0 {
		t.Fatalf("Diff of a view with itself = %q", kinds(got))
	}
	events := cluster.Diff(from, to)
	if events[0].Previous.Status != cluster.Up || events[0].Member.Status != cluster.Leaving {
		t.Fatalf("event carries %v → %v, want Up → Leaving", events[0].Previous.Status, events[0].Member.Status)
	}
	// A restarted node is a new incarnation: the old one is removed, the new one added.
	restarted := mustView(t, member("a", 2, 5, cluster.Up))
	if got, want := kinds(cluster.Diff(mustView(t, a), restarted)), []string{"a#1 MemberRemoved", "a#2 MemberAdded"}; !slices.Equal(got, want) {
		t.Fatalf("restart: %q, want %q", got, want)
	}
	// Views of two nodes can disagree backwards; the difference still shows.
	joining := a
	joining.Status = cluster.Joining
	if got, want := kinds(cluster.Diff(mustView(t, a2), mustView(t, joining))), []string{"a#1 MemberReachable", "a#1 MemberUpdated"}; !slices.Equal(got, want) {
		t.Fatalf("backwards: %q, want %q", got, want)
	}
}
