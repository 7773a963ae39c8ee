package memberlist_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	ml "github.com/hashicorp/memberlist"

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

// bubble runs test in a synctest bubble: memberlist's timers run on its
// fake clock, so failure detection takes no wall time and a busy machine
// cannot make a probe late.
func bubble(t *testing.T, test func(t *testing.T)) {
	synctest.Test(t, func(t *testing.T) {
		// Runs after every node's Shutdown (cleanups run last first):
		// memberlist's probes outlive Shutdown briefly, and the bubble must
		// end with no goroutine left. The wait is free on the fake clock.
		t.Cleanup(func() { time.Sleep(10 * time.Second) })
		test(t)
	})
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
	bubble(t, func(t *testing.T) {
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
			addrs := n.GossipAddrs()
			for _, o := range []*node{a, b, c} {
				if got := addrs[o.Self().String()]; got != o.Addr() {
					t.Errorf("%s sees %s gossip at %q, want %q", n.Self(), o.Self(), got, o.Addr())
				}
			}
		}
	})
}

func TestPartitionMakesMembersUnreachableAndHealingRestoresThem(t *testing.T) {
	bubble(t, func(t *testing.T) {
		network := faultnet.NewNetwork(2)
		a, b, c := newNode(t, network, "a"), newNode(t, network, "b"), newNode(t, network, "c")
		startCluster(t, t.Context(), a, b, c)

		network.Isolate(c.transport.Addr())
		for _, n := range []*node{a, b} {
			eventually(t, fmt.Sprintf("%s sees c unreachable", n.Self()), func() bool {
				m, ok := n.member("c")
				return ok && m.Unreachable && m.Status == cluster.Up
			})
		}
		eventually(t, "c sees a and b unreachable", func() bool {
			ma, _ := c.member("a")
			mb, _ := c.member("b")
			return ma.Unreachable && mb.Unreachable
		})
		if m, _ := a.member("b"); m.Unreachable {
			t.Errorf("a sees b unreachable, though their link was never cut")
		}
		// The oldest reachable member is a, in every view; c sees none but itself.
		if o, _ := b.View().Oldest(""); o.Address != a.Self() {
			t.Errorf("b sees oldest %s, want a", o.Address)
		}
		if o, _ := c.View().Oldest(""); o.Address != c.Self() {
			t.Errorf("c sees oldest %s, want itself", o.Address)
		}

		// Longer than GossipToTheDeadTime: only reconnection heals now.
		time.Sleep(3 * memberlist.FastTiming().GossipToTheDeadTime)
		network.Heal()
		for _, n := range []*node{a, b, c} {
			for _, o := range []*node{a, b, c} {
				eventually(t, fmt.Sprintf("%s sees %s reachable again", n.Self(), o.Self()), func() bool {
					m, ok := n.member(o.Self().Node)
					return ok && !m.Unreachable && m.Status == cluster.Up
				})
			}
		}
		if !a.saw(cluster.MemberUnreachable, "c") || !a.saw(cluster.MemberReachable, "c") {
			t.Errorf("a was not told c became unreachable and then reachable: %v", a.events)
		}
		if !c.saw(cluster.MemberReachable, "a") {
			t.Errorf("c was not told a became reachable")
		}
	})
}

func TestCrashedMemberIsDownAfterReconnectTimeoutThenRemoved(t *testing.T) {
	bubble(t, func(t *testing.T) {
		network := faultnet.NewNetwork(3)
		a, b, c := newNode(t, network, "a"), newNode(t, network, "b"), newNode(t, network, "c")
		startCluster(t, t.Context(), a, b, c)

		if err := c.Shutdown(); err != nil { // a crash: no leave message
			t.Fatal(err)
		}
		eventually(t, "a sees c unreachable", func() bool { m, _ := a.member("c"); return m.Unreachable })
		if m, _ := a.member("c"); m.Status != cluster.Up {
			t.Errorf("c is %s right after failing, want still Up (and Unreachable)", m.Status)
		}
		eventually(t, "a sees c Down", func() bool { m, _ := a.member("c"); return m.Status == cluster.Down })
		eventually(t, "a removes c", func() bool { _, ok := a.member("c"); return !ok })
		for _, kind := range []cluster.EventKind{cluster.MemberUnreachable, cluster.MemberDowned, cluster.MemberRemoved} {
			if !a.saw(kind, "c") {
				t.Errorf("a was not told %s for c", kind)
			}
		}
		if a.saw(cluster.MemberReachable, "c") {
			t.Errorf("a was told c became reachable: it never came back")
		}
		if o, _ := b.View().Oldest(""); o.Address != a.Self() {
			t.Errorf("b sees oldest %s, want a", o.Address)
		}
	})
}

