package node_test

import (
	"net"
	"testing"

	"github.com/shoal-dev/shoal/node"
)

// A node that bootstrapped a cluster of its own because no seed answered
// (it started while cut off from its cluster) joins its RejoinSeeds once
// one answers, and the two clusters become one (a fenced node restarted
// during a partition would otherwise serve a cluster of one for ever).
func TestBootstrappedNodeRejoinsItsSeeds(t *testing.T) {
	dsn := pg.MigratedDSN(t)
	// The seed's address, answered by nobody until n3 starts there.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	seed := l.Addr().String()
	l.Close()

	n1 := startNode(t, dsn, "node-1", nil)
	n2 := startNode(t, dsn, "node-2", nil, func(c *node.Config) { c.RejoinSeeds = []string{seed} })
	if got := len(n2.Membership().View().Members()); got != 1 {
		t.Fatalf("node-2 sees %d members before its seed answers; want itself alone", got)
	}
	n3 := startNode(t, dsn, "node-3", []string{n1.GossipAddr()}, func(c *node.Config) { c.GossipAddr = seed })
	awaitUp(t, []*testNode{n1, n2, n3})
}
