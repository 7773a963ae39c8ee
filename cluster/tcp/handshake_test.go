package tcp_test

import (
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
