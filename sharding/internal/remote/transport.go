// Package remote is sharding's dispatch on one node incarnation, over a
// cluster.Transport: it routes what regions and coordinators send, by
// entity type and coordinator, to this node's listeners or across the
// cluster transport, routes replies to asks of other nodes, fails the asks
// waiting on a message it refuses, refuses stale senders and counts what
// it did. Package sharding attaches it to the cluster transport given in
// its Config and re-exports the errors a user may match.
//
// Sharding names a region by its node incarnation (cluster.UniqueAddress),
// so that a restarted node is a new region and a message for the old one
// is refused by the transport instead of reaching its successor. The
// entity runtime of the node must run under the same node id and
// incarnation, so that reply addresses name the incarnation the transport
// knows.
//
// Messages to the node itself are handed over as values, as the local
// transport does; messages to other nodes are sealed in their wire
// envelopes, their user messages encoded by this node's codec
// (wire.Encoder.Seal; a lone Deliver's by the envelope's encoder,
// wire.Encoder.Pack), and sent over the cluster transport, which encodes
// the rest; on receipt wire.Open decodes the user messages with this
// node's codec. A tell (SendDeliver) to a cluster transport that takes
// encoded messages is encoded here, and one that hands envelopes over
// undecoded gives them to this package, so that a Deliver reaches its
// listener (ListenDelivers) without ever being put in an interface value.
// On receipt a bad message (a user message whose manifest is unknown or
// whose payload is corrupt, a target nobody listens at, a sender the view
// says is down or replaced, a type that is no protocol message) is dropped
// with a typed error that Receive returns, counted in Stats and logged
// once per kind and sender; the node keeps serving. The asks waiting on a
// user message that was refused fail at once: every message travels with
// the reply addresses inside it, and the refusing node sends each asker an
// AskFailed, which fails its ask with a *RefusedError. An ask that the
// runtime there fails once its command was accepted (unhandled, stopped,
// crashed, persist failed, refused by its shard) comes back as a Reply
// that carries an entity.AskFailedError's code, on the route replies take.
// Frames that do not even decode (unknown manifest, corrupt, oversized,
// for another incarnation) never reach this package: the cluster transport
// drops, counts and logs them.
package remote

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/internal/bufpool"
	"github.com/shoal-dev/shoal/internal/runtime"
	"github.com/shoal-dev/shoal/sharding/internal/protocol"
	"github.com/shoal-dev/shoal/sharding/internal/wire"
)

// Address names a region or a coordinator: one of each per entity type per
// node incarnation.
type Address struct {
	Node        cluster.UniqueAddress
	Type        string
	Coordinator bool
}

func (a Address) String() string {
	if a.Coordinator {
		return a.Node.String() + "/" + a.Type + "/coordinator"
	}
	return a.Node.String() + "/" + a.Type
}

var (
	// ErrUnreachable: nothing listens at the address, on this node or
	// another, or the cluster transport cannot reach its node (unknown,
	// stale or closed).
	ErrUnreachable = errors.New("sharding: address unreachable")
	// ErrUnknownTarget: nobody on this node listens at the message's
	// target (an entity type not started here, or no coordinator here).
	// The sender's retries find the right place once views agree.
	ErrUnknownTarget = errors.New("remote: no listener for target")
	// ErrNotProtocol: a message that is no sharding protocol message.
	ErrNotProtocol = errors.New("remote: not a sharding protocol message")
	// ErrUndecodable: a user message inside a protocol message does not
	// decode (see DecodeError).
	ErrUndecodable = errors.New("remote: user message does not decode")
	// ErrNotBound: Send before Bind.
	ErrNotBound = errors.New("remote: no cluster transport bound")
	// ErrRefusedByPeer: the node a command was sent to refused it (see
	// RefusedError).
	ErrRefusedByPeer = errors.New("remote: refused by the receiving node")
)

