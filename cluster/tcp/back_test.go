package tcp_test

import (
	"bytes"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/cluster/clustertest"
	"github.com/shoal-dev/shoal/cluster/frame"
	"github.com/shoal-dev/shoal/cluster/tcp"
)

// A reply goes back on the connection its addressee dialled to this
// node: to the addressee's Handler, or its EncodedHandler for the
// manifest, without this node dialling a link of its own. With no such
// connection it takes a link, as SendEncoded does.
func TestRepliesGoBackOnTheDiallersConnection(t *testing.T) {
	reg := pingRegistry()
	rec := &received{}
	nw := newNetwork(t, reg, nil)
	a := nw.start(t, addr("a", 1), func(_ cluster.UniqueAddress, msg any) { rec.add("handler " + msg.(clustertest.Ping).Sender) }, "")
	b := nw.start(t, addr("b", 1), func(cluster.UniqueAddress, any) {}, "")
	c := nw.start(t, addr("c", 1), func(cluster.UniqueAddress, any) {}, "")
	a.HandleEncoded("reply", func(from cluster.UniqueAddress, payload []byte) error {
		rec.add(from.Node + " encoded " + string(payload))
		return nil
	})
	// a's link to b, then b's replies back on it.
	if err := a.Send(addr("b", 1), clustertest.Ping{Sender: "a"}); err != nil {
		t.Fatal(err)
	}
	if err := a.Flush(t.Context(), addr("b", 1)); err != nil {
		t.Fatal(err)
	}
	manifest, payload, err := reg.Encode(clustertest.Ping{Sender: "b"})
	if err != nil {
		t.Fatal(err)
	}
	for _, send := range []func() error{
		func() error { return b.SendReply(addr("a", 1), manifest, payload) },
		func() error { return b.SendReply(addr("a", 1), "reply", []byte("from b")) },
		// c has no connection from a: its reply takes a link.
		func() error { return c.SendReply(addr("a", 1), "reply", []byte("from c")) },
	} {
		if err := send(); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "three replies", func() bool { return len(rec.all()) == 3 })
	got := rec.all()
	if want := []string{"handler b", "b encoded from b", "c encoded from c"}; !sameElements(got, want) {
		t.Fatalf("received %q, want %q", got, want)
	}
	if s := b.Stats(); s.SentBack != 2 || s.Sent != 2 || s.Links != 0 {
		t.Fatalf("b's stats %+v: want 2 sent back and no link of its own", s)
	}
	if s := c.Stats(); s.SentBack != 0 || s.Sent != 1 || s.Links != 1 {
		t.Fatalf("c's stats %+v: want its reply on a link", s)
	}
	if s := a.Stats(); s.Delivered != 3 || s.BadFrames != 0 {
		t.Fatalf("a's stats %+v: want the 3 replies delivered", s)
	}
}

// listenAs listens on loopback as node, a peer the test speaks for by
// hand: nw's transports dial it there.
func listenAs(t *testing.T, nw *network, node cluster.UniqueAddress) net.Listener {
	t.Helper()
	ln, err := newListener(t)
	if err != nil {
		t.Fatal(err)
	}
	nw.dir.set(node, ln.Addr().String())
	return ln
}

func sameElements(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	left := map[string]int{}
	for _, s := range a {
		left[s]++
	}
	for _, s := range b {
		if left[s]--; left[s] < 0 {
			return false
		}
	}
	return true
}

