package tcp

import (
	"net"
	"time"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/cluster/frame"
)

// The back channel: a connection carries its dialler's frames to the
// listener, and, once the dialler says it reads frames back, the
// listener's replies to the dialler too (docs/DESIGN.md, "Transport"). A
// reply then leaves on the connection its ask arrived on, as the answer
// of a request on one connection does: the loopback packets of its ACKs
// ride on data, where a reply on the listener's own link to the dialler
// costs both ends an ACK of its own, and some 3 µs an ask.
//
// The dialler says so with a flush marker without an id, the first frame
// after its handshake: a listener of an earlier release answers it as a
// flush, with an acknowledgement without an id, which the dialler ignores,
// and never writes anything else back; so the two interoperate, replies
// taking the listener's link as before.

// announceBack writes, on a link's new connection, that its dialler reads
// frames back.
func (l *link) announceBack(conn net.Conn) error {
	buf := appendPrefixed(nil, l.head, flushManifest, nil)
	conn.SetWriteDeadline(time.Now().Add(l.t.cfg.WriteTimeout))
	defer conn.SetWriteDeadline(time.Time{})
	if _, err := conn.Write(buf); err != nil {
		return err
	}
	l.m.Sent(0, len(buf)) // read as the connection's bytes, so written as the link's
	return nil
}

// isBackAnnouncement says whether a flush frame's payload is the dialler's
// word that it reads frames back: a flush marker's id is never empty.
func isBackAnnouncement(payload []byte) bool { return len(payload) == 0 }

// SendReply implements cluster.ReplySender: the frame of manifest and
// payload goes back on the connection to dialled to this node when to
// reads frames back and the connection's socket takes the whole frame at
// once, else as SendEncoded sends it. It never blocks.
func (t *Transport) SendReply(to cluster.UniqueAddress, manifest string, payload []byte) error {
	if c := t.backTo(to); c != nil && c.wmu.TryLock() {
		if t.writeBack(c, manifest, payload) {
			t.stat.sent.Add(1)
			t.stat.sentBack.Add(1)
			return nil
		}
	}
	return t.SendEncoded(to, manifest, payload)
}

// backTo is the current connection from to when it takes frames back.
func (t *Transport) backTo(to cluster.UniqueAddress) *inConn {
	t.currentMu.Lock()
	c := t.current[to]
	t.currentMu.Unlock()
	if c == nil || c.raw == nil || !c.back.Load() || c.superseded.Load() {
		return nil
	}
	return c
}

// writeBack writes the frame on c, whose wmu the caller holds and which
// writeBack releases; false when nothing of it went (the socket is full,
// or the frame too large): the caller sends it on the link. What the
// socket leaves of a frame it took in part, a goroutine writes, holding
// wmu meanwhile, so that no other frame starts inside it.
func (t *Transport) writeBack(c *inConn, manifest string, payload []byte) bool {
	if c.head.Size(manifest, len(payload)) > t.cfg.MaxFrameSize {
		c.wmu.Unlock()
		return false // SendEncoded says why
	}
	buf := appendPrefixed(c.wbuf[:0], c.head, manifest, payload)
	c.wbuf = buf
	n := writeNow(c.raw, buf)
	if n == 0 {
		c.wmu.Unlock()
		return false
	}
	c.m.Sent(1, len(buf))
	if n == len(buf) {
		c.wmu.Unlock()
		return true
	}
	t.wg.Go(func() {
		defer c.wmu.Unlock()
		c.conn.SetWriteDeadline(time.Now().Add(t.cfg.WriteTimeout))
		if _, err := c.conn.Write(buf[n:]); err != nil {
			c.conn.Close() // a frame cut short: the dialler must not read on
		}
	})
	return true
}

// receiveBack hands over a frame the listener of l's connection wrote back
// on it, as an inbound connection's reader does; the link's reader calls it.
func (l *link) receiveBack(f frame.Frame, handlers *encodedHandlers) {
	t := l.t
	l.m.Received(1, 4+frame.Size(&f))
	if f.From != l.to || f.To != t.cfg.Self {
		t.stat.badFrames.Add(1)
		t.log.Warn("tcp: dropped a frame written back by another node", "link", l.to, "from", f.From, "to", f.To)
		return
	}
	m, err := t.message(handlers, f.Manifest, f.Payload)
	if err == nil {
		t.deliverMu.Lock()
		if t.ctx.Err() != nil {
			t.deliverMu.Unlock()
			return
		}
		err = t.handOne(f.From, &m)
		t.deliverMu.Unlock()
	}
	if err != nil {
		t.stat.badFrames.Add(1)
		t.log.Warn("tcp: dropped a frame written back that does not decode", "from", f.From, "err", err)
		return
	}
	t.stat.delivered.Add(1)
}
