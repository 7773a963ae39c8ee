package node_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/cluster/memberlist"
	"github.com/shoal-dev/shoal/cluster/tcp"
	"github.com/shoal-dev/shoal/internal/testcert"
	"github.com/shoal-dev/shoal/node"
)

// A process that gossips with the cluster's name but would be refused by
// the transport (it has no certificate of the cluster's CA) is never
// listed, while a node with one is listed Up; a process of another
// cluster is not either. Real sockets, memberlist and mutual TLS
// (docs/DESIGN.md, "Members and views").
func TestGossipMemberTheTransportRefusesIsNotListed(t *testing.T) {
	dsn := pg.MigratedDSN(t)
	ca := testcert.New(t, "shoal test CA")
	withTLS := func(c *node.Config) {
		c.ServerTLS, c.ClientTLS = tcp.MutualTLS(ca.Leaf(t, c.NodeID), ca.Pool)
	}
	a := startNode(t, dsn, "admit-a", nil, withTLS)
	awaitUp(t, []*testNode{a})

	// The intruders: bare memberlists whose transport endpoint is a plain
	// TCP listener, one named after the cluster, one not.
	intruder := func(id, clusterName string) *memberlist.Membership {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() { // accept and hang up, as a process without TLS would fail the handshake
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
		m, err := memberlist.New(memberlist.Config{NodeID: id, Endpoint: ln.Addr().String(), ClusterName: clusterName,
			Timing: testTiming(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Shutdown() })
		return m
	}
	same := intruder("intruder", "shoal")
	other := intruder("stranger", "another")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := same.Join(ctx, []string{a.GossipAddr()}); err != nil {
		t.Fatalf("the intruder's gossip join: %v", err)
	}
	if err := other.Join(ctx, []string{a.GossipAddr()}); err == nil {
		t.Fatal("a process of another cluster joined the gossip")
	}
	b := startNode(t, dsn, "admit-b", []string{a.GossipAddr()}, withTLS)
	awaitUp(t, []*testNode{a, b}) // both listed Up: admission lets the cluster's nodes in

	refusals := a.Membership().(interface{ Refusals() uint64 })
	eventually(t, "a's transport refused the intruder, which sees a Up", func() error {
		if refusals.Refusals() == 0 {
			return errString("no refusal yet")
		}
		if m, ok := same.View().Member(a.Self()); !ok || m.Status != cluster.Up {
			return errString("the intruder does not see a Up yet")
		}
		return nil
	})
	for _, n := range []*testNode{a, b} {
		for _, m := range n.Membership().View().Members() {
			if m.Address.Node == "intruder" || m.Address.Node == "stranger" {
				t.Fatalf("%s lists %s (%s)", n.Self(), m.Address, m.Status)
			}
		}
	}
}

type errString string

func (e errString) Error() string { return string(e) }
