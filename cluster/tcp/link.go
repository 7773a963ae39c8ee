package tcp

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/cluster/frame"
	"github.com/shoal-dev/shoal/internal/metrics"
)

// errLinkDead is wrapped by the errors of a link that will never send
// again: its incarnation is stale or its transport closed.
var errLinkDead = errors.New("tcp: link dead")

// errMarkerLost: a flush marker was written on a connection that broke
// before acknowledging it; Flush sends another.
var errMarkerLost = errors.New("tcp: flush marker lost")

// item is one queued frame body: a message, or a flush marker. Most are
// a message whose body lies in the link's frames (neither pooled nor
// rare): an item is kept small, for every message appends one.
type item struct {
	body   []byte
	pooled *[]byte // body's buffer, handed back once body is copied out
	rare   *itemRare
}

// itemRare is what an item seldom has: a flush marker, or the connection
// a sender began to write the frame inline on (see writeInline), and how
// much of it (length prefix included) went there: the rest goes on that
// connection, the whole frame again on another.
type itemRare struct {
	marker  *flushWaiter
	on      net.Conn
	written int
}

// framed reports whether its body lies in the link's frames.
func (it *item) framed() bool { return it.pooled == nil && it.rare == nil }

// marker is its flush marker, nil for a message.
func (it *item) marker() *flushWaiter {
	if it.rare == nil {
		return nil
	}
	return it.rare.marker
}

type flushWaiter struct {
	id   uint64
	done chan error // buffered: gets one result
}

// link is the outbound half of one link: a bounded queue and the goroutine
// that dials the peer and writes the queue to it in batches.
type link struct {
	t    *Transport
	to   cluster.UniqueAddress
	head frame.Head    // of every frame from t's node to to, for enqueueFrame
	wake chan struct{} // capacity 1: something changed

	mu     sync.Mutex
	queue  []item
	queued int // messages in queue (markers do not count)
	// frames holds the bodies of the queued items marked framed, one
	// after the other in queue order: SendEncoded marshals a frame here,
	// under mu, with no buffer of its own (see enqueueFrame).
	frames    []byte
	held      bool
	dead      error
	conn      net.Conn
	raw       syscall.RawConn         // conn's, when plain TCP: a sender may write to it inline
	writing   bool                    // a batch or an inline frame is being written on conn
	inline    []byte                  // the inline writer's buffer, its own while it writes
	lastWrite time.Time               // when the last write on conn began
	inflight  map[uint64]*flushWaiter // markers written on conn, not yet acknowledged
	nextFlush uint64
	m         *metrics.Peer // nil when metrics are off
}

func newLink(t *Transport, to cluster.UniqueAddress) *link {
	return &link{t: t, to: to, head: frame.NewHead(t.cfg.Self, to), wake: make(chan struct{}, 1), inflight: make(map[uint64]*flushWaiter), m: t.m.Peer(to.Node)}
}

func (l *link) signal() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// enqueue queues a message body (*buf, a buffer of the transport's pool,
// which the link hands back once it copied the body out), or writes it
// inline; it never blocks. On error buf is still the caller's.
func (l *link) enqueue(buf *[]byte) error {
	body := *buf
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.full(); err != nil {
		return err
	}
	if l.canWriteInline() {
		prefixed := append(binary.BigEndian.AppendUint32(l.inline[:0], uint32(len(body))), body...)
		it, done := l.writeInline(prefixed)
		if done {
			l.t.bodies.Put(buf) // written from l.inline, a copy
			return nil
		}
		if l.dead != nil {
			return l.dead
		}
		it.body, it.pooled = body, buf
		l.queueFirst(it)
	} else {
		l.queue = append(l.queue, item{body: body, pooled: buf})
	}
	l.queued++
	l.signal()
	return nil
}

