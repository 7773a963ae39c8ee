// Package faultnet is an in-process network for memberlist, with faults:
// each Transport is a memberlist.Transport whose packets and streams travel
// over channels and pipes, and the Network can drop packets at random,
// cut links in both directions (partitions) and heal them. memberlist's
// own MockNetwork can do neither.
//
// Packets behave like UDP: a packet on a cut link, an unlucky one, or one
// for a full receive queue is lost without an error. Streams behave like
// TCP: a dial across a cut link fails, and cutting a link closes the
// streams open across it. Nothing is read from the wall clock except
// through package time, so a whole cluster runs inside a testing/synctest
// bubble when it is built there.
//
// Addresses are 127.0.0.1 with ports the Network numbers from 1; nothing
// touches a socket.
package faultnet

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"time"

	ml "github.com/hashicorp/memberlist"
)

// ErrUnreachable is returned (wrapped) by a dial to an address that no
// open transport has, or across a cut link.
var ErrUnreachable = errors.New("faultnet: unreachable")

// ErrClosed is returned (wrapped) by a transport that was shut down.
var ErrClosed = errors.New("faultnet: transport shut down")

// packetQueue is each transport's receive queue; more is dropped, like a
// full socket buffer.
const packetQueue = 1024

// Network connects transports. Its methods are safe for concurrent use.
type Network struct {
	mu         sync.Mutex
	rng        *rand.Rand
	loss       float64
	nextPort   int
	transports map[string]*Transport // by address
	cut        map[link]bool
	streams    map[link][]net.Conn // open streams, closed when their link is cut
}

// link is an unordered pair of addresses.
type link struct{ a, b string }

func linkOf(a, b string) link {
	if b < a {
		a, b = b, a
	}
	return link{a, b}
}

// NewNetwork returns an empty network; seed seeds its packet loss.
func NewNetwork(seed uint64) *Network {
	return &Network{
		rng:        rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		transports: map[string]*Transport{},
		cut:        map[link]bool{},
		streams:    map[link][]net.Conn{},
	}
}

// NewTransport returns a transport at a new address.
func (n *Network) NewTransport() *Transport {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.nextPort++
	t := &Transport{
		net:      n,
		port:     n.nextPort,
		addr:     net.JoinHostPort("127.0.0.1", strconv.Itoa(n.nextPort)),
		packetCh: make(chan *ml.Packet, packetQueue),
		streamCh: make(chan net.Conn),
		closed:   make(chan struct{}),
	}
	n.transports[t.addr] = t
	return t
}

// SetLoss makes every packet lost with probability p (0 ≤ p ≤ 1), drawn
// from the network's seeded source. Streams are not affected.
func (n *Network) SetLoss(p float64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.loss = min(max(p, 0), 1)
}

// Partition cuts every link between a member of one group and a member of
// another, in both directions, and closes the streams open across them.
// Links within a group, and to addresses in no group, are left as they are.
func (n *Network) Partition(groups ...[]string) {
	n.mu.Lock()
	var toClose []net.Conn
	for i, g := range groups {
		for _, h := range groups[i+1:] {
			for _, a := range g {
				for _, b := range h {
					l := linkOf(a, b)
					n.cut[l] = true
					toClose = append(toClose, n.streams[l]...)
					delete(n.streams, l)
				}
			}
		}
	}
	n.mu.Unlock()
	for _, c := range toClose {
		_ = c.Close()
	}
}

// Isolate cuts addr off from every other transport.
func (n *Network) Isolate(addr string) {
	n.mu.Lock()
	var others []string
	for a := range n.transports {
		if a != addr {
			others = append(others, a)
		}
	}
	n.mu.Unlock()
	n.Partition([]string{addr}, others)
}

// Heal restores every cut link.
func (n *Network) Heal() {
	n.mu.Lock()
	defer n.mu.Unlock()
	clear(n.cut)
}

// route returns the open transport at to, if the link from from is up.
func (n *Network) route(from, to string) (*Transport, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	dest, ok := n.transports[to]
	if !ok {
		return nil, fmt.Errorf("%w: no transport at %s", ErrUnreachable, to)
	}
	if n.cut[linkOf(from, to)] {
		return nil, fmt.Errorf("%w: link %s–%s is cut", ErrUnreachable, from, to)
	}
	return dest, nil
}

func (n *Network) lose() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.loss > 0 && n.rng.Float64() < n.loss
}

// track remembers an open stream so that cutting its link closes it.
func (n *Network) track(a, b string, conns ...net.Conn) {
	n.mu.Lock()
	defer n.mu.Unlock()
	l := linkOf(a, b)
	n.streams[l] = append(n.streams[l], conns...)
}

func (n *Network) untrack(a, b string, conn net.Conn) {
	n.mu.Lock()
	defer n.mu.Unlock()
	l := linkOf(a, b)
	s := n.streams[l]
	for i, c := range s {
		if c == conn {
			n.streams[l] = append(s[:i], s[i+1:]...)
			break
		}
	}
	if len(n.streams[l]) == 0 {
		delete(n.streams, l)
	}
}

