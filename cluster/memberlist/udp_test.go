package memberlist_test

import (
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/cluster/memberlist"
)

// waitReal polls cond on the wall clock, with a deadline generous enough
// for a busy 2-core machine; it asserts the outcome, never the time taken.
func waitReal(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 30 s: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func newUDPNode(t *testing.T, id string) *node {
	t.Helper()
	timing := memberlist.DefaultTiming()
	// Quicker gossip than the LAN defaults so the test converges fast, and
	// the LAN failure detector so a busy machine causes no false failures.
	timing.GossipInterval, timing.PushPullInterval = 50*time.Millisecond, 2*time.Second
	m, err := memberlist.New(memberlist.Config{
		NodeID: id, Incarnation: 7, Endpoint: "endpoint-" + id, BindAddr: "127.0.0.1", BindPort: 0,
		ClusterName: "udp-test", Timing: timing, Logger: quiet,
	})
	if err != nil {
		t.Fatalf("New(%s): %v", id, err)
	}
	n := &node{Membership: m}
	_, cancel := m.Subscribe(n.record)
	t.Cleanup(func() {
		cancel()
		_ = m.Shutdown()
	})
	return n
}

func TestThreeNodesJoinAndLeaveOverUDPAndTCP(t *testing.T) {
	a, b, c := newUDPNode(t, "a"), newUDPNode(t, "b"), newUDPNode(t, "c")
	for _, n := range []*node{a, b, c} {
		host, port, err := net.SplitHostPort(n.Addr())
		if err != nil || host != "127.0.0.1" || port == "0" {
			t.Fatalf("%s listens at %q, want 127.0.0.1 and a real port", n.Self(), n.Addr())
		}
	}
	ctx := t.Context()
	if err := a.Bootstrap(ctx); err != nil {
		t.Fatal(err)
	}
	for _, n := range []*node{b, c} {
		if err := n.Join(ctx, []string{a.Addr()}); err != nil {
			t.Fatalf("Join(%s): %v", n.Self(), err)
		}
	}
	for _, n := range []*node{a, b, c} {
		waitReal(t, fmt.Sprintf("%s sees three Up members", n.Self()), func() bool {
			v := n.View()
			up := 0
			for _, m := range v.Members() {
				if m.Status == cluster.Up {
					up++
				}
			}
			return up == 3
		})
		if o, _ := n.View().Oldest(""); o.Address != a.Self() {
			t.Errorf("%s sees oldest %s, want a", n.Self(), o.Address)
		}
	}

	if err := c.Leave(ctx); err != nil {
		t.Fatalf("Leave(c): %v", err)
	}
	for _, n := range []*node{a, b} {
		waitReal(t, fmt.Sprintf("%s sees c Down", n.Self()), func() bool {
			m, ok := n.member("c")
			return ok && m.Status == cluster.Down
		})
		if m, _ := n.member("b"); m.Status != cluster.Up {
			t.Errorf("%s sees b %s after c left, want Up", n.Self(), m.Status)
		}
	}
	if err := a.Leave(ctx); err != nil {
		t.Fatalf("Leave(a): %v", err)
	}
	waitReal(t, "b sees a Down and itself oldest", func() bool {
		m, _ := b.member("a")
		o, ok := b.View().Oldest("")
		return m.Status == cluster.Down && ok && o.Address == b.Self()
	})
}
