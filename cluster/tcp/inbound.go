package tcp

import (
	"bufio"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/shoal-dev/shoal/internal/metrics"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/cluster/frame"
)

// Control frames travel as frames whose manifest starts with a NUL byte,
// which no codec manifest does.
const (
	helloManifest    = "\x00shoal.tcp.hello"    // dialler → listener: payload is the cluster name
	welcomeManifest  = "\x00shoal.tcp.welcome"  // listener → dialler: accepted
	refuseManifest   = "\x00shoal.tcp.refuse"   // listener → dialler: payload is the reason
	flushManifest    = "\x00shoal.tcp.flush"    // dialler → listener: payload is a uvarint id
	flushAckManifest = "\x00shoal.tcp.flushack" // listener → dialler: every frame before it was handled
)

// controlMaxSize bounds control frames: node ids, a cluster name, a reason.
const controlMaxSize = 4096

// inConn is one accepted connection, and the incarnation it carries
// messages from once its handshake passed.
type inConn struct {
	conn net.Conn
	from cluster.UniqueAddress
	// bad counts bad frames so far; the first is logged. The reader
	// counts those that do not parse, the deliverer may count those that
	// do not decode.
	bad  atomic.Int64
	read int // bytes read from conn, counted when metrics are on
	// superseded is set, under currentMu, once a newer connection of the
	// same sender (or of a newer incarnation of its node) replaced it as
	// current: it is never current again, so deliver reads the flag
	// instead of the map.
	superseded atomic.Bool
	acks       ackDelayer
	// back: the dialler reads frames back (see back.go). raw is conn's
	// when plain TCP (nil otherwise: nothing is written back), head the
	// head of frames to from; wmu orders the frames written on conn, and
	// guards wbuf, the buffer they are marshalled in.
	back atomic.Bool
	raw  syscall.RawConn
	head frame.Head
	m    *metrics.Peer // nil when metrics are off
	wmu  sync.Mutex
	wbuf []byte
}

// Read counts what the connection's reader takes from conn.
func (c *inConn) Read(p []byte) (int, error) {
	c.acks.beforeRead()
	n, err := c.conn.Read(p)
	c.read += n
	return n, err
}

func (t *Transport) acceptLoop() {
	retry := time.NewTimer(time.Hour)
	defer retry.Stop()
	for {
		conn, err := t.ln.Accept()
		if err != nil {
			if t.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			t.log.Warn("tcp: accept failed", "err", err)
			retry.Reset(10 * time.Millisecond) // a full file table, say: do not spin
			select {
			case <-retry.C:
			case <-t.ctx.Done():
				return
			}
			continue
		}
		c := &inConn{conn: conn, acks: newAckDelayer(conn)}
		if tc, ok := conn.(*net.TCPConn); ok {
			c.raw, _ = tc.SyscallConn()
		}
		t.mu.Lock()
		if t.closed {
			t.mu.Unlock()
			conn.Close()
			return
		}
		t.inbound[c] = struct{}{}
		t.mu.Unlock()
		t.wg.Go(func() { t.serveInbound(c) })
	}
}