// RefusedError fails an ask whose command the receiving node refused: it
// could not decode it (it matches ErrUndecodable too), no region of its
// entity type runs there (ErrUnknownTarget), or the region there refused
// it, its mailbox full. Reason is the refusing node's error text.
type RefusedError struct {
	Peer         cluster.UniqueAddress
	Kind, Reason string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("remote: %s refused the command (%s): %s", e.Peer, e.Kind, e.Reason)
}

// Unwrap returns ErrRefusedByPeer and the sentinel of Kind.
func (e *RefusedError) Unwrap() []error {
	errs := []error{ErrRefusedByPeer}
	switch e.Kind {
	case wire.RefusedUndecodable:
		errs = append(errs, ErrUndecodable)
	case wire.RefusedUnknownTarget:
		errs = append(errs, ErrUnknownTarget)
	}
	return errs
}

// DecodeError tells which user message did not decode. It matches
// ErrUndecodable, and the codec's error (codec.ErrUnknownManifest for an
// unknown manifest).
type DecodeError struct {
	Manifest, EntityID string
	Err                error
}

func (e *DecodeError) Error() string {
	return fmt.Sprintf("remote: message for entity %q (manifest %q) does not decode: %v", e.EntityID, e.Manifest, e.Err)
}

// Unwrap returns ErrUndecodable and the codec's error.
func (e *DecodeError) Unwrap() []error { return []error{ErrUndecodable, e.Err} }

