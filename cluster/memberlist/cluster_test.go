package memberlist_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/cluster/memberlist"
	"github.com/shoal-dev/shoal/cluster/memberlist/faultnet"
)

// quiet discards memberlist's log lines; set SHOAL_TEST_LOG to see them.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// node is one member in a test cluster, with every change it was told.
type node struct {
	*memberlist.Membership
	transport *faultnet.Transport

	mu     sync.Mutex
	events []cluster.Event
}

func (n *node) record(c cluster.Change) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.events = append(n.events, c.Events...)
}

// saw reports whether n was told of kind for the member with node id id.
func (n *node) saw(kind cluster.EventKind, id string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.ContainsFunc(n.events, func(e cluster.Event) bool { return e.Kind == kind && e.Member.Address.Node == id })
}

// member returns what n's view says of the member with node id id.
func (n *node) member(id string) (cluster.Member, bool) {
	for _, m := range n.View().Members() {
		if m.Address.Node == id {
			return m, true
		}
	}
	return cluster.Member{}, false
}

func newNode(t *testing.T, network *faultnet.Network, id string, mutate ...func(*memberlist.Config)) *node {
	t.Helper()
	tr := network.NewTransport()
	cfg := memberlist.Config{
		NodeID: id, Incarnation: 1, Endpoint: "endpoint-" + id, Roles: []string{"shard"},
		AppVersion: "1.0.0", Transport: tr, Timing: memberlist.FastTiming(), Logger: quiet,
	}
	for _, f := range mutate {
		f(&cfg)
	}
	m, err := memberlist.New(cfg)
	if err != nil {
		t.Fatalf("New(%s): %v", id, err)
	}
	n := &node{Membership: m, transport: tr}
	_, cancel := m.Subscribe(n.record)
	t.Cleanup(func() {
		cancel()
		_ = m.Shutdown()
	})
	return n
}

// eventually waits, on the bubble's fake clock, until cond holds. The
// deadline is generous: on the fake clock it costs no wall time.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within a minute: %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// startCluster bootstraps a and joins the others through it, in order,
// and waits until every node sees every other Up.
func startCluster(t *testing.T, ctx context.Context, nodes ...*node) {
	t.Helper()
	if err := nodes[0].Bootstrap(ctx); err != nil {
		t.Fatalf("Bootstrap: %v", err)
	}
	for _, n := range nodes[1:] {
		if err := n.Join(ctx, []string{nodes[0].Addr()}); err != nil {
			t.Fatalf("Join(%s): %v", n.Self(), err)
		}
	}
	for _, n := range nodes {
		for _, o := range nodes {
			eventually(t, fmt.Sprintf("%s sees %s Up", n.Self(), o.Self()), func() bool {
				m, ok := n.member(o.Self().Node)
				return ok && m.Status == cluster.Up && !m.Unreachable
			})
		}
	}
}

func TestJoinGivesEveryNodeTheSameOrderAndOldest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		network := faultnet.NewNetwork(1)
		a, b, c := newNode(t, network, "a"), newNode(t, network, "b"), newNode(t, network, "c")
		startCluster(t, t.Context(), a, b, c)
		for _, n := range []*node{a, b, c} {
			v := n.View()
			var orders []uint64
			for _, m := range v.Members() {
				orders = append(orders, m.JoinOrder)
				if m.Endpoint != "endpoint-"+m.Address.Node || !m.HasRole("shard") || m.AppVersion != "1.0.0" {
					t.Errorf("%s sees %+v: metadata lost", n.Self(), m)
				}
			}
			if !slices.Equal(orders, []uint64{1, 2, 3}) {
				t.Errorf("%s sees join orders %v, want [1 2 3]", n.Self(), orders)
			}
			if oldest, ok := v.Oldest("shard"); !ok || oldest.Address != a.Self() {
				t.Errorf("%s sees oldest %v, want %s", n.Self(), oldest, a.Self())
			}
		}
	})
}
