package node

import (
	"testing"

	"github.com/shoal-dev/shoal/cluster"
)

// A leave by bare node id during a rolling restart goes to the newest
// incarnation, not to the one on its way out; Down members are never named.
func TestMemberNamedPrefersTheNewestIncarnation(t *testing.T) {
	old := cluster.Member{Address: cluster.UniqueAddress{Node: "b", Incarnation: 1}, JoinOrder: 2, Status: cluster.Leaving, Unreachable: true}
	successor := cluster.Member{Address: cluster.UniqueAddress{Node: "b", Incarnation: 2}, JoinOrder: 5, Status: cluster.Up}
	gone := cluster.Member{Address: cluster.UniqueAddress{Node: "c", Incarnation: 1}, JoinOrder: 3, Status: cluster.Down}
	other := cluster.Member{Address: cluster.UniqueAddress{Node: "a", Incarnation: 7}, JoinOrder: 1, Status: cluster.Up}
	members := []cluster.Member{other, old, successor, gone} // the view lists the old one first
	for _, tc := range []struct {
		name string
		want cluster.UniqueAddress
		ok   bool
	}{
		{"b", successor.Address, true},
		{old.Address.String(), old.Address, true}, // an incarnation named in full is that one
		{"a", other.Address, true},
		{"c", cluster.UniqueAddress{}, false},
		{"z", cluster.UniqueAddress{}, false},
	} {
		got, ok := memberNamed(members, tc.name)
		if ok != tc.ok || (ok && got.Address != tc.want) {
			t.Errorf("memberNamed(%q) = %v, %v; want %v, %v", tc.name, got.Address, ok, tc.want, tc.ok)
		}
	}
}