// Config configures a Transport. Codec is required.
type Config struct {
	// Codec encodes the user messages that Deliver and hand-overs carry.
	// It must be the codec of the cluster transport, with the wire types
	// registered (New registers them).
	Codec *codec.Registry
	// View, when set, is asked on receipt for the node's latest view of
	// the membership (it must be cheap: once per message), nil before
	// there is one: a message from an incarnation it holds as Down, or
	// replaced by a newer one, is refused (cluster.ErrStaleIncarnation).
	// Each new view must come as a new pointer: the verdict on a sender
	// is kept while View returns the same one. Without it, only the
	// cluster transport's own incarnation checks apply.
	View func() *cluster.View
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Stats counts what a Transport did.
type Stats struct {
	// Sent counts messages handed to the cluster transport, Local those
	// handed to a listener of this node directly.
	Sent, Local uint64
	// Received counts messages from the cluster transport; Delivered those
	// handed to a listener, Replies those handed to the entity runtime.
	Received, Delivered, Replies uint64
	// Refused counts received messages dropped, by error: ErrUnknownTarget,
	// ErrUndecodable (a hand-over counts once however many of its messages
	// failed), ErrNotProtocol, cluster.ErrStaleIncarnation, a listener that
	// refused (its mailbox full), a reply the runtime refused.
	UnknownTarget, Undecodable, NotProtocol, Stale, ListenerRefused, ReplyRefused uint64
	// AsksFailed counts the asks this node failed (AskFailed sent, or
	// handled here) because it refused the command they waited on.
	AsksFailed uint64
}

type counters struct {
	sent, local, received, delivered, replies                                     atomic.Uint64
	unknownTarget, undecodable, notProtocol, stale, listenerRefused, replyRefused atomic.Uint64
	asksFailed                                                                    atomic.Uint64
}

// Transport is sharding's dispatch over a cluster.Transport, for one node
// incarnation.
type Transport struct {
	cfg  Config
	log  *slog.Logger
	self cluster.UniqueAddress
	stat counters

	ct  atomic.Pointer[bound]
	sys atomic.Pointer[entity.System]
	// enc puts what this node sends in envelopes; dec decodes the
	// envelopes the cluster transport hands over undecoded
	// (cluster.EncodedReceiver).
	enc *wire.Encoder
	dec *wire.Decoder

	// bufs recycles the buffers SendDeliver encodes envelopes into.
	bufs bufpool.Pool

	// listeners is read without a lock for every message; Listen and its
	// stop replace it whole, under mu.
	listeners atomic.Pointer[listeners]
	mu        sync.Mutex

	logged sync.Map // "kind from" → struct{}: what was logged once already

	// verdicts holds staleSender's verdicts on the senders seen under one
	// view, so that a message from a known sender costs a pointer compare.
	verdicts atomic.Pointer[verdicts]
}

// bound is the cluster transport, and the same as an EncodedSender and a
// ReplySender when it is one.
type bound struct {
	ct      cluster.Transport
	encoded cluster.EncodedSender
	replies cluster.ReplySender
}

// listeners are the handlers of this node's targets; never modified once
// published.
type listeners struct {
	handlers map[wire.Target]listener
	// few lists the handlers again while there are at most maxScanned:
	// comparing a few targets is cheaper than hashing one for the map,
	// once per message. Nil when there are more.
	few []targetListener
	// stopped holds the targets that had a listener here and lost it (a
	// region shut down): mail for them is expected while the others'
	// views catch up, so it is refused without a warning.
	stopped map[wire.Target]bool
}

type targetListener struct {
	target wire.Target
	l      listener
}

// maxScanned is the most handlers looked up by a scan of listeners.few.
const maxScanned = 8

// listener is the handler of a target: deliver, when set, takes its
// Delivers, handle every other message (and the Delivers otherwise).
type listener struct {
	handle  func(protocol.Message) error
	deliver func(protocol.Deliver) error
}

// take hands m to the listener: a Deliver as handleDeliver does.
func (l listener) take(m protocol.Message) error {
	if d, isDeliver := m.(protocol.Deliver); isDeliver {
		return l.handleDeliver(d)
	}
	return l.handle(m)
}

// handleDeliver hands d to the listener: by value to deliver, when set.
func (l listener) handleDeliver(d protocol.Deliver) error {
	if l.deliver != nil {
		return l.deliver(d)
	}
	return l.handle(d)
}

// verdicts are staleSender's verdicts under one view.
type verdicts struct {
	view    *cluster.View
	senders []verdict
}

type verdict struct {
	from  cluster.UniqueAddress
	stale bool
}

// maxVerdicts bounds the senders remembered per view: a node hears from
// few peers, and one more than this costs only a view lookup.
const maxVerdicts = 16

var _ runtime.ReplyRouter = (*Transport)(nil)

// New returns the transport of incarnation self; Bind gives it the
// cluster transport, whose handler must be Handle.
func New(self cluster.UniqueAddress, cfg Config) (*Transport, error) {
	if cfg.Codec == nil || self.Node == "" {
		return nil, fmt.Errorf("%w: remote needs a node id and a Codec", cluster.ErrInvalidConfig)
	}
	if err := wire.RegisterOpeningTypes(cfg.Codec); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	t := &Transport{cfg: cfg, log: cfg.Logger, self: self, enc: wire.NewEncoder(cfg.Codec), dec: wire.NewDecoder(cfg.Codec)}
	t.listeners.Store(&listeners{
		handlers: make(map[wire.Target]listener),
		stopped:  make(map[wire.Target]bool),
	})
	return t, nil
}

// Bind sets the cluster transport that carries messages to other nodes;
// it must send from this incarnation. A cluster transport that takes
// encoded messages (cluster.EncodedSender) carries SendDeliver's envelopes
// as bytes; one that hands them over (cluster.EncodedReceiver) gives this
// transport the envelopes it receives undecoded, for Delivers to reach
// their listeners without being put in an interface value.
func (t *Transport) Bind(ct cluster.Transport) error {
	if ct.Self() != t.self {
		return fmt.Errorf("%w: cluster transport of %s bound to the remote transport of %s", cluster.ErrInvalidConfig, ct.Self(), t.self)
	}
	b := &bound{ct: ct}
	b.encoded, _ = ct.(cluster.EncodedSender)
	b.replies, _ = ct.(cluster.ReplySender)
	t.ct.Store(b)
	if r, ok := ct.(cluster.EncodedReceiver); ok {
		r.HandleEncoded(wire.EnvelopeManifest, t.receiveEncoded)
	}
	return nil
}

// Node is this incarnation.
func (t *Transport) Node() cluster.UniqueAddress { return t.self }

// Stats returns the counters so far.
func (t *Transport) Stats() Stats {
	c := &t.stat
	return Stats{
		Sent: c.sent.Load(), Local: c.local.Load(), Received: c.received.Load(), Delivered: c.delivered.Load(),
		Replies: c.replies.Load(), UnknownTarget: c.unknownTarget.Load(), Undecodable: c.undecodable.Load(),
		NotProtocol: c.notProtocol.Load(), Stale: c.stale.Load(), ListenerRefused: c.listenerRefused.Load(),
		ReplyRefused: c.replyRefused.Load(), AsksFailed: c.asksFailed.Load(),
	}
}

// Listen routes messages for addr, an address of this node, to handle,
// which must not block. The returned function stops listening.
func (t *Transport) Listen(addr Address, handle func(protocol.Message) error) (func(), error) {
	return t.listen(addr, listener{handle: handle})
}

// ListenDelivers is Listen with deliver taking the Delivers for addr, by
// value: sent by SendDeliver, or received from a cluster transport that
// hands envelopes over undecoded, a Deliver reaches it without being put
// in an interface value (an allocation per message). A Deliver received
// so may borrow its shard and entity ids, and the payload of a user
// message left encoded, from the frame it came in (see
// wire.Decoder.DecodeDeliver): deliver uses them during the call, and
// passes d through OwnDeliver before it keeps d or either id.
func (t *Transport) ListenDelivers(addr Address, handle func(protocol.Message) error, deliver func(protocol.Deliver) error) (func(), error) {
	return t.listen(addr, listener{handle: handle, deliver: deliver})
}

// OwnDeliver returns d with strings and an encoded payload of its own
// where d borrowed them from a frame (see ListenDelivers).
func (t *Transport) OwnDeliver(d protocol.Deliver) protocol.Deliver {
	t.dec.Own(&d, nil)
	return d
}

func (t *Transport) listen(addr Address, l listener) (func(), error) {
	if addr.Node != t.self {
		return nil, fmt.Errorf("remote: %s cannot listen at %s, an address of another node", t.self, addr)
	}
	target := wire.Target{Type: addr.Type, Coordinator: addr.Coordinator}
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, taken := t.listeners.Load().handlers[target]; taken {
		return nil, fmt.Errorf("remote: %s already has a listener", addr)
	}
	t.updateListenersLocked(func(ls *listeners) {
		ls.handlers[target] = l
		delete(ls.stopped, target)
	})
	return func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		t.updateListenersLocked(func(ls *listeners) {
			delete(ls.handlers, target)
			ls.stopped[target] = true
		})
	}, nil
}

