package sharding

import (
	"io"
	"log/slog"
	"testing"
	"testing/synctest"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/entity"
)

// blockingRegion is a region that takes its time over a membership change.
type blockingRegion struct {
	regionRuntime // nil: only membershipChanged is called
	calls         chan struct{}
	release       chan struct{}
}

func (r *blockingRegion) membershipChanged() {
	r.calls <- struct{}{}
	<-r.release
}

// A region slow to take a membership change holds up neither the
// membership (whose subscribers must not block) nor the view the node
// reads; the changes that came meanwhile reach it as one. Before the view
// holds the node, it is a Joining member with Config.Roles.
func TestMembershipChangesDoNotWaitForTheRegions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		self := cluster.UniqueAddress{Node: "a", Incarnation: 1}
		lm := cluster.NewLocalMembership(self, cluster.View{})
		sys, err := entity.NewSystem(entity.Config{NodeID: self.Node, Incarnation: self.Incarnation, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		s, err := New(sys, Config{Membership: lm, Roles: []string{"host"}})
		if err != nil {
			t.Fatal(err)
		}
		if m := s.selfMember(); m.Address != self || m.Status != cluster.Joining || !m.HasRole("host") {
			t.Fatalf("self before the view holds it: %+v", m)
		}
		slow := &blockingRegion{calls: make(chan struct{}, 10), release: make(chan struct{})}
		s.mu.Lock()
		s.regions["T"] = slow
		s.mu.Unlock()

		if err := lm.Update(cluster.Member{Address: self, Roles: []string{"host"}, Status: cluster.Up, JoinOrder: 1}); err != nil {
			t.Fatal(err)
		}
		<-slow.calls // the region now blocks; the membership does not
		for i, node := range []string{"b", "c"} {
			if err := lm.Update(cluster.Member{Address: cluster.UniqueAddress{Node: node, Incarnation: 1}, Status: cluster.Up, JoinOrder: uint64(i + 2)}); err != nil {
				t.Fatal(err)
			}
		}
		if n := len(s.members()); n != 3 {
			t.Fatalf("the node reads %d members while its region is busy, want 3", n)
		}
		if m := s.selfMember(); m.Status != cluster.Up {
			t.Fatalf("self once the view holds it: %+v", m)
		}
		close(slow.release)
		<-slow.calls // b and c, as one change
		synctest.Wait()
		select {
		case <-slow.calls:
			t.Fatal("the region was told once per change, not once per pending set")
		default:
		}
		s.mu.Lock()
		delete(s.regions, "T")
		s.mu.Unlock()
		s.Terminate()
	})
}