func TestGracefulLeaveIsLeavingThenDownEverywhere(t *testing.T) {
	bubble(t, func(t *testing.T) {
		network := faultnet.NewNetwork(4)
		a, b, c := newNode(t, network, "a"), newNode(t, network, "b"), newNode(t, network, "c")
		startCluster(t, t.Context(), a, b, c)

		// The oldest leaves: Leaving first, so the others stop choosing it
		// while it hands off.
		if err := a.SetLeaving(t.Context()); err != nil {
			t.Fatalf("SetLeaving: %v", err)
		}
		for _, n := range []*node{b, c} {
			eventually(t, fmt.Sprintf("%s sees a Leaving", n.Self()), func() bool {
				m, _ := n.member("a")
				return m.Status == cluster.Leaving
			})
			if o, _ := n.View().Oldest(""); o.Address != b.Self() {
				t.Errorf("%s sees oldest %s while a leaves, want b", n.Self(), o.Address)
			}
		}
		if err := a.Leave(t.Context()); err != nil {
			t.Fatalf("Leave: %v", err)
		}
		if m, _ := a.member("a"); m.Status != cluster.Down {
			t.Errorf("a sees itself %s after Leave, want Down", m.Status)
		}
		for _, n := range []*node{b, c} {
			eventually(t, fmt.Sprintf("%s sees a Down", n.Self()), func() bool {
				m, _ := n.member("a")
				return m.Status == cluster.Down
			})
			if n.saw(cluster.MemberUnreachable, "a") {
				t.Errorf("%s saw a unreachable: a graceful leave is not a failure", n.Self())
			}
		}
		if err := a.Join(t.Context(), []string{b.Addr()}); !errors.Is(err, memberlist.ErrShutdown) {
			t.Errorf("Join after Leave = %v, want ErrShutdown", err)
		}
		if err := a.Leave(t.Context()); err != nil {
			t.Errorf("second Leave = %v, want nil", err)
		}
	})
}

func TestWrongKeyCannotJoin(t *testing.T) {
	bubble(t, func(t *testing.T) {
		network := faultnet.NewNetwork(5)
		key := []byte("0123456789abcdef")
		withKey := func(k []byte) func(*memberlist.Config) {
			return func(c *memberlist.Config) { c.SecretKey = k }
		}
		a := newNode(t, network, "a", withKey(key))
		b := newNode(t, network, "b", withKey(key))
		intruder := newNode(t, network, "x", withKey([]byte("fedcba9876543210")))
		plain := newNode(t, network, "p")
		startCluster(t, t.Context(), a, b)

		for _, n := range []*node{intruder, plain} {
			err := n.Join(t.Context(), []string{a.Addr()})
			if !errors.Is(err, memberlist.ErrNoSeedReachable) {
				t.Errorf("%s joined a keyed cluster: Join = %v, want ErrNoSeedReachable", n.Self(), err)
			}
		}
		time.Sleep(5 * time.Second) // let any gossip that slipped through spread
		for _, n := range []*node{a, b} {
			if n.View().Len() != 2 {
				t.Errorf("%s sees %v, want only a and b", n.Self(), n.View().Members())
			}
		}
		if m, _ := intruder.member("x"); m.Status != cluster.Joining {
			t.Errorf("intruder is %s, want still Joining", m.Status)
		}
	})
}