// updateListenersLocked publishes a copy of the listeners that change
// has modified; t.mu is held.
func (t *Transport) updateListenersLocked(change func(*listeners)) {
	old := t.listeners.Load()
	ls := &listeners{handlers: maps.Clone(old.handlers), stopped: maps.Clone(old.stopped)}
	change(ls)
	if len(ls.handlers) <= maxScanned {
		ls.few = make([]targetListener, 0, len(ls.handlers))
		for target, l := range ls.handlers {
			ls.few = append(ls.few, targetListener{target, l})
		}
	}
	t.listeners.Store(ls)
}

// handler is target's listener; ok false, with stopped true when it had
// one that was removed.
func (t *Transport) handler(target wire.Target) (l listener, ok, stopped bool) {
	ls := t.listeners.Load()
	if ls.few != nil {
		for i := range ls.few {
			if ls.few[i].target == target {
				return ls.few[i].l, true, false
			}
		}
	} else if l, ok = ls.handlers[target]; ok {
		return l, true, false
	}
	return listener{}, false, ls.stopped[target]
}

// Send hands msg to the listener at to; it does not wait for handling,
// and messages from one sender to one address arrive in send order. To
// this node it hands msg to the listener as a value; to another it never
// blocks (cluster.Transport.Send). Errors for an address that cannot be
// reached (unknown, stale or closed) match ErrUnreachable as well as the
// cluster's error; a full link queue is cluster.ErrQueueFull, a user message the codec refuses the
// codec's error, a frame over the limit cluster.ErrFrameTooLarge.
func (t *Transport) Send(to Address, msg protocol.Message) error {
	target := wire.Target{Type: to.Type, Coordinator: to.Coordinator}
	if to.Node == t.self {
		l, err := t.local(to, target)
		if err != nil {
			return err
		}
		return l.take(msg)
	}
	w, err := t.enc.Pack(target, msg)
	if errors.Is(err, wire.ErrUnknownType) {
		return fmt.Errorf("%w: %w", ErrNotProtocol, err)
	}
	if err != nil {
		return fmt.Errorf("remote: %w", err)
	}
	return t.send(to.Node, w)
}

