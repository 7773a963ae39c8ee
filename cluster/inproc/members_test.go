package inproc_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/cluster/inproc"
)

// Every node's membership sees every change, in order, before the call
// that made it returns; join order follows the joins; a node that leaves
// sees itself gone and nothing after.
func TestMembersShareOneView(t *testing.T) {
	a, b := cluster.UniqueAddress{Node: "a", Incarnation: 1}, cluster.UniqueAddress{Node: "b", Incarnation: 1}
	ms := inproc.NewMembers()
	ma, err := ms.Join(a, "host")
	if err != nil {
		t.Fatal(err)
	}
	var seenByA []cluster.EventKind
	_, cancel := ma.Subscribe(func(c cluster.Change) {
		for _, e := range c.Events {
			seenByA = append(seenByA, e.Kind)
		}
	})
	defer cancel()
	mb, err := ms.JoinVersion(b, "1.2")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ms.Join(b); !errors.Is(err, cluster.ErrInvalidMember) {
		t.Fatalf("joining twice: %v, want ErrInvalidMember", err)
	}
	if oldest, _ := mb.View().Oldest(""); oldest.Address != a {
		t.Fatalf("oldest in b's view %v, want a", oldest.Address)
	}
	if m, _ := ma.View().Member(b); m.AppVersion != "1.2" || m.JoinOrder != 2 || m.Status != cluster.Up {
		t.Fatalf("b in a's view: %+v", m)
	}
	if oldest, _ := ma.View().Oldest("host"); oldest.Address != a {
		t.Fatalf("oldest host %v, want a", oldest.Address)
	}
	ms.SetStatus(a, cluster.Leaving)
	ms.SetReachable(a, false)
	if oldest, _ := mb.View().Oldest(""); oldest.Address != b {
		t.Fatalf("oldest once a leaves %v, want b", oldest.Address)
	}
	ms.SetStatus(a, cluster.Up) // back, as only a test may
	ms.SetReachable(a, true)
	mb.Leave()
	if _, ok := ma.View().Member(b); ok {
		t.Fatal("a still sees b after b left")
	}
	if _, ok := mb.View().Member(b); ok {
		t.Fatal("b does not see itself gone")
	}
	want := []cluster.EventKind{cluster.MemberAdded, cluster.MemberLeaving, cluster.MemberUnreachable,
		cluster.MemberUp, cluster.MemberReachable, cluster.MemberRemoved}
	if !slices.Equal(seenByA, want) {
		t.Fatalf("a saw %v, want %v", seenByA, want)
	}
	if _, err := ms.Join(cluster.UniqueAddress{Node: "c", Incarnation: 1}); err != nil {
		t.Fatal(err)
	}
	if _, ok := mb.View().Member(cluster.UniqueAddress{Node: "c", Incarnation: 1}); ok {
		t.Fatal("b, gone, saw a later join")
	}
}
