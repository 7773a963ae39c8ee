package tcp

import (
	"syscall"

	"github.com/shoal-dev/shoal/cluster"
)

// loseQueued drops the link's queued messages (markers are re-sent by their flush).
func (l *link) loseQueued() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.t.stat.lost.Add(uint64(l.queued))
	for _, it := range l.queue {
		if w := it.marker(); w != nil {
			w.done <- errMarkerLost
		}
	}
	l.queue, l.queued, l.frames = l.queue[:0], 0, l.frames[:0]
}

// Test hooks: stall a link without losing anything, and cut the TCP
// connections between this transport and a node under them.

// HoldLink stalls the link to to (creating it) until ReleaseLink.
func (t *Transport) HoldLink(to cluster.UniqueAddress) error {
	l, err := t.link(to)
	if err != nil {
		return err
	}
	l.setHeld(true)
	return nil
}

// ReleaseLink ends a HoldLink.
func (t *Transport) ReleaseLink(to cluster.UniqueAddress) {
	t.mu.Lock()
	l := t.links[to]
	t.mu.Unlock()
	if l != nil {
		l.setHeld(false)
	}
}

// BreakConns closes every connection to or from node id node. With
// loseQueued, the links to node also lose what they have queued: the worst
// a break may do by the contract (the transport itself keeps its queue
// across a reconnect).
func (t *Transport) BreakConns(node string, loseQueued bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for a, l := range t.links {
		if a.Node == node {
			if loseQueued {
				l.loseQueued()
			}
			l.breakConn()
		}
	}
	for c := range t.inbound {
		if c.from.Node == node {
			c.conn.Close()
		}
	}
}

// RunningLinks is the number of link goroutines alive.
func (t *Transport) RunningLinks() int { return int(t.running.Load()) }

// Control manifests, for tests that speak the protocol by hand.
const (
	HelloManifest    = helloManifest
	WelcomeManifest  = welcomeManifest
	RefuseManifest   = refuseManifest
	FlushManifest    = flushManifest
	FlushAckManifest = flushAckManifest
)

// HelloPayload is the payload of a hello of this wire version for cluster.
func HelloPayload(name string) []byte {
	return appendVersioned(nil, cluster.WireVersion, []byte(name))
}

// SetWireVersion makes a transport of cfg speak wire version v, as a node
// of another release would.
func SetWireVersion(cfg *Config, v uint32) { cfg.wireVersion = v }

// WelcomePayload is the payload of a welcome of this wire version.
func WelcomePayload() []byte { return appendVersioned(nil, cluster.WireVersion, nil) }

// InboundQuickAck reports, for each connection accepted from node, whether
// its socket answers every segment with an ACK at once (Linux's
// TCP_QUICKACK as getsockopt reads it: 1 unless it delays its ACKs).
func (t *Transport) InboundQuickAck(node string) []int {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []int
	for c := range t.inbound {
		if c.from.Node != node {
			continue
		}
		tc, ok := c.conn.(interface {
			SyscallConn() (syscall.RawConn, error)
		})
		if !ok {
			continue
		}
		raw, err := tc.SyscallConn()
		if err != nil {
			continue
		}
		v := -1
		_ = raw.Control(func(fd uintptr) {
			v, _ = syscall.GetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_QUICKACK)
		})
		out = append(out, v)
	}
	return out
}

// InboundConnections is the number of connections accepted from node that
// are still read.
func (t *Transport) InboundConnections(node string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for c := range t.inbound {
		if c.from.Node == node {
			n++
		}
	}
	return n
}