// SendDeliver is Send of *d, which it neither keeps nor modifies: to a
// cluster transport that takes encoded messages (cluster.EncodedSender),
// it encodes the envelope itself, into a buffer it reuses, so that the
// Deliver is never put in an interface value nor copied; to this node it
// hands a copy to the listener's deliver (see ListenDelivers). The errors
// are Send's.
func (t *Transport) SendDeliver(to Address, d *protocol.Deliver) error {
	target := wire.Target{Type: to.Type, Coordinator: to.Coordinator}
	if to.Node == t.self {
		l, err := t.local(to, target)
		if err != nil {
			return err
		}
		return l.handleDeliver(*d)
	}
	b := t.ct.Load()
	if b == nil || b.encoded == nil {
		return t.Send(to, *d)
	}
	buf := t.bufs.Get()
	defer t.bufs.Put(buf)
	env, err := t.enc.AppendDeliver((*buf)[:0], target, d)
	*buf = env
	if err != nil {
		return fmt.Errorf("remote: %w", err)
	}
	return t.sent(b.encoded.SendEncoded(to.Node, wire.EnvelopeManifest, env))
}

// local is the listener at to, an address of this node, counting a
// message handed to it.
func (t *Transport) local(to Address, target wire.Target) (listener, error) {
	l, ok, _ := t.handler(target)
	if !ok {
		return listener{}, fmt.Errorf("%w: %s: %w", ErrUnreachable, to, ErrUnknownTarget)
	}
	t.stat.local.Add(1)
	return l, nil
}

func (t *Transport) send(to cluster.UniqueAddress, msg any) error {
	b := t.ct.Load()
	if b == nil {
		return fmt.Errorf("%w: %w", ErrUnreachable, ErrNotBound)
	}
	return t.sent(b.ct.Send(to, msg))
}

// sent counts a message the cluster transport took (err nil), or returns
// its error, matching ErrUnreachable too when the node cannot be reached.
func (t *Transport) sent(err error) error {
	if err != nil {
		if errors.Is(err, cluster.ErrUnreachable) || errors.Is(err, cluster.ErrStaleIncarnation) || errors.Is(err, cluster.ErrClosed) {
			return fmt.Errorf("%w: %w", ErrUnreachable, err)
		}
		return err
	}
	t.stat.sent.Add(1)
	return nil
}

// Attach makes this transport the route of sys's replies to asks of other
// nodes: they, and the failures sent in their place, leave sys through
// RouteReply, the one route they take, and replies arriving for sys's
// asks are handed to it.
func (t *Transport) Attach(sys *entity.System) {
	t.sys.Store(sys)
	runtime.SetReplyRouter(sys, t)
}

// RouteReply implements runtime.ReplyRouter: it encodes v (a reply, or a
// failure in its place) and sends it to the asking incarnation.
func (t *Transport) RouteReply(to entity.ReplyAddress, v any) error {
	manifest, payload, err := runtime.EncodeReply(t.cfg.Codec, v)
	if err != nil {
		return fmt.Errorf("remote: reply to %s: %w", to, err)
	}
	node, r := cluster.UniqueAddress{Node: to.Node, Incarnation: to.Incarnation}, wire.Reply{To: to, Manifest: manifest, Payload: payload}
	b := t.ct.Load()
	if b == nil || b.encoded == nil {
		return t.send(node, wire.Envelope{Msg: r})
	}
	// As SendDeliver does: the envelope's bytes, for the cluster
	// transport to frame, without the Reply in an interface value. A
	// reply keeps no order with other messages (an ask takes the first
	// answer to arrive), so it may take the transport's quicker way back,
	// as the failures sent in place of replies do (sendAskFailed).
	buf := t.bufs.Get()
	defer t.bufs.Put(buf)
	*buf = wire.AppendReply((*buf)[:0], r)
	if b.replies != nil {
		return t.sent(b.replies.SendReply(node, wire.EnvelopeManifest, *buf))
	}
	return t.sent(b.encoded.SendEncoded(node, wire.EnvelopeManifest, *buf))
}