// A dialler of an earlier release does not say it reads frames back: a
// reply to it never goes back on its connection, which it would not read,
// but on a link.
func TestNoReplyGoesBackToADiallerThatDoesNotReadBack(t *testing.T) {
	nw := newNetwork(t, pingRegistry(), nil)
	b := nw.start(t, addr("b", 1), func(cluster.UniqueAddress, any) {}, "")
	old := addr("old", 1)
	p := dialRaw(t, b.Addr().String())
	if answer := p.hello(old, addr("b", 1), "test"); answer.Manifest != tcp.WelcomeManifest {
		t.Fatalf("answer to hello: %+v", answer)
	}
	p.write(encodePing(t, old, addr("b", 1), clustertest.Ping{Sender: "old", Seq: 1}))
	eventually(t, "the ping delivered", func() bool { return b.Stats().Delivered == 1 })
	// old has no endpoint: the link cannot dial it, and the reply waits
	// in its queue; nothing goes back.
	if err := b.SendReply(old, "reply", []byte("x")); err != nil && !errors.Is(err, cluster.ErrUnreachable) {
		t.Fatal(err)
	}
	p.conn.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if f, err := frame.ReadFrame(p.br, 1<<20); !isTimeout(err) {
		t.Fatalf("read %+v, %v back on a dialler that does not read back", f, err)
	}
	if s := b.Stats(); s.SentBack != 0 {
		t.Fatalf("b's stats %+v: want nothing sent back", s)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// A listener of an earlier release answers the dialler's word that it
// reads frames back as the flush it looks like, with an acknowledgement
// without an id: the dialler ignores it, and its link serves on, its
// flushes answered.
func TestAListenerThatDoesNotWriteBackServesOn(t *testing.T) {
	nw := newNetwork(t, pingRegistry(), nil)
	a := nw.start(t, addr("a", 1), func(cluster.UniqueAddress, any) {}, "")
	old := addr("old", 1)
	ln := listenAs(t, nw, old)
	frames := make(chan frame.Frame, 16)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		if _, err := frame.ReadFrame(conn, 4096); err != nil {
			return
		}
		frame.WriteFrame(conn, frame.Frame{From: old, To: addr("a", 1), Manifest: tcp.WelcomeManifest, Payload: tcp.WelcomePayload()}, 4096)
		for {
			f, err := frame.ReadFrame(conn, 4096)
			if err != nil {
				return
			}
			frames <- f
			if f.Manifest == tcp.FlushManifest { // as every release answers a flush
				frame.WriteFrame(conn, frame.Frame{From: old, To: f.From, Manifest: tcp.FlushAckManifest, Payload: f.Payload}, 4096)
			}
		}
	}()
	if err := a.Send(old, clustertest.Ping{Sender: "a", Seq: 1}); err != nil {
		t.Fatal(err)
	}
	if err := a.Flush(t.Context(), old); err != nil {
		t.Fatalf("Flush through a listener that does not write back: %v", err)
	}
	first := <-frames
	if first.Manifest != tcp.FlushManifest || len(first.Payload) != 0 {
		t.Fatalf("first frame after the handshake %+v, want a flush without an id", first)
	}
	if second := <-frames; second.Manifest != clustertest.PingManifest {
		t.Fatalf("second frame %+v, want the ping", second)
	}
	if third := <-frames; third.Manifest != tcp.FlushManifest || len(third.Payload) == 0 {
		t.Fatalf("third frame %+v, want the flush marker", third)
	}
	if s := a.Stats(); s.BadFrames != 0 || s.Delivered != 0 {
		t.Fatalf("a's stats %+v: the acknowledgements are not messages", s)
	}
}

// A reply over the frame size limit is refused as SendEncoded refuses it.
func TestReplyOverTheLimitIsRefused(t *testing.T) {
	nw := newNetwork(t, pingRegistry(), nil)
	a := nw.start(t, addr("a", 1), func(cluster.UniqueAddress, any) {}, "")
	b := nw.start(t, addr("b", 1), func(cluster.UniqueAddress, any) {}, "")
	if err := a.Send(addr("b", 1), clustertest.Ping{Sender: "a"}); err != nil {
		t.Fatal(err)
	}
	if err := a.Flush(t.Context(), addr("b", 1)); err != nil {
		t.Fatal(err)
	}
	err := b.SendReply(addr("a", 1), "big", bytes.Repeat([]byte{1}, 5000))
	if !errors.Is(err, cluster.ErrFrameTooLarge) {
		t.Fatalf("a reply over the limit: %v", err)
	}
	if s := b.Stats(); s.SentBack != 0 || s.Sent != 0 {
		t.Fatalf("b's stats %+v", s)
	}
}

// A dialler that says it reads frames back and then stops reading: the
// replies written back fill its socket, the frame the socket takes in
// part is finished by a goroutine until the write deadline, which then
// closes the connection, and meanwhile every other reply takes the link.
// No SendReply waits for the socket.
func TestADiallerThatStopsReadingBackLosesItsConnection(t *testing.T) {
	nw := newNetwork(t, pingRegistry(), func(c *tcp.Config) { c.WriteTimeout = 200 * time.Millisecond })
	b := nw.start(t, addr("b", 1), func(cluster.UniqueAddress, any) {}, "")
	old := addr("old", 1)
	p := dialRaw(t, b.Addr().String())
	if answer := p.hello(old, addr("b", 1), "test"); answer.Manifest != tcp.WelcomeManifest {
		t.Fatalf("answer to hello: %+v", answer)
	}
	p.write(frame.Frame{From: old, To: addr("b", 1), Manifest: tcp.FlushManifest}) // reads back
	p.write(encodePing(t, old, addr("b", 1), clustertest.Ping{Sender: "old", Seq: 1}))
	eventually(t, "the ping delivered", func() bool { return b.Stats().Delivered == 1 })
	payload := bytes.Repeat([]byte{7}, 3000)
	const replies = 5000 // some 15 MB: more than loopback's socket buffers
	for range replies {
		// old has no endpoint: a reply that takes the link is refused.
		if err := b.SendReply(old, "reply", payload); err != nil && !errors.Is(err, cluster.ErrUnreachable) {
			t.Fatal(err)
		}
	}
	back := b.Stats().SentBack
	if back == 0 || back == replies {
		t.Fatalf("%d of %d replies sent back: want the socket to fill, and the rest to take the link", back, replies)
	}
	// The frame left unfinished at the write deadline closes the
	// connection, and b's reader of it ends.
	eventually(t, "b closed the connection", func() bool { return b.InboundConnections("old") == 0 })
	// The dialler reads again: whole frames, then the end of a connection
	// that b closed inside a frame.
	var read uint64
	for {
		p.conn.SetReadDeadline(time.Now().Add(deadline))
		f, err := frame.ReadFrame(p.br, 1<<20)
		if err != nil {
			if isTimeout(err) {
				t.Fatalf("read %d frames back, then the connection stayed open: %v", read, err)
			}
			break
		}
		if f.Manifest != "reply" || !bytes.Equal(f.Payload, payload) {
			t.Fatalf("frame %d written back: %s, %d bytes", read, f.Manifest, len(f.Payload))
		}
		read++
	}
	if read >= back {
		t.Fatalf("read %d whole frames of %d sent back: want the last cut short", read, back)
	}
}
