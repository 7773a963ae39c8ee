// Package inproc is a cluster.Transport inside one process, for tests and
// the simulator. It keeps the Transport contract honestly rather than
// leaning on in-process synchrony: every message is encoded with the codec
// on Send and decoded on delivery (no pointer is shared), each link has a
// bounded queue, order holds per link only, and faults can be injected:
// per-link delay with jitter, link breaks that lose what is in flight,
// partitions, and holds that stall a link without losing anything. A test
// that needs to pick out single messages sets an Intercept: it sees each
// message as sent, and may refuse it or apply those faults to its link
// before it is queued.
//
// Messages travel as the frames of package frame, the same bytes a network
// transport sends, so the size limit and the receiver's checks are the
// same as over a socket.
//
// Nothing runs by itself (Run is the exception, for tests on the wall
// clock that would rather not step). A Network has an injected clock and a
// seeded random source; a message sent at time t with delay d becomes due at t+d
// (or later, to keep its link's order), and is delivered only when its
// owner calls Step or DeliverDue with the clock at or past that time. A
// simulator therefore interleaves deliveries with its own timers by asking
// NextDue, advancing its clock and stepping; the same seed and the same
// calls give the same deliveries.
package inproc

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/cluster/frame"
	"github.com/shoal-dev/shoal/entity/codec"
)

// Clock is the network's time source.
type Clock interface{ Now() time.Time }

// Config configures a Network. Codec and Clock are required.
type Config struct {
	// Codec encodes every message on Send and decodes it on delivery.
	Codec *codec.Registry
	// Clock says what time it is; messages become due on it.
	Clock Clock
	// QueueCapacity bounds each link's queue: the messages sent on it and
	// not yet delivered or lost. Default 1024.
	QueueCapacity int
	// MaxFrameSize limits each message's frame: a larger one is refused on
	// Send (cluster.ErrFrameTooLarge). Default frame.DefaultMaxSize.
	MaxFrameSize int
	// Delay is every link's delay until SetDelay changes it. Default 0:
	// due at once, delivered at the next Step.
	Delay time.Duration
	// Seed seeds the jitter of SetDelay ranges.
	Seed uint64
	// Logger logs messages that cannot be decoded. Default slog.Default().
	Logger *slog.Logger
}

// DefaultQueueCapacity is the per-link bound when Config leaves it zero.
const DefaultQueueCapacity = 1024

// ErrInvalidConfig is returned (wrapped) by NewNetwork for a Config
// without a Codec or a Clock, and by Join for an address without a node id
// or a nil handler. It is cluster.ErrInvalidConfig.
var ErrInvalidConfig = cluster.ErrInvalidConfig

// ErrDuplicateIncarnation is returned by Join for an incarnation that is
// not newer than the node id's latest.
var ErrDuplicateIncarnation = errors.New("inproc: incarnation not newer than the node's latest")

// Stats counts what a Network did.
type Stats struct {
	// Sent counts messages accepted by Send.
	Sent int
	// Delivered counts messages handed to a handler.
	Delivered int
	// Lost counts accepted messages dropped by a break, a partition or
	// the death of their sender or receiver.
	Lost int
	// Undecodable counts messages dropped because they could not be decoded.
	Undecodable int
	// Refused counts sends the Intercept refused; they are not in Sent.
	Refused int
}

// Intercept watches, refuses or delays what is sent on a Network (see
// Network.Intercept). from is the sending incarnation, to the address
// given to Send, msg the message before it is encoded; a non-nil error
// refuses the send.
type Intercept func(from, to cluster.UniqueAddress, msg any) error

// Network connects the Transports of one process.
type Network struct {
	cfg Config
	log *slog.Logger

	// deliverMu serializes deliveries: handlers run one at a time.
	deliverMu sync.Mutex

	mu     sync.Mutex
	rng    *rand.Rand
	nodes  map[string]*Transport // node id → its latest incarnation
	links  map[linkKey]*link
	delays map[nodePair]delayRange
	cut    map[nodePair]bool // directed pairs a partition separates
	queue  envelopeHeap
	seq    uint64
	stats  Stats

	// wake tells Run that something became deliverable sooner.
	wake chan struct{}

	intercept atomic.Pointer[Intercept]
}

type nodePair struct{ from, to string }

type linkKey struct{ from, to cluster.UniqueAddress }

type delayRange struct{ min, max time.Duration }