// enqueueFrame is enqueue of the frame of manifest and payload from this
// node to l.to, marshalled under l.mu after l.head, into l.inline when it
// is written inline, else at the end of l.frames: no buffer is taken from
// or handed back to a pool. The frame must fit in the frame size limit
// (l.head.Size): its caller checked.
func (l *link) enqueueFrame(manifest string, payload []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.full(); err != nil {
		return err
	}
	if l.canWriteInline() {
		prefixed := appendPrefixed(l.inline[:0], l.head, manifest, payload)
		it, done := l.writeInline(prefixed)
		if done {
			return nil
		}
		if l.dead != nil {
			return l.dead
		}
		// Queued first, it cannot lie in l.frames (whose bodies are in
		// queue order), and l.inline is the next inline writer's: a copy
		// of its own, on this rare path.
		it.body = bytes.Clone(prefixed[4:])
		l.queueFirst(it)
	} else {
		start := len(l.frames)
		l.frames = l.head.Append(l.frames, manifest, payload)
		l.queue = append(l.queue, item{body: l.frames[start:len(l.frames):len(l.frames)]})
	}
	l.queued++
	l.signal()
	return nil
}

// appendPrefixed appends to dst the frame of manifest and payload after
// h, with its length prefix: what goes on a connection as it is.
func appendPrefixed(dst []byte, h frame.Head, manifest string, payload []byte) []byte {
	start := len(dst)
	dst = h.Append(append(dst, 0, 0, 0, 0), manifest, payload)
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-4))
	return dst
}

// full is the error of a link that takes no more messages: dead, or its
// queue full.
func (l *link) full() error {
	switch {
	case l.dead != nil:
		return l.dead
	case l.queued >= l.t.cfg.QueueCapacity:
		return fmt.Errorf("%w (%d queued)", cluster.ErrQueueFull, l.queued)
	}
	return nil
}

// canWriteInline says whether a sender may write its frame inline now
// (see inlineAfter).
func (l *link) canWriteInline() bool {
	return l.raw != nil && !l.writing && !l.held && len(l.queue) == 0 && time.Since(l.lastWrite) >= inlineAfter
}

// queueFirst queues what is left of a frame a sender began to write
// inline: ahead of what came while it was written.
func (l *link) queueFirst(it item) {
	l.queue = append(l.queue, item{})
	copy(l.queue[1:], l.queue)
	l.queue[0] = it
}

// inlineAfter is how long a link must have been quiet for a sender to
// write inline: a frame that comes soon after a write is queued, so that
// a stream of frames goes out in batches, one write(2) for many, while a
// frame that comes alone (an ask, its reply) goes out at once, without the
// hand-off to the link's goroutine.
const inlineAfter = 20 * time.Microsecond

// writeInline writes a frame, prefixed (its length prefix and body, in
// l.inline's array), on the connection from the sender's goroutine:
// nothing is queued and no batch is being written, so it goes in send
// order. It writes only what the socket takes at once (one non-blocking
// write(2)), so the sender never blocks; done is false when some or all
// of the frame is left, and it is then the item to queue first, once the
// caller set its body. l.mu is held, and released during the write;
// l.writing keeps the link's goroutine and other senders off conn
// meanwhile.
func (l *link) writeInline(prefixed []byte) (_ item, done bool) {
	conn, raw := l.conn, l.raw
	l.writing, l.lastWrite = true, time.Now()
	l.mu.Unlock()
	n := writeNow(raw, prefixed)
	l.mu.Lock()
	l.writing, l.inline = false, prefixed
	if n == len(prefixed) {
		l.t.stat.batches.Add(1)
		l.m.Sent(1, n)
		if len(l.queue) > 0 {
			l.signal()
		}
		return item{}, true
	}
	return item{rare: &itemRare{on: conn, written: n}}, false
}

// kill ends the link for good: what is queued is lost, flushes return.
func (l *link) kill(cause error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dead != nil {
		return
	}
	l.dead = fmt.Errorf("%w: %w", errLinkDead, cause)
	l.t.stat.lost.Add(uint64(l.queued))
	for i := range l.queue {
		if w := l.queue[i].marker(); w != nil {
			w.done <- l.dead
		}
	}
	for id, w := range l.inflight {
		w.done <- l.dead
		delete(l.inflight, id)
	}
	l.queue, l.queued, l.frames = nil, 0, nil
	if l.conn != nil {
		l.conn.Close()
	}
	l.signal()
}

// maxFramesKept bounds the capacity of l.frames kept once the queue is
// empty: a burst of large frames does not leave a large buffer behind.
const maxFramesKept = 256 << 10

