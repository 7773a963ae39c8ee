package tcp_test

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/cluster/clustertest"
	"github.com/shoal-dev/shoal/cluster/tcp"
)

// A handler that runs long for one peer does not hold up the handshake of
// another: the new connection is welcomed while the handler still runs.
func TestHandshakeDoesNotWaitForTheHandler(t *testing.T) {
	nw := newNetwork(t, pingRegistry(), nil)
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	b := nw.start(t, addr("b", 1), func(cluster.UniqueAddress, any) {
		once.Do(func() {
			close(entered)
			<-release
		})
	}, "")
	var released sync.Once
	unblock := func() { released.Do(func() { close(release) }) }
	t.Cleanup(unblock) // before b's Close, which waits for the handler
	a := nw.start(t, addr("a", 1), func(cluster.UniqueAddress, any) {}, "")
	if err := a.Send(b.Self(), clustertest.Ping{Sender: "a", Seq: 1}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-entered:
	case <-time.After(deadline):
		t.Fatal("the handler never ran")
	}

	p := dialRaw(t, b.Addr().String())
	if answer := p.hello(addr("c", 1), b.Self(), "test"); answer.Manifest != tcp.WelcomeManifest {
		t.Fatalf("answer %q while a handler ran, want welcome", answer.Manifest)
	}
	unblock()
	flush(t, a, b.Self())
}

// A dialler that claims a newer incarnation of a node, which the resolver
// does not confirm, is served but kills nothing: the listener keeps its
// link to the incarnation it knows, and that incarnation's own connection
// keeps delivering.
func TestUnconfirmedIncarnationClaimKillsNothing(t *testing.T) {
	nw := newNetwork(t, pingRegistry(), nil)
	gotA := newRecorder()
	a := nw.start(t, addr("a", 1), gotA.handle, "")
	gotX := newRecorder()
	x := nw.start(t, addr("x", 1), gotX.handle, "")
	sendOrFlush(t, a, x.Self(), clustertest.Ping{Sender: "a", Seq: 1})
	flush(t, a, x.Self())
	sendOrFlush(t, x, a.Self(), clustertest.Ping{Sender: "x", Seq: 1})
	flush(t, x, a.Self())

	// The directory knows x#1 only: x#5 is a claim nobody confirms.
	liar := dialRaw(t, a.Addr().String())
	if answer := liar.hello(addr("x", 5), a.Self(), "test"); answer.Manifest != tcp.WelcomeManifest {
		t.Fatalf("answer %q to an unconfirmed incarnation, want welcome", answer.Manifest)
	}

	if err := a.Send(x.Self(), clustertest.Ping{Sender: "a", Seq: 2}); err != nil {
		t.Fatalf("Send to x#1 after x#5 was claimed: %v", err)
	}
	flush(t, a, x.Self())
	if seqs := gotX.from("a"); !slices.Equal(seqs, []int{1, 2}) {
		t.Fatalf("x#1 received %v, want [1 2]", seqs)
	}
	sendOrFlush(t, x, a.Self(), clustertest.Ping{Sender: "x", Seq: 2})
	flush(t, x, a.Self())
	if seqs := gotA.from("x"); !slices.Equal(seqs, []int{1, 2}) {
		t.Fatalf("a received %v from x#1, want [1 2]", seqs)
	}
	if dials := x.Stats().Dials; dials != 1 {
		t.Errorf("x#1 dialled a %d times, want 1: its connection was not superseded", dials)
	}
}

// A dialler the resolver calls stale is refused, even before the listener
// has seen its successor.
func TestStaleDiallerRefused(t *testing.T) {
	nw := newNetwork(t, pingRegistry(), nil)
	got := newRecorder()
	a := nw.start(t, addr("a", 1), got.handle, "")
	nw.dir.set(addr("x", 2), "127.0.0.1:1") // x#2 replaced x#1, and never dialled a
	p := dialRaw(t, a.Addr().String())
	if answer := p.hello(addr("x", 1), a.Self(), "test"); answer.Manifest != tcp.RefuseManifest {
		t.Fatalf("answer %q to a stale incarnation, want a refusal", answer.Manifest)
	}
	eventually(t, "the refusal counted", func() bool { return a.Stats().RefusedHandshakes == 1 })
}

// A connection that a newer one of the same sender replaced delivers
// nothing more, not even frames it had read before the swap, and the
// newer one's frames come after the older one's last delivery.
func TestSupersededConnectionDeliversNothingMore(t *testing.T) {
	got, b, entered, unblock := startHeldAtFirst(t)
	x := addr("x", 1)
	// Both frames in one write: the second is read while the handler
	// still holds the first.
	welcomed(t, x, b).writeRaw(pings(t, x, b.Self(), 1, 2))
	awaitHeld(t, entered)
	newer := dialRaw(t, b.Addr().String())
	if answer := newer.hello(x, b.Self(), "test"); answer.Manifest != tcp.WelcomeManifest {
		t.Fatalf("answer %q to the newer connection, want welcome", answer.Manifest)
	}
	newer.write(encodePing(t, x, b.Self(), clustertest.Ping{Sender: "x", Seq: 3}))
	unblock()
	eventually(t, "the newer connection's frame delivered", func() bool { return len(got.from("x")) >= 2 })
	if seqs := got.from("x"); !slices.Equal(seqs, []int{1, 3}) {
		t.Fatalf("b received %v from x, want [1 3]", seqs)
	}
}