type link struct {
	key     linkKey
	queued  int       // sent, not yet delivered or lost
	lastDue time.Time // keeps the link's order when delays shrink
	held    bool      // delivery stalled, nothing lost
	gen     uint64    // bumped by a break: older envelopes are lost
}

type envelope struct {
	link *link
	gen  uint64
	body []byte // the frame, exactly as a network transport would send it
	due  time.Time
	seq  uint64
}

// NewNetwork returns an empty network. It returns an error wrapping
// ErrInvalidConfig when Codec or Clock is missing.
func NewNetwork(cfg Config) (*Network, error) {
	if cfg.Codec == nil || cfg.Clock == nil {
		return nil, fmt.Errorf("%w: Config needs a Codec and a Clock", ErrInvalidConfig)
	}
	if cfg.QueueCapacity <= 0 {
		cfg.QueueCapacity = DefaultQueueCapacity
	}
	if cfg.MaxFrameSize <= 0 {
		cfg.MaxFrameSize = frame.DefaultMaxSize
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Network{
		cfg:    cfg,
		log:    log,
		rng:    rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		nodes:  make(map[string]*Transport),
		links:  make(map[linkKey]*link),
		delays: make(map[nodePair]delayRange),
		cut:    make(map[nodePair]bool),
		wake:   make(chan struct{}, 1),
	}, nil
}

// Join starts the incarnation addr on the network, delivering its messages
// to handle. An older incarnation of the same node id dies: its Transport
// is closed and what was in flight to or from it is lost. Join refuses an
// incarnation not newer than the node id's latest (ErrDuplicateIncarnation),
// and an address without a node id or a nil handle (ErrInvalidConfig).
func (n *Network) Join(addr cluster.UniqueAddress, handle cluster.Handler) (*Transport, error) {
	if addr.Node == "" || handle == nil {
		return nil, fmt.Errorf("%w: Join needs a node id and a handler", ErrInvalidConfig)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if old := n.nodes[addr.Node]; old != nil {
		if addr.Incarnation <= old.self.Incarnation {
			return nil, fmt.Errorf("%w: %s, latest %s", ErrDuplicateIncarnation, addr, old.self)
		}
		n.killLocked(old)
	}
	t := &Transport{net: n, self: addr, handle: handle}
	n.nodes[addr.Node] = t
	return t, nil
}

// killLocked closes t and loses what is in flight to or from it.
func (n *Network) killLocked(t *Transport) {
	if t.closed {
		return
	}
	t.closed = true
	for k, l := range n.links {
		if k.from == t.self || k.to == t.self {
			n.breakLocked(l)
			delete(n.links, k)
		}
	}
}

// breakLocked loses everything queued on l; the link works again at once.
func (n *Network) breakLocked(l *link) {
	l.gen++
	n.stats.Lost += l.queued
	l.queued = 0
}

// SetDelay makes messages from node id from to node id to take between
// min and max (uniform, from the seeded source); min == max is a fixed
// delay. Order on each link holds whatever the delays.
func (n *Network) SetDelay(from, to string, min, max time.Duration) {
	if max < min {
		max = min
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.delays[nodePair{from, to}] = delayRange{min, max}
}

// Break breaks the links between node ids a and b in both directions:
// what is in flight on them is lost, and later sends go through.
func (n *Network) Break(a, b string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.breakBetweenLocked(a, b)
}

func (n *Network) breakBetweenLocked(a, b string) {
	for k, l := range n.links {
		if (k.from.Node == a && k.to.Node == b) || (k.from.Node == b && k.to.Node == a) {
			n.breakLocked(l)
		}
	}
}

// Partition cuts node ids a and b apart in both directions until Heal:
// what is in flight between them is lost, and Send between them returns
// nil and loses the message, as a network would.
func (n *Network) Partition(a, b string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.cut[nodePair{a, b}] = true
	n.cut[nodePair{b, a}] = true
	n.breakBetweenLocked(a, b)
}

// Heal ends a partition between a and b.
func (n *Network) Heal(a, b string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.cut, nodePair{a, b})
	delete(n.cut, nodePair{b, a})
}

// Hold stalls the link from → to: its messages stay queued (counting
// against its capacity) and are not delivered until Release.
func (n *Network) Hold(from, to cluster.UniqueAddress) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.linkLocked(from, to).held = true
}

// Release ends a Hold; the link's queued messages become deliverable in order.
func (n *Network) Release(from, to cluster.UniqueAddress) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.linkLocked(from, to).held = false
	n.signal()
}