// compactFrames moves the bodies in l.frames of the queued items to its
// start, once take has copied out those before them. Each body lies at
// least as far into l.frames as the bodies before it add up to, so none
// is overwritten before it is moved. l.mu is held.
func (l *link) compactFrames() {
	off := 0
	for i := range l.queue {
		if it := &l.queue[i]; it.framed() {
			n := copy(l.frames[off:], it.body)
			it.body = l.frames[off : off+n : off+n]
			off += n
		}
	}
	l.frames = l.frames[:off]
	if off == 0 && cap(l.frames) > maxFramesKept {
		l.frames = nil
	}
}

func (l *link) isDead() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.dead != nil
}

func (l *link) isHeld() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held
}

// setHeld stalls (or resumes) the writer without losing anything: a test
// hook for the conformance suite's Hold.
func (l *link) setHeld(held bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.held = held
	l.signal()
}

// breakConn closes the link's current connection under it.
func (l *link) breakConn() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn != nil {
		l.conn.Close()
	}
}

// flush queues markers until one is acknowledged (see Transport.Flush).
func (l *link) flush(ctx context.Context) error {
	for {
		l.mu.Lock()
		if l.dead != nil {
			err := l.dead
			l.mu.Unlock()
			return err
		}
		l.nextFlush++
		w := &flushWaiter{id: l.nextFlush, done: make(chan error, 1)}
		body, err := frame.Marshal(nil, frame.Frame{From: l.t.cfg.Self, To: l.to, Manifest: flushManifest,
			Payload: binary.AppendUvarint(nil, w.id)}, l.t.cfg.MaxFrameSize)
		if err != nil {
			l.mu.Unlock()
			return err
		}
		l.queue = append(l.queue, item{body: body, rare: &itemRare{marker: w}})
		l.signal()
		l.mu.Unlock()
		select {
		case err := <-w.done:
			if !errors.Is(err, errMarkerLost) {
				return err
			}
		case <-ctx.Done():
			return fmt.Errorf("tcp: flush to %s: %w", l.to, ctx.Err())
		}
	}
}

// acked completes the flush marker id written on conn.
func (l *link) acked(id uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if w := l.inflight[id]; w != nil {
		delete(l.inflight, id)
		w.done <- nil
	}
}

// run is the link's goroutine: dial when there is something to send, write
// until the connection breaks, redial with back-off.
func (l *link) run() {
	defer l.t.running.Add(-1)
	bo := l.t.newBackoff()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	failures := 0
	for l.waitWork() {
		conn, br, err := l.connect()
		if err != nil {
			switch {
			case errors.Is(err, cluster.ErrStaleIncarnation):
				l.t.log.Info("tcp: link to a stale incarnation dropped", "to", l.to, "err", err)
				l.t.markStale(l.to)
				l.t.dropLink(l, err)
				return
			case errors.Is(err, cluster.ErrUnreachable):
				// It resolved when the link was made: it has left.
				l.t.log.Info("tcp: link to a departed incarnation dropped", "to", l.to, "err", err)
				l.t.dropLink(l, err)
				return
			}
			if l.isDead() {
				return
			}
			if failures++; l.t.versionMismatch(err) {
				// Logged once per node and version; the link redials with
				// back-off, and its queue fills: Send reports ErrQueueFull.
			} else if failures == 1 {
				l.t.log.Warn("tcp: dial failed; redialling with back-off", "to", l.to, "err", err)
			}
			timer.Reset(bo.NextBackOff())
			select {
			case <-timer.C:
			case <-l.t.ctx.Done():
				return
			}
			continue
		}
		if failures > 1 {
			l.t.log.Info("tcp: link connected after failed dials", "to", l.to, "failures", failures)
		}
		if l.serve(conn, br) {
			failures = 0
			bo.Reset()
			continue
		}
		// Broken before carrying a batch: back off, or a peer that accepts
		// and drops every connection would be redialled in a busy loop.
		timer.Reset(bo.NextBackOff())
		select {
		case <-timer.C:
		case <-l.t.ctx.Done():
			return
		}
	}
}

// waitWork waits until the link has something to write and is not held;
// false means the link is dead.
func (l *link) waitWork() bool {
	for {
		l.mu.Lock()
		dead, ready := l.dead != nil, len(l.queue) > 0 && !l.held
		l.mu.Unlock()
		if dead {
			return false
		}
		if ready {
			return true
		}
		select {
		case <-l.wake:
		case <-l.t.ctx.Done():
			return false
		}
	}
}

