package tcp_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/cluster/clustertest"
	"github.com/shoal-dev/shoal/cluster/frame"
	"github.com/shoal-dev/shoal/cluster/tcp"
)

// logRecorder is a slog handler that keeps the messages logged.
type logRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, rec.Message)
	return nil
}
func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *logRecorder) WithGroup(string) slog.Handler      { return r }

func (r *logRecorder) count(prefix string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, m := range r.msgs {
		if strings.HasPrefix(m, prefix) {
			n++
		}
	}
	return n
}

// eventually waits for cond, checking it until the test's deadline.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	timeout := time.After(deadline)
	for !cond() {
		select {
		case <-tick.C:
		case <-timeout:
			t.Fatalf("gave up waiting: %s", what)
		}
	}
}

// rawPeer speaks the protocol by hand.
type rawPeer struct {
	t    *testing.T
	conn net.Conn
	br   *bufio.Reader
}

func dialRaw(t *testing.T, endpoint string) *rawPeer {
	t.Helper()
	conn, err := net.Dial("tcp", endpoint)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &rawPeer{t: t, conn: conn, br: bufio.NewReader(conn)}
}

func (p *rawPeer) write(f frame.Frame) {
	p.t.Helper()
	if err := frame.WriteFrame(p.conn, f, 1<<30); err != nil {
		p.t.Fatal(err)
	}
}

func (p *rawPeer) writeRaw(b []byte) {
	p.t.Helper()
	if _, err := p.conn.Write(b); err != nil {
		p.t.Fatal(err)
	}
}

func (p *rawPeer) read() (frame.Frame, error) {
	p.conn.SetReadDeadline(time.Now().Add(deadline))
	return frame.ReadFrame(p.br, 1<<20)
}

func (p *rawPeer) hello(from, to cluster.UniqueAddress, clusterName string) frame.Frame {
	p.t.Helper()
	p.write(frame.Frame{From: from, To: to, Manifest: tcp.HelloManifest, Payload: tcp.HelloPayload(clusterName)})
	answer, err := p.read()
	if err != nil {
		p.t.Fatalf("reading the answer to hello: %v", err)
	}
	return answer
}

func encodePing(t *testing.T, from, to cluster.UniqueAddress, p clustertest.Ping) frame.Frame {
	t.Helper()
	manifest, payload, err := pingRegistry().Encode(p)
	if err != nil {
		t.Fatal(err)
	}
	return frame.Frame{From: from, To: to, Manifest: manifest, Payload: payload}
}