// Handle is the cluster.Handler of the bound transport: Receive, whose
// error it has already counted and logged.
func (t *Transport) Handle(from cluster.UniqueAddress, msg any) { _ = t.Receive(from, msg) }

// Receive handles one message from another node and returns why it was
// dropped, if it was (see the package doc); the drop is counted and
// logged once per kind and sender. It never blocks.
func (t *Transport) Receive(from cluster.UniqueAddress, msg any) error {
	t.stat.received.Add(1)
	if t.staleSender(from) {
		return t.refuse(&t.stat.stale, from, fmt.Errorf("remote: message from %s: %w", from, cluster.ErrStaleIncarnation))
	}
	env, ok := msg.(wire.Envelope)
	if !ok {
		return t.refuse(&t.stat.notProtocol, from, fmt.Errorf("%w: %T", ErrNotProtocol, msg))
	}
	switch r := env.Msg.(type) {
	case wire.Reply:
		return t.reply(from, r)
	case wire.AskFailed:
		return t.askFailed(from, r)
	}
	target := env.To
	m, failed, err := wire.Open(t.cfg.Codec, env)
	if err != nil {
		return t.refuse(&t.stat.notProtocol, from, fmt.Errorf("%w: %w", ErrNotProtocol, err))
	}
	if len(failed) > 0 {
		err = undecodable(failed, env)
		t.failAsks(failedAsks(failed), wire.RefusedUndecodable, err)
		if m == nil {
			return t.refuse(&t.stat.undecodable, from, err)
		}
		// A hand-over keeps what decodes; the rest is reported.
		_ = t.refuse(&t.stat.undecodable, from, err)
	}
	l, ok, stopped := t.handler(target)
	if !ok {
		return t.unknownTarget(from, target, stopped, wire.Asks(env))
	}
	if herr := l.take(m); herr != nil {
		return t.listenerRefused(from, target, herr, wire.Asks(env))
	}
	t.stat.delivered.Add(1)
	return err
}

// receiveEncoded is the cluster.EncodedHandler of EnvelopeManifest: a
// Deliver is decoded into a value and handed to its listener as one; any
// other envelope, and a Deliver whose user message is still encoded (it
// carries reply addresses, or did not decode), takes Receive. An error
// is an envelope that does not decode: the cluster transport counts and
// drops it as one its codec could not decode. payload is lent for the
// call (cluster.EncodedHandler): what is kept of it is copied, a Deliver's
// as DecodeDeliverInto and Own say, any other envelope whole.
func (t *Transport) receiveEncoded(from cluster.UniqueAddress, payload []byte) error {
	var target wire.Target
	var d protocol.Deliver
	isDeliver, err := t.dec.DecodeDeliverInto(payload, &target, &d)
	switch {
	case err != nil:
		return fmt.Errorf("remote: %w", err)
	case !isDeliver:
		env, err := t.dec.Decode(bytes.Clone(payload)) // Receive keeps what it decodes
		if err != nil {
			return fmt.Errorf("remote: %w", err)
		}
		_ = t.Receive(from, env)
		return nil
	}
	if _, sealed := d.Msg.(wire.Encoded); sealed {
		t.dec.Own(&d, &target) // Receive may keep it
		_ = t.Receive(from, wire.Envelope{To: target, Msg: d})
		return nil
	}
	_ = t.receiveDeliver(from, &target, &d)
	return nil
}