func (t *Transport) serveInbound(c *inConn) {
	defer func() {
		c.conn.Close()
		t.mu.Lock()
		delete(t.inbound, c)
		t.mu.Unlock()
		t.currentMu.Lock()
		if t.current[c.from] == c {
			delete(t.current, c.from)
		}
		t.currentMu.Unlock()
		if bad := c.bad.Load(); bad > 1 {
			t.log.Warn("tcp: bad frames dropped on a connection", "from", c.from, "count", bad)
		}
	}()
	br, err := t.acceptHandshake(c)
	if errors.Is(err, errProbed) {
		return
	}
	if err != nil {
		if _, counted := errors.AsType[*refusalSent](err); !counted {
			t.stat.refused.Add(1)
		}
		if t.versionMismatch(err) {
			return
		}
		t.log.Warn("tcp: refused a connection", "remote", c.conn.RemoteAddr().String(), "err", err)
		return
	}
	self := t.cfg.Self
	peer := t.m.Peer(c.from.Node)
	c.m = peer             // before back is set, for the frames written back
	c.read = br.Buffered() // read with the handshake, the start of the first frames
	frames := frame.NewReader(br, t.cfg.MaxFrameSize)
	var handlers encodedHandlers
	d := newDelivery(t, c, frames)
	defer d.close()
	for {
		f, err := frames.Next()
		if peer != nil {
			peer.Received(0, c.read)
			c.read = 0
		}
		if err != nil {
			if errors.Is(err, frame.ErrTooLarge) || errors.Is(err, frame.ErrCorrupt) {
				t.badFrame(c, err)
				continue
			}
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && t.ctx.Err() == nil {
				t.log.Info("tcp: incoming connection ended", "from", c.from, "err", err)
			}
			return
		}
		var item inbound
		switch {
		case f.Manifest == flushManifest && isBackAnnouncement(f.Payload):
			c.back.Store(true)
			continue
		case f.Manifest == flushManifest:
			item = inbound{flush: true, payload: f.Payload}
		case f.To != self:
			t.badFrame(c, fmt.Errorf("frame for %s: %w", f.To, cluster.ErrStaleIncarnation))
			continue
		case f.From != c.from:
			t.badFrame(c, fmt.Errorf("%w: frame from %s on the connection of %s", frame.ErrCorrupt, f.From, c.from))
			continue
		default:
			peer.Received(1, 0) // a message frame
			if item, err = t.message(&handlers, f.Manifest, f.Payload); err != nil {
				t.badFrame(c, err)
				continue
			}
			if item.encoded == nil {
				d.keep()
			}
		}
		if !d.add(item, br.Buffered() > 0) {
			return
		}
	}
}

// acceptHandshake runs TLS (when on) and the hello exchange, and makes c
// the current connection of its sender.
func (t *Transport) acceptHandshake(c *inConn) (*bufio.Reader, error) {
	conn := c.conn
	conn.SetDeadline(time.Now().Add(t.cfg.HandshakeTimeout))
	if tc, ok := conn.(*tls.Conn); ok {
		if err := tc.HandshakeContext(t.ctx); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrRefused, tlsError(err))
		}
	}
	br := bufio.NewReaderSize(c, 64<<10)
	hello, err := readControl(br)
	if err != nil {
		return nil, fmt.Errorf("%w: reading hello: %w", ErrRefused, err)
	}
	probe := hello.Manifest == probeManifest
	if hello.Manifest != helloManifest && !probe {
		return nil, fmt.Errorf("%w: first frame %q is not a hello", ErrRefused, hello.Manifest)
	}
	self := t.cfg.Self
	version, clusterName, verr := parseVersioned(hello.Payload)
	refuse := func(reason string) (*bufio.Reader, error) {
		// Counted before the dialler can read the refusal: what it learns
		// from the answer, this node's Stats already say.
		t.stat.refused.Add(1)
		payload := []byte(reason) // what a node of version 1 reads
		if version != 1 {
			payload = appendVersioned(nil, t.cfg.wireVersion, payload)
		}
		answer := frame.Frame{From: self, To: hello.From, Manifest: refuseManifest, Payload: payload}
		frame.WriteFrame(conn, answer, controlMaxSize)
		return nil, &refusalSent{fmt.Errorf("%w: %s: %s", ErrRefused, hello.From, reason)}
	}
	switch {
	case verr != nil:
		version = t.cfg.wireVersion
		return refuse(verr.Error())
	case version != t.cfg.wireVersion:
		mismatch := &cluster.WireVersionError{Local: t.cfg.wireVersion, Peer: version, Addr: hello.From}
		refuse(mismatch.Error())
		return nil, &refusalSent{fmt.Errorf("%w: %w", ErrRefused, mismatch)}
	case string(clusterName) != t.cfg.ClusterName:
		return refuse(fmt.Sprintf("cluster %q, want %q", clusterName, t.cfg.ClusterName))
	case hello.From.Node == "":
		return refuse("no node id")
	case hello.To != self:
		return refuse(fmt.Sprintf("dialled %s, this is %s", hello.To, self))
	}
	if err := t.checkCertNamesNode(conn, hello.From); err != nil {
		return refuse(err.Error())
	}
	if probe { // a would-you-accept question: answered, nothing kept
		return nil, t.answerProbe(conn, hello)
	}
	// The dialler's claim is its own word: only the resolver (membership)
	// can confirm that it is a current member, and only a confirmed one
	// says that the older incarnations of its node are dead.
	_, err = t.cfg.Resolve(hello.From)
	if errors.Is(err, cluster.ErrStaleIncarnation) {
		t.markStale(hello.From)
		return refuse(fmt.Sprintf("%s is a dead incarnation: %v", hello.From, err))
	}
	confirmed := err == nil
	t.mu.Lock()
	if hello.From.Incarnation < t.staleBelow[hello.From.Node] {
		t.mu.Unlock()
		return refuse(fmt.Sprintf("%s is a dead incarnation", hello.From))
	}
	if confirmed {
		t.markStaleLocked(hello.From.Node, hello.From.Incarnation)
	}
	c.from = hello.From
	c.head = frame.NewHead(self, c.from)
	t.mu.Unlock()

	var superseded []*inConn
	t.currentMu.Lock()
	for from, old := range t.current {
		if from.Node == c.from.Node && (from.Incarnation == c.from.Incarnation || confirmed && from.Incarnation < c.from.Incarnation) {
			delete(t.current, from)
			old.superseded.Store(true)
			superseded = append(superseded, old)
		}
	}
	t.current[c.from] = c
	t.currentMu.Unlock()
	for _, old := range superseded {
		old.conn.Close()
	}

	welcome := frame.Frame{From: self, To: hello.From, Manifest: welcomeManifest, Payload: appendVersioned(nil, t.cfg.wireVersion, nil)}
	if err := frame.WriteFrame(conn, welcome, controlMaxSize); err != nil {
		return nil, fmt.Errorf("writing welcome: %w", err)
	}
	conn.SetDeadline(time.Time{})
	return br, nil
}