// Bad frames are dropped, counted, and logged once per connection, and
// the connection keeps serving the good frames around them; a stream that
// ends inside a frame closes only its connection.
func TestBadFramesAreDroppedAndTheConnectionServes(t *testing.T) {
	logs := &logRecorder{}
	nw := newNetwork(t, pingRegistry(), func(c *tcp.Config) { c.Logger = slog.New(logs) })
	got := newRecorder()
	b := nw.start(t, addr("b", 1), got.handle, "")
	from := addr("a", 1)
	p := dialRaw(t, b.Addr().String())
	if answer := p.hello(from, b.Self(), "test"); answer.Manifest != tcp.WelcomeManifest {
		t.Fatalf("answer %q, want welcome", answer.Manifest)
	}

	p.write(encodePing(t, from, b.Self(), clustertest.Ping{Sender: "a", Seq: 1}))
	oversized, err := frame.Marshal(nil, encodePing(t, from, b.Self(), clustertest.Ping{Sender: "a", Seq: 2, Data: make([]byte, nw.maxFrame)}), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	p.writeRaw(append(binary.BigEndian.AppendUint32(nil, uint32(len(oversized))), oversized...))
	p.writeRaw([]byte{0, 0, 0, 3, 9, 0, 0}) // version 9: corrupt
	p.write(encodePing(t, from, addr("b", 7), clustertest.Ping{Sender: "a", Seq: 3}))
	p.write(frame.Frame{From: from, To: b.Self(), Manifest: "no.such.manifest", Payload: []byte("{}")})
	p.write(encodePing(t, addr("c", 1), b.Self(), clustertest.Ping{Sender: "a", Seq: 4})) // not the handshake's sender
	p.write(encodePing(t, from, b.Self(), clustertest.Ping{Sender: "a", Seq: 5}))
	p.write(frame.Frame{From: from, To: b.Self(), Manifest: tcp.FlushManifest, Payload: []byte{1}})
	if ack, err := p.read(); err != nil || ack.Manifest != tcp.FlushAckManifest {
		t.Fatalf("flush: %q, %v; want the acknowledgement", ack.Manifest, err)
	}
	if seqs := got.from("a"); !slices.Equal(seqs, []int{1, 5}) {
		t.Fatalf("received %v, want [1 5]: the good frames around the bad ones", seqs)
	}
	if n := b.Stats().BadFrames; n != 5 {
		t.Errorf("BadFrames = %d, want 5", n)
	}
	if n := logs.count("tcp: dropped a bad frame"); n != 1 {
		t.Errorf("%d log lines for the bad frames, want 1 per connection", n)
	}

	// A stream that ends inside a frame: the connection closes, with one
	// summary line, and the transport serves others.
	p.writeRaw([]byte{0, 0, 0, 100, 1, 2, 3})
	p.conn.(*net.TCPConn).CloseWrite()
	if _, err := p.read(); !errors.Is(err, io.EOF) {
		t.Fatalf("after a truncated frame the connection answered %v, want EOF", err)
	}
	eventually(t, "the summary log line", func() bool { return logs.count("tcp: bad frames dropped on a connection") == 1 })
	a2 := nw.start(t, addr("a", 2), func(cluster.UniqueAddress, any) {}, "")
	sendOrFlush(t, a2, b.Self(), clustertest.Ping{Sender: "a2", Seq: 1})
	flush(t, a2, b.Self())
	if seqs := got.from("a2"); !slices.Equal(seqs, []int{1}) {
		t.Fatalf("a second connection got %v through, want [1]", seqs)
	}
}

// A handshake is refused, with a typed reason and nothing delivered, for
// another cluster, another incarnation than the listener's, a sender
// older than one the listener has seen, and a first frame that is not a
// hello.
func TestHandshakeRefusals(t *testing.T) {
	nw := newNetwork(t, pingRegistry(), nil)
	got := newRecorder()
	b := nw.start(t, addr("b", 1), got.handle, "")
	endpoint := b.Addr().String()
	// a#2 has connected: a#1 is dead to b.
	a2 := nw.start(t, addr("a", 2), func(cluster.UniqueAddress, any) {}, "")
	sendOrFlush(t, a2, b.Self(), clustertest.Ping{Sender: "a", Seq: 1})
	flush(t, a2, b.Self())

	for _, tc := range []struct {
		name        string
		from, to    cluster.UniqueAddress
		clusterName string
	}{
		{"another cluster", addr("c", 1), addr("b", 1), "other"},
		{"another incarnation of the listener", addr("c", 1), addr("b", 2), "test"},
		{"a dead incarnation of the sender", addr("a", 1), addr("b", 1), "test"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := b.Stats().RefusedHandshakes
			p := dialRaw(t, endpoint)
			answer := p.hello(tc.from, tc.to, tc.clusterName)
			if answer.Manifest != tcp.RefuseManifest || answer.From != b.Self() {
				t.Fatalf("answer %q from %s, want a refusal from b#1", answer.Manifest, answer.From)
			}
			// The connection is closed: a message written now goes nowhere.
			p.conn.Write([]byte{0, 0, 0, 1, 1})
			if _, err := p.read(); err == nil {
				t.Fatal("the refused connection is still open")
			}
			if after := b.Stats().RefusedHandshakes; after != before+1 {
				t.Errorf("RefusedHandshakes %d → %d, want one more", before, after)
			}
		})
	}
	t.Run("not a hello", func(t *testing.T) {
		before := b.Stats().RefusedHandshakes
		p := dialRaw(t, endpoint)
		p.write(encodePing(t, addr("c", 1), b.Self(), clustertest.Ping{Sender: "c", Seq: 1}))
		if _, err := p.read(); err == nil {
			t.Fatal("answered a connection that sent a message before its hello")
		}
		eventually(t, "the refusal counted", func() bool { return b.Stats().RefusedHandshakes == before+1 })
	})
	t.Run("garbage", func(t *testing.T) {
		before := b.Stats().RefusedHandshakes
		p := dialRaw(t, endpoint)
		p.writeRaw([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
		if _, err := p.read(); err == nil {
			t.Fatal("answered a connection that sent HTTP")
		}
		eventually(t, "the refusal counted", func() bool { return b.Stats().RefusedHandshakes == before+1 })
	})
	if seqs := got.from("c"); len(seqs) != 0 {
		t.Fatalf("refused peers delivered %v", seqs)
	}
}

// A peer that stops reading fills its link's queue: Send returns
// ErrQueueFull at once (never blocks) and other links are unaffected.
func TestPeerThatStopsReading(t *testing.T) {
	nw := newNetwork(t, pingRegistry(), func(c *tcp.Config) { c.WriteTimeout = time.Hour })
	a := nw.start(t, addr("a", 1), func(cluster.UniqueAddress, any) {}, "")
	gotC := newRecorder()
	c := nw.start(t, addr("c", 1), gotC.handle, "")

	// "stuck" completes the handshake, then never reads again.
	ln, err := newListener(t)
	if err != nil {
		t.Fatal(err)
	}
	stuck := addr("stuck", 1)
	nw.dir.set(stuck, ln.Addr().String())
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		t.Cleanup(func() { conn.Close() })
		br := bufio.NewReader(conn)
		hello, err := frame.ReadFrame(br, 4096)
		if err != nil {
			return
		}
		frame.WriteFrame(conn, frame.Frame{From: stuck, To: hello.From, Manifest: tcp.WelcomeManifest, Payload: tcp.WelcomePayload()}, 4096)
	}()

	payload := make([]byte, 3000)
	full := 0
	for i := 1; full < 1000; i++ {
		err := a.Send(stuck, clustertest.Ping{Sender: "a", Seq: i, Data: payload})
		switch {
		case errors.Is(err, cluster.ErrQueueFull):
			full++
			if full == 1 {
				// Let the writer push what the socket buffers take
				// before counting refusals; a round trip to c does.
				sendOrFlush(t, a, c.Self(), clustertest.Ping{Sender: "a", Seq: i})
				flush(t, a, c.Self())
			}
		case err != nil:
			t.Fatalf("Send #%d: %v", i, err)
		default:
			full = 0
		}
		if i > 1_000_000 {
			t.Fatal("the link to a peer that never reads never filled")
		}
	}
	before := len(gotC.from("a"))
	sendOrFlush(t, a, c.Self(), clustertest.Ping{Sender: "a", Seq: -1})
	flush(t, a, c.Self())
	if after := len(gotC.from("a")); after != before+1 {
		t.Fatalf("c received %d → %d while the stuck link was full", before, after)
	}
}

func newListener(t *testing.T) (net.Listener, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err == nil {
		t.Cleanup(func() { ln.Close() })
	}
	return ln, err
}

// A write that a peer does not read within WriteTimeout breaks the
// connection, and the link dials again.
func TestWriteTimeoutRedialsAStuckPeer(t *testing.T) {
	nw := newNetwork(t, pingRegistry(), func(c *tcp.Config) { c.WriteTimeout = 20 * time.Millisecond })
	a := nw.start(t, addr("a", 1), func(cluster.UniqueAddress, any) {}, "")
	ln, err := newListener(t)
	if err != nil {
		t.Fatal(err)
	}
	stuck := addr("stuck", 1)
	nw.dir.set(stuck, ln.Addr().String())
	accepted := make(chan struct{}, 16)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { conn.Close() })
			hello, err := frame.ReadFrame(bufio.NewReader(conn), 4096)
			if err != nil {
				return
			}
			frame.WriteFrame(conn, frame.Frame{From: stuck, To: hello.From, Manifest: tcp.WelcomeManifest, Payload: tcp.WelcomePayload()}, 4096)
			select {
			case accepted <- struct{}{}:
			default:
			}
		}
	}()
	payload := make([]byte, 3000)
	timeout := time.After(deadline)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for dials := 0; dials < 2; {
		// Keep the link busy so that its writes fill the socket buffers;
		// when its queue is full, wait for it to move.
		if err := a.Send(stuck, clustertest.Ping{Sender: "a", Data: payload}); err == nil {
			continue
		}
		select {
		case <-accepted:
			dials++
		case <-tick.C:
		case <-timeout:
			t.Fatalf("%d connections from the link, want a second one after the write timed out", dials)
		}
	}
	if a.Stats().Lost == 0 {
		t.Error("Lost = 0: the batch whose write timed out was not counted")
	}
}