func (n *Network) remove(t *Transport) {
	n.mu.Lock()
	delete(n.transports, t.addr)
	var toClose []net.Conn
	for l, conns := range n.streams {
		if l.a == t.addr || l.b == t.addr {
			toClose = append(toClose, conns...)
			delete(n.streams, l)
		}
	}
	n.mu.Unlock()
	for _, c := range toClose {
		_ = c.Close()
	}
}

// Transport is one node's end of the network; it implements
// memberlist.NodeAwareTransport.
type Transport struct {
	net      *Network
	port     int
	addr     string
	packetCh chan *ml.Packet
	streamCh chan net.Conn

	closeOnce sync.Once
	closed    chan struct{}
}

var _ ml.NodeAwareTransport = (*Transport)(nil)

// Addr is the transport's address (127.0.0.1:port), what other nodes join.
func (t *Transport) Addr() string { return t.addr }

// FinalAdvertiseAddr implements memberlist.Transport: the transport's own
// address, whatever was configured.
func (t *Transport) FinalAdvertiseAddr(string, int) (net.IP, int, error) {
	return net.IPv4(127, 0, 0, 1), t.port, nil
}

// WriteTo implements memberlist.Transport.
func (t *Transport) WriteTo(b []byte, addr string) (time.Time, error) {
	now := time.Now()
	select {
	case <-t.closed:
		return now, fmt.Errorf("write to %s: %w", addr, ErrClosed)
	default:
	}
	dest, err := t.net.route(t.addr, addr)
	if err != nil || t.net.lose() {
		return now, nil // lost, as UDP loses: the sender cannot tell
	}
	p := &ml.Packet{Buf: append([]byte(nil), b...), From: addrOf(t.addr), Timestamp: now}
	select {
	case dest.packetCh <- p:
	default: // receive queue full: lost
	}
	return now, nil
}

// WriteToAddress implements memberlist.NodeAwareTransport.
func (t *Transport) WriteToAddress(b []byte, a ml.Address) (time.Time, error) {
	return t.WriteTo(b, a.Addr)
}

// PacketCh implements memberlist.Transport.
func (t *Transport) PacketCh() <-chan *ml.Packet { return t.packetCh }

// DialTimeout implements memberlist.Transport: a pipe to addr, unless the
// link is cut or addr is not listening.
func (t *Transport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	select {
	case <-t.closed:
		return nil, fmt.Errorf("dial %s: %w", addr, ErrClosed)
	default:
	}
	dest, err := t.net.route(t.addr, addr)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	local, remote := net.Pipe()
	lc := &conn{Conn: local, local: addrOf(t.addr), remote: addrOf(addr)}
	rc := &conn{Conn: remote, local: addrOf(addr), remote: addrOf(t.addr)}
	lc.onClose = func() { t.net.untrack(t.addr, addr, lc) }
	rc.onClose = func() { t.net.untrack(t.addr, addr, rc) }
	t.net.track(t.addr, addr, lc, rc)
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case dest.streamCh <- rc:
		return lc, nil
	case <-dest.closed:
		err = fmt.Errorf("dial %s: %w", addr, ErrUnreachable)
	case <-timer.C:
		err = fmt.Errorf("dial %s: timed out after %s", addr, timeout)
	}
	_ = lc.Close()
	_ = rc.Close()
	return nil, err
}

// DialAddressTimeout implements memberlist.NodeAwareTransport.
func (t *Transport) DialAddressTimeout(a ml.Address, timeout time.Duration) (net.Conn, error) {
	return t.DialTimeout(a.Addr, timeout)
}

// StreamCh implements memberlist.Transport.
func (t *Transport) StreamCh() <-chan net.Conn { return t.streamCh }

// Shutdown implements memberlist.Transport: the address stops answering
// and the streams open to it close.
func (t *Transport) Shutdown() error {
	t.closeOnce.Do(func() {
		close(t.closed)
		t.net.remove(t)
	})
	return nil
}

// conn is one end of a pipe with real-looking addresses, which memberlist
// logs and checks.
type conn struct {
	net.Conn
	local, remote net.Addr
	once          sync.Once
	onClose       func()
}

func (c *conn) LocalAddr() net.Addr  { return c.local }
func (c *conn) RemoteAddr() net.Addr { return c.remote }

func (c *conn) Close() error {
	c.once.Do(c.onClose)
	return c.Conn.Close()
}

// addrOf turns host:port into a *net.TCPAddr, or a named address.
func addrOf(hostport string) net.Addr {
	if a, err := net.ResolveTCPAddr("tcp", hostport); err == nil {
		return a
	}
	return &net.UnixAddr{Name: hostport, Net: "faultnet"}
}