// isCurrent reports whether c is its sender's current connection: its
// handshake made it so, and no newer one has replaced it since.
// refusalSent is a handshake refused with an answer to the dialler, and
// counted as refused before the answer was written.
type refusalSent struct{ err error }

func (r *refusalSent) Error() string { return r.err.Error() }
func (r *refusalSent) Unwrap() error { return r.err }

func (t *Transport) isCurrent(c *inConn) bool { return !c.superseded.Load() }

// badFrame counts a dropped frame and logs the first of its connection.
func (t *Transport) badFrame(c *inConn, err error) {
	t.stat.badFrames.Add(1)
	if c.bad.Add(1) == 1 {
		t.log.Warn("tcp: dropped a bad frame; later ones on this connection are counted", "from", c.from, "err", err)
	}
}

// versionMismatch counts and logs a handshake that failed because the
// peer speaks another wire version: at Error the first time for the
// peer's node and version, at Debug after that (a peer redials with
// back-off until one of the two is replaced).
func (t *Transport) versionMismatch(err error) bool {
	var mismatch *cluster.WireVersionError
	if !errors.As(err, &mismatch) {
		return false
	}
	t.stat.versionMismatches.Add(1)
	key := fmt.Sprintf("%s %d", mismatch.Addr.Node, mismatch.Peer)
	if _, seen := t.versionLogged.LoadOrStore(key, struct{}{}); seen {
		t.log.Debug("tcp: peer speaks another wire version", "peer", mismatch.Addr, "err", err)
		return true
	}
	t.log.Error("tcp: peer speaks another wire version; no message passes between the two (logged once per node and version)",
		"peer", mismatch.Addr, "local_version", mismatch.Local, "peer_version", mismatch.Peer, "err", err)
	return true
}

// idFromPayload reads a control frame's id.
func idFromPayload(p []byte) (uint64, bool) {
	id, n := binary.Uvarint(p)
	return id, n > 0
}

// readControl reads a handshake frame. A peer speaking something else
// (TLS to a plaintext node, HTTP) has its first bytes read as a huge
// length: it is refused at once, without waiting for that many bytes.
func readControl(br *bufio.Reader) (frame.Frame, error) {
	prefix, err := br.Peek(4)
	if err != nil {
		return frame.Frame{}, err
	}
	if n := binary.BigEndian.Uint32(prefix); n > controlMaxSize {
		return frame.Frame{}, fmt.Errorf("%w: handshake frame of %d bytes, limit %d", frame.ErrTooLarge, n, controlMaxSize)
	}
	return frame.ReadFrame(br, controlMaxSize)
}

// tlsError is err of a TLS handshake, said to be one once: crypto/tls's
// own errors start with (or contain) "tls:" already.
func tlsError(err error) error {
	if strings.Contains(err.Error(), "tls:") {
		return err
	}
	return fmt.Errorf("tls: %w", err)
}
