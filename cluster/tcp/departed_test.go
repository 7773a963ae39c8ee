package tcp_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/cluster/clustertest"
	"github.com/shoal-dev/shoal/cluster/tcp"
)

// remove forgets a's node, as a membership view that dropped it would.
func (d *directory) remove(a cluster.UniqueAddress) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if e, ok := d.latest[a.Node]; ok && e.addr == a {
		delete(d.latest, a.Node)
	}
}

// A peer that left and was removed from the directory resolves as
// unreachable: its link dies at its next dial instead of redialling until
// Close. Its queue is lost, Flush returns, the goroutine ends, and a later
// Send fails at once.
func TestLinkToRemovedPeerDies(t *testing.T) {
	nw := newNetwork(t, pingRegistry(), nil)
	a := nw.start(t, addr("a", 1), func(cluster.UniqueAddress, any) {}, "")
	b := nw.start(t, addr("b", 1), func(cluster.UniqueAddress, any) {}, "")
	sendOrFlush(t, a, b.Self(), clustertest.Ping{Sender: "a", Seq: 1})
	flush(t, a, b.Self())
	if st := a.Stats(); st.Links != 1 || a.RunningLinks() != 1 {
		t.Fatalf("Links = %d, running %d before b left; want 1, 1", st.Links, a.RunningLinks())
	}

	if err := a.HoldLink(b.Self()); err != nil {
		t.Fatal(err)
	}
	for i := 2; i <= 6; i++ {
		sendOrFlush(t, a, b.Self(), clustertest.Ping{Sender: "a", Seq: i})
	}
	nw.dir.remove(b.Self())
	if err := b.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	a.ReleaseLink(b.Self())

	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	if err := a.Flush(ctx, b.Self()); !errors.Is(err, cluster.ErrUnreachable) {
		t.Fatalf("Flush to a removed peer: %v, want an error wrapping ErrUnreachable", err)
	}
	if st := a.Stats(); st.Links != 0 {
		t.Errorf("Links = %d after the peer was removed, want 0", st.Links)
	}
	eventually(t, "the link's goroutine to end", func() bool { return a.RunningLinks() == 0 })
	if err := a.Send(b.Self(), clustertest.Ping{Sender: "a", Seq: 7}); !errors.Is(err, cluster.ErrUnreachable) {
		t.Fatalf("Send to a removed peer: %v, want ErrUnreachable", err)
	}
	if err := a.FlushAll(ctx); err != nil {
		t.Fatalf("FlushAll: %v", err)
	}
}

// followingNode starts a transport that resolves through, and follows, its
// own membership view, which holds itself and peers.
func followingNode(t *testing.T, nw *network, self cluster.UniqueAddress, peers ...*tcp.Transport) (*tcp.Transport, *cluster.LocalMembership) {
	t.Helper()
	members := []cluster.Member{{Address: self, Endpoint: "127.0.0.1:1", Status: cluster.Up}}
	for _, p := range peers {
		members = append(members, cluster.Member{Address: p.Self(), Endpoint: p.Addr().String(), Status: cluster.Up})
	}
	view, err := cluster.NewView(members...)
	if err != nil {
		t.Fatal(err)
	}
	m := cluster.NewLocalMembership(self, view)
	tune := nw.tune
	nw.tune = func(c *tcp.Config) {
		c.Resolve, c.Membership = nil, m
	}
	defer func() { nw.tune = tune }()
	return nw.start(t, self, func(cluster.UniqueAddress, any) {}, ""), m
}

// With Config.Membership, a member removed from the view loses its links
// at once, idle ones included, with nothing left running; a Down member's
// links die as stale.
func TestMembershipEndsLinksToDepartedMembers(t *testing.T) {
	nw := newNetwork(t, pingRegistry(), nil)
	b := nw.start(t, addr("b", 1), func(cluster.UniqueAddress, any) {}, "")
	c := nw.start(t, addr("c", 1), func(cluster.UniqueAddress, any) {}, "")
	a, m := followingNode(t, nw, addr("a", 1), b, c)
	for _, peer := range []*tcp.Transport{b, c} {
		sendOrFlush(t, a, peer.Self(), clustertest.Ping{Sender: "a", Seq: 1})
		flush(t, a, peer.Self())
	}
	if st := a.Stats(); st.Links != 2 {
		t.Fatalf("Links = %d, want 2", st.Links)
	}

	// b is removed while its link is idle and connected.
	m.Remove(b.Self())
	if st := a.Stats(); st.Links != 1 {
		t.Errorf("Links = %d right after b was removed, want 1", st.Links)
	}
	eventually(t, "b's link goroutine to end", func() bool { return a.RunningLinks() == 1 })
	if err := a.Send(b.Self(), clustertest.Ping{Sender: "a", Seq: 2}); !errors.Is(err, cluster.ErrUnreachable) {
		t.Fatalf("Send to removed b: %v, want ErrUnreachable", err)
	}

	// c goes Down with messages queued on a held link: they are lost, and
	// FlushAll does not wait for them.
	if err := a.HoldLink(c.Self()); err != nil {
		t.Fatal(err)
	}
	lostBefore := a.Stats().Lost
	for i := 2; i <= 4; i++ {
		sendOrFlush(t, a, c.Self(), clustertest.Ping{Sender: "a", Seq: i})
	}
	down := cluster.Member{Address: c.Self(), Endpoint: c.Addr().String(), Status: cluster.Down}
	if err := m.Update(down); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	if err := a.FlushAll(ctx); err != nil {
		t.Fatalf("FlushAll with a Down member: %v", err)
	}
	if lost := a.Stats().Lost - lostBefore; lost != 3 {
		t.Errorf("Lost %d, want the 3 queued for Down c", lost)
	}
	if err := a.Send(c.Self(), clustertest.Ping{Sender: "a", Seq: 5}); !errors.Is(err, cluster.ErrStaleIncarnation) {
		t.Fatalf("Send to Down c: %v, want ErrStaleIncarnation", err)
	}
	eventually(t, "every link goroutine to end", func() bool { return a.RunningLinks() == 0 })
	if st := a.Stats(); st.Links != 0 {
		t.Errorf("Links = %d, want 0", st.Links)
	}
}

// Forget ends a link whatever the resolver says, and a later Send makes a
// new one.
func TestForget(t *testing.T) {
	nw := newNetwork(t, pingRegistry(), nil)
	a := nw.start(t, addr("a", 1), func(cluster.UniqueAddress, any) {}, "")
	got := newRecorder()
	b := nw.start(t, addr("b", 1), got.handle, "")
	sendOrFlush(t, a, b.Self(), clustertest.Ping{Sender: "a", Seq: 1})
	flush(t, a, b.Self())
	a.Forget(b.Self())
	if st := a.Stats(); st.Links != 0 {
		t.Fatalf("Links = %d after Forget, want 0", st.Links)
	}
	eventually(t, "the link goroutine to end", func() bool { return a.RunningLinks() == 0 })
	sendOrFlush(t, a, b.Self(), clustertest.Ping{Sender: "a", Seq: 2})
	flush(t, a, b.Self())
	if seqs := got.from("a"); !slices.Equal(seqs, []int{1, 2}) {
		t.Fatalf("b received %v, want [1 2]", seqs)
	}
}
