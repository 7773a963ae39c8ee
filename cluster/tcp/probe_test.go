package tcp_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/cluster/clustertest"
	"github.com/shoal-dev/shoal/cluster/tcp"
	"github.com/shoal-dev/shoal/internal/testcert"
)

// Probe passes for a peer that would accept this transport, and keeps and
// breaks nothing there: a link already open carries on over its
// connection, and no refusal is counted.
func TestProbeAcceptedLeavesLinksAlone(t *testing.T) {
	ca := testcert.New(t, "shoal test CA")
	nw := newNetwork(t, pingRegistry(), nil)
	nw.tune = withTLS(tcp.MutualTLS(ca.Leaf(t, "b"), ca.Pool))
	got := newRecorder()
	b := nw.start(t, addr("b", 1), got.handle, "")
	nw.tune = withTLS(tcp.MutualTLS(ca.Leaf(t, "a"), ca.Pool))
	a := nw.start(t, addr("a", 1), func(cluster.UniqueAddress, any) {}, "")
	sendOrFlush(t, a, b.Self(), clustertest.Ping{Sender: "a", Seq: 1})
	flush(t, a, b.Self())
	if err := a.Probe(context.Background(), b.Self(), b.Addr().String()); err != nil {
		t.Fatalf("Probe: %v", err)
	}
	sendOrFlush(t, a, b.Self(), clustertest.Ping{Sender: "a", Seq: 2})
	flush(t, a, b.Self())
	if seqs := got.from("a"); !slices.Equal(seqs, []int{1, 2}) {
		t.Fatalf("received %v, want [1 2]", seqs)
	}
	if d := a.Stats().Dials; d != 1 {
		t.Errorf("a dialled %d times, want 1: the probe broke the link's connection", d)
	}
	if r := b.Stats().RefusedHandshakes; r != 0 {
		t.Errorf("b counts %d refused handshakes", r)
	}
}

// Probe fails, with ErrRefused, wherever a link would be refused.
func TestProbeRefused(t *testing.T) {
	ca := testcert.New(t, "shoal test CA")
	other := testcert.New(t, "another cluster's CA")
	cases := []struct {
		name   string
		b, a   func(*tcp.Config)
		target cluster.UniqueAddress // what a expects at b's endpoint
		refuse bool                  // ErrRefused, not just a failed handshake
	}{
		{name: "another cluster name", a: func(c *tcp.Config) { c.ClusterName = "other" }, target: addr("b", 1), refuse: true},
		{name: "another wire version", a: func(c *tcp.Config) { tcp.SetWireVersion(c, cluster.WireVersion+1) }, target: addr("b", 1), refuse: true},
		{name: "another incarnation at the endpoint", target: addr("b", 2), refuse: true},
		{name: "another node at the endpoint", target: addr("c", 1), refuse: true},
		{name: "a certificate that does not name the node",
			b: withTLS(tcp.MutualTLS(ca.Leaf(t, "c"), ca.Pool)), a: withTLS(tcp.MutualTLS(ca.Leaf(t, "a"), ca.Pool)), target: addr("b", 1), refuse: true},
		{name: "a prober without a certificate",
			b: withTLS(tcp.MutualTLS(ca.Leaf(t, "b"), ca.Pool)), target: addr("b", 1)},
		{name: "a prober with another CA's certificate",
			b: withTLS(tcp.MutualTLS(ca.Leaf(t, "b"), ca.Pool)), a: withTLS(tcp.MutualTLS(other.Leaf(t, "a"), other.Pool)), target: addr("b", 1)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			nw := newNetwork(t, pingRegistry(), tc.b)
			b := nw.start(t, addr("b", 1), func(cluster.UniqueAddress, any) {}, "")
			nw.tune = tc.a
			a := nw.start(t, addr("a", 1), func(cluster.UniqueAddress, any) {}, "")
			err := a.Probe(context.Background(), tc.target, b.Addr().String())
			if err == nil {
				t.Fatal("Probe passed")
			}
			if tc.refuse && !errors.Is(err, tcp.ErrRefused) {
				t.Fatalf("Probe: %v, want ErrRefused", err)
			}
			if tc.name == "another wire version" && !errors.Is(err, cluster.ErrWireVersion) {
				t.Fatalf("Probe: %v, want a wire version error", err)
			}
		})
	}
}