// connect dials the peer and runs the handshake. An error wrapping
// cluster.ErrStaleIncarnation or cluster.ErrUnreachable means the peer is
// gone for good (only the resolver and a refusal naming a successor
// return those).
func (l *link) connect() (net.Conn, *bufio.Reader, error) {
	cfg := &l.t.cfg
	endpoint, err := cfg.Resolve(l.to)
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(l.t.ctx, cfg.DialTimeout+cfg.HandshakeTimeout)
	defer cancel()
	dialer := &net.Dialer{Timeout: cfg.DialTimeout}
	var conn net.Conn
	if cfg.ClientTLS != nil {
		conn, err = (&tls.Dialer{NetDialer: dialer, Config: cfg.ClientTLS}).DialContext(ctx, "tcp", endpoint)
	} else {
		conn, err = dialer.DialContext(ctx, "tcp", endpoint)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("tcp: dial %s at %s: %w", l.to, endpoint, err)
	}
	br, err := l.handshake(conn)
	if err != nil {
		conn.Close()
		if errors.Is(err, ErrRefused) {
			// It names the handshake already ("tcp: handshake refused ..."):
			// add where, not a second prefix.
			return nil, nil, fmt.Errorf("%w (dialed %s at %s)", err, l.to, endpoint)
		}
		return nil, nil, fmt.Errorf("tcp: handshake with %s at %s: %w", l.to, endpoint, err)
	}
	if err := l.announceBack(conn); err != nil {
		conn.Close()
		return nil, nil, fmt.Errorf("tcp: connection to %s at %s: %w", l.to, endpoint, err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dead != nil {
		conn.Close()
		return nil, nil, l.dead
	}
	l.conn, l.raw = conn, nil
	if tc, ok := conn.(*net.TCPConn); ok {
		l.raw, _ = tc.SyscallConn()
	}
	l.t.stat.dials.Add(1)
	return conn, br, nil
}

func (l *link) handshake(conn net.Conn) (*bufio.Reader, error) {
	return l.t.greet(conn, l.to, helloManifest)
}

// greet runs the dialler's side of the handshake on conn, whose TLS (if
// on) is up: the peer's certificate must name to's node, then a hello of
// manifest (helloManifest, or probeManifest for Probe) with this node's
// wire version and cluster name, and the answer read: nil for a welcome
// from to, an error wrapping ErrRefused otherwise.
func (t *Transport) greet(conn net.Conn, to cluster.UniqueAddress, manifest string) (*bufio.Reader, error) {
	self := t.cfg.Self
	if err := t.checkCertNamesNode(conn, to); err != nil {
		return nil, err
	}
	conn.SetDeadline(time.Now().Add(t.cfg.HandshakeTimeout))
	version := t.cfg.wireVersion
	hello := frame.Frame{From: self, To: to, Manifest: manifest, Payload: appendVersioned(nil, version, []byte(t.cfg.ClusterName))}
	if err := frame.WriteFrame(conn, hello, controlMaxSize); err != nil {
		return nil, err
	}
	br := bufio.NewReader(conn)
	answer, err := readControl(br)
	if err != nil {
		return nil, err
	}
	peerVersion, reason, err := parseVersioned(answer.Payload)
	switch {
	case err != nil:
		return nil, fmt.Errorf("%w: answer %q: %w", ErrRefused, answer.Manifest, err)
	case peerVersion != version && (answer.Manifest == welcomeManifest || answer.Manifest == refuseManifest):
		return nil, fmt.Errorf("%w: %w", ErrRefused, &cluster.WireVersionError{Local: version, Peer: peerVersion, Addr: to})
	}
	switch answer.Manifest {
	case welcomeManifest:
		if answer.From != to || answer.To != self {
			return nil, fmt.Errorf("%w: welcome from %s to %s", ErrRefused, answer.From, answer.To)
		}
	case refuseManifest:
		if answer.From.Node == to.Node && answer.From.Incarnation > to.Incarnation {
			return nil, fmt.Errorf("%w: %s now runs there: %w", ErrRefused, answer.From, cluster.ErrStaleIncarnation)
		}
		return nil, fmt.Errorf("%w by %s: %s", ErrRefused, answer.From, reason)
	default:
		return nil, fmt.Errorf("%w: answer %q", ErrRefused, answer.Manifest)
	}
	conn.SetDeadline(time.Time{})
	return br, nil
}

// serve writes batches on conn until it breaks or the link dies, while a
// second goroutine reads flush acknowledgements from it. It reports
// whether it wrote a batch.
func (l *link) serve(conn net.Conn, br *bufio.Reader) (wrote bool) {
	connDone := make(chan struct{})
	l.t.wg.Go(func() {
		defer close(connDone)
		defer conn.Close()
		var handlers encodedHandlers
		for {
			f, err := frame.ReadFrame(br, l.t.cfg.MaxFrameSize)
			switch {
			case errors.Is(err, frame.ErrTooLarge) || errors.Is(err, frame.ErrCorrupt):
				l.t.stat.badFrames.Add(1)
				continue
			case err != nil:
				return
			case f.Manifest == flushAckManifest:
				// One without an id answers the announcement (back.go).
				if id, ok := idFromPayload(f.Payload); ok {
					l.acked(id)
				}
			default: // written back
				l.receiveBack(f, &handlers)
			}
		}
	})
	defer func() {
		conn.Close()
		<-connDone
		l.mu.Lock()
		for id, w := range l.inflight {
			w.done <- errMarkerLost
			delete(l.inflight, id)
		}
		if l.conn == conn {
			l.conn, l.raw = nil, nil
		}
		l.mu.Unlock()
	}()
	buf := make([]byte, 0, l.t.cfg.MaxBatchBytes+4)
	for {
		var messages int
		var ok bool
		buf, messages, ok = l.take(buf[:0], conn, connDone)
		if !ok {
			return wrote
		}
		conn.SetWriteDeadline(time.Now().Add(l.t.cfg.WriteTimeout))
		_, err := conn.Write(buf)
		l.mu.Lock()
		l.writing = false
		if len(l.queue) > 0 {
			l.signal() // senders that found the batch being written queued
		}
		l.mu.Unlock()
		if err != nil {
			l.t.stat.lost.Add(uint64(messages))
			if !l.isDead() && l.t.ctx.Err() == nil {
				l.t.log.Info("tcp: link broke; redialling", "to", l.to, "lost", messages, "err", err)
			}
			return wrote
		}
		wrote = true
		l.t.stat.batches.Add(1)
		l.m.Sent(messages, len(buf))
	}
}

// take waits for queued frames and appends as many as fit in a batch to
// buf, each with its length prefix (but for what a sender wrote inline of
// it on conn already). ok is false when conn is done or the link dead;
// otherwise l.writing is set, for the caller to clear once it wrote buf.
func (l *link) take(buf []byte, conn net.Conn, connDone <-chan struct{}) (_ []byte, messages int, ok bool) {
	for {
		l.mu.Lock()
		if l.dead != nil {
			l.mu.Unlock()
			return buf, 0, false
		}
		if !l.held && !l.writing && len(l.queue) > 0 {
			n := 0
			for n < len(l.queue) && (n == 0 || len(buf)+4+len(l.queue[n].body) <= l.t.cfg.MaxBatchBytes) {
				it := &l.queue[n]
				start := len(buf)
				buf = binary.BigEndian.AppendUint32(buf, uint32(len(it.body)))
				buf = append(buf, it.body...)
				if r := it.rare; r != nil && r.on == conn && r.written > 0 {
					// Its first bytes went on this connection inline.
					buf = append(buf[:start], buf[start+r.written:]...)
				}
				if w := it.marker(); w != nil {
					l.inflight[w.id] = w
				} else {
					messages++
				}
				l.t.bodies.Put(it.pooled) // copied into buf
				l.queue[n] = item{}
				n++
			}
			// What is left moves to the front: the array is reused, not
			// outgrown by appends at its end.
			left := copy(l.queue, l.queue[n:])
			clear(l.queue[left:])
			l.queue = l.queue[:left]
			l.compactFrames()
			l.queued -= messages
			l.writing, l.lastWrite = true, time.Now()
			l.mu.Unlock()
			return buf, messages, true
		}
		l.mu.Unlock()
		select {
		case <-l.wake:
		case <-connDone:
			return buf, 0, false
		}
	}
}

// enqueueEither is enqueue of buf, or enqueueFrame of manifest and
// payload when buf is nil.
func (l *link) enqueueEither(buf *[]byte, manifest string, payload []byte) error {
	if buf != nil {
		return l.enqueue(buf)
	}
	return l.enqueueFrame(manifest, payload)
}
