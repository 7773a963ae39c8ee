package sharding

import (
	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/cluster/inproc"
)

// The tests name node incarnations in a short notation: "a" is node a
// with incarnation 0, "a#2" node a with incarnation 2, "-" (or "") no
// node. addr reads it, addrName writes it; addrs and addrNames do several.
func addr(s string) cluster.UniqueAddress {
	if s == "-" {
		return cluster.UniqueAddress{}
	}
	a, err := cluster.ParseUniqueAddress(s)
	if err != nil {
		panic(err)
	}
	return a
}

func addrName(a cluster.UniqueAddress) string { return a.String() }

func addrs(ss ...string) []cluster.UniqueAddress {
	out := make([]cluster.UniqueAddress, len(ss))
	for i, s := range ss {
		out[i] = addr(s)
	}
	return out
}

func addrNames(as []cluster.UniqueAddress) []string {
	out := make([]string, len(as))
	for i, a := range as {
		out[i] = addrName(a)
	}
	return out
}

// testCluster is the shared membership of the nodes of a test, by name.
type testCluster struct{ *inproc.Members }

func newTestCluster() testCluster { return testCluster{inproc.NewMembers()} }

// Join adds node name, Up and youngest, and returns its membership.
func (c testCluster) Join(name string, roles ...string) inproc.Membership {
	m, err := c.Members.Join(addr(name), roles...)
	if err != nil {
		panic(err)
	}
	return m
}

func (c testCluster) SetStatus(name string, s cluster.Status) { c.Members.SetStatus(addr(name), s) }

func (c testCluster) Remove(name string) { c.Members.Remove(addr(name)) }

// hostOf is the coordinator host beside region r.
func hostOf[C any](r *Region[C]) *coordinatorHost {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	return r.s.hosts[r.typ]
}