func TestKeyringRotationKeepsTheClusterTogether(t *testing.T) {
	bubble(t, func(t *testing.T) {
		network := faultnet.NewNetwork(6)
		oldKey, newKey := []byte("0123456789abcdef"), []byte("fedcba9876543210")
		var keyrings []*ml.Keyring
		withKeyring := func(primary []byte, others ...[]byte) func(*memberlist.Config) {
			return func(c *memberlist.Config) {
				kr, err := ml.NewKeyring(others, primary)
				if err != nil {
					t.Fatal(err)
				}
				keyrings = append(keyrings, kr)
				c.Keyring = kr
			}
		}
		// Step 1 of a rotation: everyone accepts the new key, still sends the old.
		a := newNode(t, network, "a", withKeyring(oldKey, newKey))
		b := newNode(t, network, "b", withKeyring(oldKey, newKey))
		startCluster(t, t.Context(), a, b)
		// Step 2: everyone sends the new key; step 3: the old one goes.
		for _, kr := range keyrings {
			if err := kr.UseKey(newKey); err != nil {
				t.Fatal(err)
			}
		}
		for _, kr := range keyrings {
			if err := kr.RemoveKey(oldKey); err != nil {
				t.Fatal(err)
			}
		}
		stale := newNode(t, network, "s", withKeyring(oldKey))
		if err := stale.Join(t.Context(), []string{a.Addr()}); !errors.Is(err, memberlist.ErrNoSeedReachable) {
			t.Errorf("a node with only the retired key joined: Join = %v", err)
		}
		fresh := newNode(t, network, "f", withKeyring(newKey))
		if err := fresh.Join(t.Context(), []string{a.Addr()}); err != nil {
			t.Fatalf("a node with the new key cannot join: %v", err)
		}
		for _, n := range []*node{a, b, fresh} {
			eventually(t, fmt.Sprintf("%s sees three Up members", n.Self()), func() bool {
				v := n.View()
				for _, m := range v.Members() {
					if m.Status != cluster.Up || m.Unreachable {
						return false
					}
				}
				return v.Len() == 3
			})
		}
	})
}

func TestJoinWithNoSeedAnsweringIsATypedError(t *testing.T) {
	bubble(t, func(t *testing.T) {
		network := faultnet.NewNetwork(7)
		a := newNode(t, network, "a")
		err := a.Join(t.Context(), []string{"127.0.0.1:9999"})
		if !errors.Is(err, memberlist.ErrNoSeedReachable) {
			t.Fatalf("Join = %v, want ErrNoSeedReachable", err)
		}
		if !strings.Contains(err.Error(), "127.0.0.1:9999") {
			t.Errorf("error %q does not name the seed", err)
		}
		for _, seeds := range [][]string{nil, {a.Addr()}} {
			err := a.Join(t.Context(), seeds)
			if !errors.Is(err, memberlist.ErrNoSeedReachable) || strings.Contains(err.Error(), "%!") {
				t.Errorf("Join(%q) = %v, want ErrNoSeedReachable", seeds, err)
			}
		}
		if m, _ := a.member("a"); m.Status != cluster.Joining {
			t.Errorf("a is %s after failed joins, want Joining", m.Status)
		}
	})
}

// synctestWaitRound lets the cluster gossip for one fast-timing probe
// interval of fake time.
func synctestWaitRound() { time.Sleep(memberlist.FastTiming().ProbeInterval) }

// newLogLogger is a *log.Logger for raw memberlist nodes, discarding.
func newLogLogger() *log.Logger { return log.New(io.Discard, "", 0) }

func TestClusterFormsAndHealsUnderPacketLoss(t *testing.T) {
	bubble(t, func(t *testing.T) {
		network := faultnet.NewNetwork(11)
		network.SetLoss(0.1) // UDP only: joins over streams still succeed
		a, b, c := newNode(t, network, "a"), newNode(t, network, "b"), newNode(t, network, "c")
		startCluster(t, t.Context(), a, b, c)
		network.Partition([]string{a.transport.Addr(), b.transport.Addr()}, []string{c.transport.Addr()})
		eventually(t, "a sees c unreachable", func() bool { m, _ := a.member("c"); return m.Unreachable })
		network.Heal()
		for _, n := range []*node{a, b, c} {
			eventually(t, fmt.Sprintf("%s sees everyone reachable", n.Self()), func() bool {
				for _, m := range n.View().Members() {
					if m.Unreachable || m.Status != cluster.Up {
						return false
					}
				}
				return n.View().Len() == 3
			})
		}
	})
}