// receiveDeliver is Receive of an opened Deliver for target, which
// carries no reply address: there is no ask to fail. It takes both by
// pointer (its caller's, which it may modify), so that they are copied
// once, into the listener's call.
func (t *Transport) receiveDeliver(from cluster.UniqueAddress, target *wire.Target, d *protocol.Deliver) error {
	t.stat.received.Add(1)
	if t.staleSender(from) {
		return t.refuse(&t.stat.stale, from, fmt.Errorf("remote: message from %s: %w", from, cluster.ErrStaleIncarnation))
	}
	l, ok, stopped := t.handler(*target)
	if !ok {
		return t.unknownTarget(from, *target, stopped, nil)
	}
	if l.deliver == nil {
		t.dec.Own(d, nil) // handle may keep it
	}
	if herr := l.handleDeliver(*d); herr != nil {
		return t.listenerRefused(from, *target, herr, nil)
	}
	t.stat.delivered.Add(1)
	return nil
}

// unknownTarget refuses a message for target, which nobody here listens
// at, and fails asks, those waiting on it.
func (t *Transport) unknownTarget(from cluster.UniqueAddress, target wire.Target, stopped bool, asks []entity.ReplyAddress) error {
	err := fmt.Errorf("%w: %s on %s, from %s", ErrUnknownTarget, target, t.self, from)
	t.failAsks(asks, wire.RefusedUnknownTarget, err)
	// A region that shut down here, or a coordinator this node does not
	// run (yet, or any more: it runs only while it holds its lease, and
	// regions retry what it missed): expected, not news.
	if stopped || target.Coordinator {
		t.stat.unknownTarget.Add(1)
		t.log.Debug("remote: dropped a message for a listener not running here", "from", from, "err", err)
		return err
	}
	return t.refuse(&t.stat.unknownTarget, from, err)
}

// listenerRefused refuses a message target's listener refused (herr),
// and fails asks, those waiting on it.
func (t *Transport) listenerRefused(from cluster.UniqueAddress, target wire.Target, herr error, asks []entity.ReplyAddress) error {
	err := fmt.Errorf("remote: %s refused a message from %s: %w", target, from, herr)
	t.failAsks(asks, wire.RefusedByListener, err)
	return t.refuse(&t.stat.listenerRefused, from, err)
}

// undecodable reports the user messages of env that did not decode: a
// *DecodeError for the only one, or a count and the first.
func undecodable(failed []wire.Undecodable, env wire.Envelope) error {
	f := failed[0]
	first := &DecodeError{Manifest: f.Encoded().Manifest, EntityID: f.Deliver.EntityID, Err: f.Err}
	if _, single := env.Msg.(protocol.Deliver); single {
		return first
	}
	return fmt.Errorf("remote: %d handed-over messages dropped, the first: %w", len(failed), first)
}

// failedAsks lists the reply addresses inside messages that did not decode.
func failedAsks(failed []wire.Undecodable) []entity.ReplyAddress {
	var out []entity.ReplyAddress
	for _, f := range failed {
		out = append(out, f.Encoded().ReplyTo...)
	}
	return out
}

// failAsks tells the askers waiting on user messages that were refused
// here: asks lists their reply addresses.
func (t *Transport) failAsks(asks []entity.ReplyAddress, kind string, cause error) {
	for _, to := range asks {
		f := wire.AskFailed{To: to, Kind: kind, Reason: cause.Error()}
		var err error
		if to.Node == t.self.Node && to.Incarnation == t.self.Incarnation {
			err = t.askFailed(t.self, f)
		} else {
			err = t.sendAskFailed(cluster.UniqueAddress{Node: to.Node, Incarnation: to.Incarnation}, f)
		}
		if err == nil {
			t.stat.asksFailed.Add(1)
		}
	}
}

// sendAskFailed sends f to the node of its ask as a reply is sent, on the
// cluster transport's way for replies when it has one (RouteReply): an
// ask's answers, a reply or a failure, take one way.
func (t *Transport) sendAskFailed(to cluster.UniqueAddress, f wire.AskFailed) error {
	env := wire.Envelope{Msg: f}
	b := t.ct.Load()
	if b == nil || b.replies == nil {
		return t.send(to, env)
	}
	manifest, payload, err := t.cfg.Codec.Encode(env)
	if err != nil {
		return fmt.Errorf("remote: ask failure for %s: %w", f.To, err)
	}
	return t.sent(b.replies.SendReply(to, manifest, payload))
}

