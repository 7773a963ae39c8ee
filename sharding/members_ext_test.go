package sharding_test

import (
	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/cluster/inproc"
)

// testCluster is the shared membership of the nodes of a test, by node
// name: "a" is node a, incarnation 0.
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

// addr is the address of node name in the tests: incarnation 1, the
// incarnation of the node's System too (simIncarnation), so that replies
// to its asks find it.
func addr(name string) cluster.UniqueAddress {
	return cluster.UniqueAddress{Node: name, Incarnation: simIncarnation}
}

// simIncarnation is the incarnation of every node the tests start by name.
const simIncarnation = 1

// addrName is the name of the node at a.
func addrName(a cluster.UniqueAddress) string { return a.Node }

func addrs(names ...string) []cluster.UniqueAddress {
	out := make([]cluster.UniqueAddress, len(names))
	for i, n := range names {
		out[i] = addr(n)
	}
	return out
}

func addrNames(as []cluster.UniqueAddress) []string {
	out := make([]string, len(as))
	for i, a := range as {
		out[i] = a.String()
	}
	return out
}