// Intercept makes every Send call fn first, synchronously on the sender's
// goroutine, before the message is encoded and with no lock of the
// network held: fn may record or count it, hold the sender's goroutine,
// or fault the link with the network's own faults (Hold, Break,
// Partition, SetDelay), which the message then meets as it is queued. A
// non-nil error from fn refuses the send: Send returns it, wrapped, and
// nothing is queued (Stats.Refused). fn sees only what takes the network:
// a caller that hands messages to itself without Send is invisible to it.
// Nil removes it; a later call replaces it.
func (n *Network) Intercept(fn Intercept) {
	if fn == nil {
		n.intercept.Store(nil)
		return
	}
	n.intercept.Store(&fn)
}

// signal wakes Run without blocking.
func (n *Network) signal() {
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

// Run delivers every message at its due time until ctx ends, for a Network
// whose Clock is the wall clock (timers.Real, or the fake one of a
// testing/synctest bubble): tests that want a transport that simply runs,
// rather than one they step. Handlers run on Run's goroutine. Do not mix
// Run with Step or DeliverDue on one Network.
func (n *Network) Run(ctx context.Context) error {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		n.DeliverDue()
		wait := time.Hour // until a Send or a Release wakes us
		if due, ok := n.NextDue(); ok {
			wait = due.Sub(n.cfg.Clock.Now())
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-n.wake:
		case <-timer.C:
		}
	}
}

func (n *Network) linkLocked(from, to cluster.UniqueAddress) *link {
	k := linkKey{from, to}
	l := n.links[k]
	if l == nil {
		l = &link{key: k}
		n.links[k] = l
	}
	return l
}

// Stats returns the counters so far.
func (n *Network) Stats() Stats {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.stats
}

// Pending is the number of messages queued and not yet delivered or lost,
// held ones included.
func (n *Network) Pending() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	total := 0
	for _, l := range n.links {
		total += l.queued
	}
	return total
}

// NextDue returns when the earliest deliverable message is due; ok is
// false when none is (nothing queued, or only held messages).
func (n *Network) NextDue() (due time.Time, ok bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	e := n.headLocked(false, time.Time{})
	if e == nil {
		return time.Time{}, false
	}
	return e.due, true
}

// headLocked finds the earliest live envelope whose link is not held,
// discarding lost ones on the way, and takes it off the queue when take
// is set and it is due by now. Held envelopes stay queued: a held link's
// envelopes are all held, so the link keeps its order.
func (n *Network) headLocked(take bool, now time.Time) *envelope {
	var held []*envelope
	defer func() {
		for _, e := range held {
			heap.Push(&n.queue, e)
		}
	}()
	for n.queue.Len() > 0 {
		e := n.queue[0]
		switch {
		case e.gen != e.link.gen:
			heap.Pop(&n.queue) // lost by a break; already counted
		case e.link.held:
			held = append(held, heap.Pop(&n.queue).(*envelope))
		case !take:
			return e
		case e.due.After(now):
			return nil
		default:
			return heap.Pop(&n.queue).(*envelope)
		}
	}
	return nil
}

// Step delivers the earliest message due at or before the clock's now, if
// any, and reports whether it delivered (or dropped as undecodable) one.
// Handlers run on the caller's goroutine, one at a time; a handler must
// not call Step or DeliverDue.
func (n *Network) Step() bool {
	n.deliverMu.Lock()
	defer n.deliverMu.Unlock()
	return n.step()
}

// DeliverDue delivers every message due at or before the clock's now, in
// due order, and returns how many it took off the queues.
func (n *Network) DeliverDue() int {
	n.deliverMu.Lock()
	defer n.deliverMu.Unlock()
	count := 0
	for n.step() {
		count++
	}
	return count
}

