package memberlist_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	ml "github.com/hashicorp/memberlist"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/cluster/memberlist"
	"github.com/shoal-dev/shoal/cluster/memberlist/faultnet"
)

// garbageMeta is a memberlist delegate whose node metadata is not Shoal's.
type garbageMeta struct{}

func (garbageMeta) NodeMeta(int) []byte                 { return []byte("not shoal metadata") }
func (garbageMeta) NotifyMsg([]byte)                    {}
func (garbageMeta) GetBroadcasts(int, int) [][]byte     { return nil }
func (garbageMeta) LocalState(bool) []byte              { return nil }
func (garbageMeta) MergeRemoteState(buf []byte, _ bool) {}

func TestANodeWithForeignMetadataIsNotAMember(t *testing.T) {
	bubble(t, func(t *testing.T) {
		network := faultnet.NewNetwork(8)
		a, b := newNode(t, network, "a"), newNode(t, network, "b")
		startCluster(t, t.Context(), a, b)

		cfg := ml.DefaultLocalConfig()
		cfg.Name, cfg.Transport, cfg.Delegate, cfg.Logger = "foreign", network.NewTransport(), garbageMeta{}, newLogLogger()
		foreign, err := ml.Create(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = foreign.Shutdown() })
		if _, err := foreign.Join([]string{a.Addr()}); err != nil {
			t.Fatalf("raw memberlist join: %v", err)
		}
		eventually(t, "the foreign node has gossiped for a while", func() bool { return foreign.NumMembers() == 3 })
		for range 20 { // many gossip rounds
			synctestWaitRound()
		}
		for _, n := range []*node{a, b} {
			if n.View().Len() != 2 {
				t.Errorf("%s sees %v, want a and b only", n.Self(), n.View().Members())
			}
		}
	})
}

func TestASecondProcessAsTheSameIncarnationCannotJoin(t *testing.T) {
	bubble(t, func(t *testing.T) {
		network := faultnet.NewNetwork(9)
		a, b := newNode(t, network, "a"), newNode(t, network, "b")
		startCluster(t, t.Context(), a, b)

		twin := newNode(t, network, "b", func(c *memberlist.Config) { c.Endpoint = "elsewhere" })
		err := twin.Join(t.Context(), []string{a.Addr()})
		if !errors.Is(err, memberlist.ErrDuplicateIncarnation) {
			t.Fatalf("Join of a second b#1 = %v, want ErrDuplicateIncarnation", err)
		}
		for range 20 {
			synctestWaitRound()
		}
		if m, _ := a.member("b"); m.Endpoint != "endpoint-b" || m.Unreachable {
			t.Errorf("a sees b as %+v, want the first b, reachable", m)
		}
	})
}

func TestConcurrentJoinsAgreeOnOrderAndOldest(t *testing.T) {
	bubble(t, func(t *testing.T) {
		network := faultnet.NewNetwork(10)
		seed := newNode(t, network, "seed")
		if err := seed.Bootstrap(t.Context()); err != nil {
			t.Fatal(err)
		}
		nodes := []*node{seed}
		for i := range 4 {
			nodes = append(nodes, newNode(t, network, fmt.Sprintf("n%d", i)))
		}
		var wg sync.WaitGroup
		for _, n := range nodes[1:] {
			wg.Go(func() {
				if err := n.Join(t.Context(), []string{seed.Addr()}); err != nil {
					t.Errorf("Join(%s): %v", n.Self(), err)
				}
			})
		}
		wg.Wait()
		for _, n := range nodes {
			eventually(t, fmt.Sprintf("%s sees five Up members", n.Self()), func() bool {
				up := 0
				for _, m := range n.View().Members() {
					if m.Status == cluster.Up && !m.Unreachable {
						up++
					}
				}
				return up == 5
			})
		}
		// Join orders may tie; every view holds the same ones, so every node
		// names the same oldest, and the bootstrap node is it.
		want := nodes[0].View().Members()
		for _, n := range nodes[1:] {
			got := n.View().Members()
			for i := range want {
				if got[i].Address != want[i].Address || got[i].JoinOrder != want[i].JoinOrder {
					t.Errorf("%s sees %s with order %d, %s sees order %d", n.Self(), got[i].Address, got[i].JoinOrder, seed.Self(), want[i].JoinOrder)
				}
			}
			if o, _ := n.View().Oldest(""); o.Address != seed.Self() {
				t.Errorf("%s sees oldest %s, want the seed", n.Self(), o.Address)
			}
		}
		for _, m := range want {
			if m.Address != seed.Self() && m.JoinOrder < 2 {
				t.Errorf("%s has join order %d, want > the seed's 1", m.Address, m.JoinOrder)
			}
		}
	})
}
