package tcp_test

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/cluster/clustertest"
	"github.com/shoal-dev/shoal/cluster/frame"
	"github.com/shoal-dev/shoal/cluster/tcp"
)

// A burst that the reader reads faster than the handler takes it is
// handed over in order, and a flush behind it is answered only once
// every message before it was handled, however far the reader ran ahead.
func TestBurstIsHandedOverInOrderAndFlushedAfterIt(t *testing.T) {
	got, b, entered, unblock := startHeldAtFirst(t)
	x := addr("x", 1)
	p := welcomed(t, x, b)
	p.write(encodePing(t, x, b.Self(), clustertest.Ping{Sender: "x", Seq: 0}))
	awaitHeld(t, entered)
	// The handler holds message 0 while the burst and its flush arrive,
	// several batches' worth in one write.
	const n = 1000
	burst := bytes.NewBuffer(pings(t, x, b.Self(), 1, n))
	if err := frame.WriteFrame(burst, frame.Frame{From: x, To: b.Self(), Manifest: tcp.FlushManifest, Payload: []byte{7}}, 1<<20); err != nil {
		t.Fatal(err)
	}
	p.writeRaw(burst.Bytes())
	unblock()
	ack, err := p.read()
	if err != nil || ack.Manifest != tcp.FlushAckManifest {
		t.Fatalf("flush: %q, %v; want the acknowledgement", ack.Manifest, err)
	}
	seqs := got.from("x")
	if len(seqs) != n+1 {
		t.Fatalf("the flush was answered after %d of the %d messages before it", len(seqs), n+1)
	}
	if !slices.IsSorted(seqs) || seqs[0] != 0 || seqs[n] != n {
		t.Fatalf("messages out of order: %v", seqs)
	}
	if s := b.Stats().Delivered; s != n+1 {
		t.Fatalf("Stats().Delivered = %d, want %d", s, n+1)
	}
}

// startHeldAtFirst starts node b whose handler records what it gets and
// holds the first message until unblock (which the test's cleanup calls
// too); entered is closed once the handler holds it.
func startHeldAtFirst(t *testing.T) (got *recorder, b *tcp.Transport, entered chan struct{}, unblock func()) {
	t.Helper()
	nw := newNetwork(t, pingRegistry(), nil)
	got = newRecorder()
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	b = nw.start(t, addr("b", 1), func(from cluster.UniqueAddress, msg any) {
		got.handle(from, msg)
		once.Do(func() {
			close(entered)
			<-release
		})
	}, "")
	var released sync.Once
	unblock = func() { released.Do(func() { close(release) }) }
	t.Cleanup(unblock)
	return got, b, entered, unblock
}

// A transport closed while its handler holds the first message of a
// burst hands over nothing more, whether the rest waits in the
// deliverer's batches or on the socket, and Close waits for the handler.
func TestCloseStopsTheDeliverer(t *testing.T) {
	got, b, entered, unblock := startHeldAtFirst(t)
	x := addr("x", 1)
	welcomed(t, x, b).writeRaw(pings(t, x, b.Self(), 0, 1000))
	awaitHeld(t, entered)
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		defer cancel()
		done <- b.Close(ctx)
	}()
	eventually(t, "the transport closing", func() bool {
		return errors.Is(b.Send(addr("y", 1), clustertest.Ping{}), cluster.ErrClosed)
	})
	select {
	case err := <-done:
		t.Fatalf("Close returned (%v) while the handler still held a message", err)
	default:
	}
	unblock()
	if err := <-done; err != nil {
		t.Fatalf("Close: %v", err)
	}
	if seqs := got.from("x"); !slices.Equal(seqs, []int{0}) {
		t.Fatalf("handed over %d messages, want only the one held when the transport closed", len(seqs))
	}
}

// welcomed dials b as from, past the handshake.
func welcomed(t *testing.T, from cluster.UniqueAddress, b *tcp.Transport) *rawPeer {
	t.Helper()
	p := dialRaw(t, b.Addr().String())
	if answer := p.hello(from, b.Self(), "test"); answer.Manifest != tcp.WelcomeManifest {
		t.Fatalf("answer %q, want welcome", answer.Manifest)
	}
	return p
}

// pings returns the frames of from's pings first..last to to, for one write.
func pings(t *testing.T, from, to cluster.UniqueAddress, first, last int) []byte {
	t.Helper()
	var b bytes.Buffer
	for seq := first; seq <= last; seq++ {
		if err := frame.WriteFrame(&b, encodePing(t, from, to, clustertest.Ping{Sender: from.Node, Seq: seq}), 1<<20); err != nil {
			t.Fatal(err)
		}
	}
	return b.Bytes()
}

// awaitHeld waits until the handler of startHeldAtFirst holds a message.
func awaitHeld(t *testing.T, entered <-chan struct{}) {
	t.Helper()
	select {
	case <-entered:
	case <-time.After(deadline):
		t.Fatal("the handler never ran")
	}
}