func (n *Network) step() bool {
	n.mu.Lock()
	e := n.headLocked(true, n.cfg.Clock.Now())
	if e == nil {
		n.mu.Unlock()
		return false
	}
	e.link.queued--
	to := n.nodes[e.link.key.to.Node]
	if to == nil || to.self != e.link.key.to || to.closed {
		// Unreachable: the links of a dead incarnation are broken when it
		// dies. Kept as the contract's last guard against a successor.
		n.stats.Lost++
		n.mu.Unlock()
		return true
	}
	n.mu.Unlock()

	from, msg, err := frame.Decode(n.cfg.Codec, to.self, e.body)
	if err != nil {
		n.mu.Lock()
		n.stats.Undecodable++
		n.mu.Unlock()
		n.log.Warn("inproc: dropped a frame that cannot be decoded",
			"from", e.link.key.from, "to", e.link.key.to, "err", err)
		return true
	}
	n.mu.Lock()
	n.stats.Delivered++
	n.mu.Unlock()
	to.handle(from, msg)
	return true
}

// send implements Transport.Send.
func (n *Network) send(from *Transport, to cluster.UniqueAddress, msg any) error {
	if fn := n.intercept.Load(); fn != nil {
		if err := (*fn)(from.self, to, msg); err != nil {
			n.mu.Lock()
			n.stats.Refused++
			n.mu.Unlock()
			return fmt.Errorf("inproc: send to %s refused: %w", to, err)
		}
	}
	body, err := frame.Encode(n.cfg.Codec, from.self, to, msg, n.cfg.MaxFrameSize)
	if err != nil {
		return fmt.Errorf("inproc: send to %s: %w", to, err)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if from.closed {
		return fmt.Errorf("inproc: send from %s: %w", from.self, cluster.ErrClosed)
	}
	dest := n.nodes[to.Node]
	switch {
	case dest == nil || to.Incarnation > dest.self.Incarnation:
		return fmt.Errorf("inproc: send to %s: %w", to, cluster.ErrUnreachable)
	case to.Incarnation < dest.self.Incarnation || dest.closed:
		return fmt.Errorf("inproc: send to %s: %w", to, cluster.ErrStaleIncarnation)
	}
	l := n.linkLocked(from.self, to)
	if l.queued >= n.cfg.QueueCapacity {
		return fmt.Errorf("inproc: send to %s: %w (%d queued)", to, cluster.ErrQueueFull, l.queued)
	}
	n.stats.Sent++
	if n.cut[nodePair{from.self.Node, to.Node}] {
		n.stats.Lost++
		return nil
	}
	due := n.cfg.Clock.Now().Add(n.delayLocked(from.self.Node, to.Node))
	if due.Before(l.lastDue) {
		due = l.lastDue
	}
	l.lastDue = due
	l.queued++
	n.seq++
	heap.Push(&n.queue, &envelope{link: l, gen: l.gen, body: body, due: due, seq: n.seq})
	n.signal()
	return nil
}

func (n *Network) delayLocked(from, to string) time.Duration {
	d, ok := n.delays[nodePair{from, to}]
	if !ok {
		return n.cfg.Delay
	}
	if d.max <= d.min {
		return d.min
	}
	return d.min + time.Duration(n.rng.Int64N(int64(d.max-d.min)+1))
}

// Transport is one incarnation's end of a Network. It implements
// cluster.Transport.
type Transport struct {
	net    *Network
	self   cluster.UniqueAddress
	handle cluster.Handler
	closed bool // guarded by net.mu
}

var _ cluster.Transport = (*Transport)(nil)

// Self implements cluster.Transport.
func (t *Transport) Self() cluster.UniqueAddress { return t.self }

// Send implements cluster.Transport.
func (t *Transport) Send(to cluster.UniqueAddress, msg any) error { return t.net.send(t, to, msg) }

// Close implements cluster.Transport: the incarnation dies, and what is in
// flight to or from it is lost. Closing twice is harmless. A delivery that
// Run or Step on another goroutine had already taken off the queue may
// still reach the handler after Close returns; close from the delivering
// goroutine (a handler, or between steps) for a cut that is exact.
func (t *Transport) Close(context.Context) error {
	t.net.mu.Lock()
	defer t.net.mu.Unlock()
	t.net.killLocked(t)
	return nil
}

// envelopeHeap orders envelopes by due time, then send order.
type envelopeHeap []*envelope

func (h envelopeHeap) Len() int { return len(h) }
func (h envelopeHeap) Less(i, j int) bool {
	if !h[i].due.Equal(h[j].due) {
		return h[i].due.Before(h[j].due)
	}
	return h[i].seq < h[j].seq
}
func (h envelopeHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *envelopeHeap) Push(x any)   { *h = append(*h, x.(*envelope)) }
func (h *envelopeHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return e
}