// askFailed fails this node's ask named by f.
func (t *Transport) askFailed(from cluster.UniqueAddress, f wire.AskFailed) error {
	sys := t.sys.Load()
	if sys == nil {
		return t.refuse(&t.stat.replyRefused, from, fmt.Errorf("remote: ask failure for %s: %w", f.To, entity.ErrNoRemoteReplies))
	}
	err := runtime.FailAsk(sys, f.To, &RefusedError{Peer: from, Kind: f.Kind, Reason: f.Reason})
	if err != nil && !errors.Is(err, entity.ErrAskEnded) {
		return t.refuse(&t.stat.replyRefused, from, err)
	}
	return err
}

func (t *Transport) reply(from cluster.UniqueAddress, r wire.Reply) error {
	sys := t.sys.Load()
	if sys == nil {
		return t.refuse(&t.stat.replyRefused, from, fmt.Errorf("remote: reply to %s: %w", r.To, entity.ErrNoRemoteReplies))
	}
	if err := runtime.DeliverReply(context.Background(), sys, r.To, r.Manifest, r.Payload); err != nil {
		t.stat.replyRefused.Add(1)
		if errors.Is(err, entity.ErrAskEnded) {
			return err // a race with the ask's deadline: the runtime counted a dead letter
		}
		t.logOnce(from, err)
		return err
	}
	t.stat.replies.Add(1)
	return nil
}

// staleSender reports whether the view holds from as Down or replaced.
// The verdict is kept until the view changes.
func (t *Transport) staleSender(from cluster.UniqueAddress) bool {
	if t.cfg.View == nil {
		return false
	}
	view := t.cfg.View()
	if view == nil {
		return false
	}
	known := t.verdicts.Load()
	if known != nil && known.view == view {
		for _, v := range known.senders {
			if v.from == from {
				return v.stale
			}
		}
	}
	stale := staleIn(*view, from)
	next := &verdicts{view: view}
	if known != nil && known.view == view {
		if len(known.senders) == maxVerdicts {
			return stale
		}
		next.senders = append(make([]verdict, 0, len(known.senders)+1), known.senders...)
	}
	next.senders = append(next.senders, verdict{from: from, stale: stale})
	t.verdicts.Store(next)
	return stale
}

// staleIn reports whether view holds from as Down or replaced.
func staleIn(view cluster.View, from cluster.UniqueAddress) bool {
	if m, ok := view.Member(from); ok {
		return m.Status == cluster.Down
	}
	for _, m := range view.Members() {
		if m.Address.Node == from.Node && m.Address.Incarnation > from.Incarnation {
			return true
		}
	}
	return false // not in the view yet: views lag
}

// refuse counts and logs a dropped message and returns err.
func (t *Transport) refuse(c *atomic.Uint64, from cluster.UniqueAddress, err error) error {
	c.Add(1)
	t.logOnce(from, err)
	return err
}

// logOnce logs err at Warn the first time its kind comes from from, and at
// Debug after that: a peer that keeps sending bad messages cannot flood
// the log, and Stats keeps counting.
func (t *Transport) logOnce(from cluster.UniqueAddress, err error) {
	key := kindOf(err) + " " + from.String()
	if _, seen := t.logged.LoadOrStore(key, struct{}{}); seen {
		t.log.Debug("remote: dropped a message", "from", from, "err", err)
		return
	}
	t.log.Warn("remote: dropped a message (further ones of this kind from this sender are logged at debug level)", "from", from, "err", err)
}

func kindOf(err error) string {
	for _, k := range []error{ErrUndecodable, ErrUnknownTarget, ErrNotProtocol, cluster.ErrStaleIncarnation,
		entity.ErrReplyUndecodable, entity.ErrStaleIncarnation, runtime.ErrNotThisNode} {
		if errors.Is(err, k) {
			return k.Error()
		}
	}
	return "other"
}
