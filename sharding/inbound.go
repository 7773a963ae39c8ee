package sharding

import "github.com/shoal-dev/shoal/sharding/internal/protocol"

// inboundDeliver is the region's listener for the Delivers other regions
// send it over the transport, which hands them over by value (every other
// message is queued, see queueInbound). A Deliver for a shard this region
// hosts and routes to directly goes straight to the shard's entity on the
// caller's goroutine (for the remote transport, the one that read it off
// the socket), as a local Tell would: through the fast path, or the read
// lock of the shard's stripe, never the region's write lock or its
// control entity. Everything else (protocol messages, and a Deliver the
// region cannot route directly, which is put in an interface value only
// then) is queued for the control entity, which steps the core under the
// write lock, one message at a time.
//
// Order: a transport hands a link's messages over one at a time, in the
// order they were sent (docs/DESIGN.md, "What the protocol assumes of the
// network"). A Deliver goes straight to its entity only while the control
// entity holds no message from the transport, so it never overtakes one
// sent before it on its link: not a Deliver that had to wait, nor a Fence,
// HandOver or HandOff (docs/DESIGN.md, "Fence on the data link",
// "Hand-over, not carry"); and what it overtakes of other links, a
// transport never ordered. A Deliver handled here is in the entity's
// mailbox when inboundDeliver returns, before the transport hands over the
// next message of the link, so a Fence behind it finds it there.
//
// d's ids may be borrowed from the frame it came in (remote.ListenDelivers):
// the fast path uses them as they are, everything else owns them first.
// It takes d by pointer, the listener's copy, which it does not keep.
func (r *Region[C]) inboundDeliver(d *protocol.Deliver) error {
	if r.queued.Load() == 0 && r.tellInboundFast(d) {
		return nil
	}
	own := r.s.remote.OwnDeliver(*d)
	if r.queued.Load() == 0 && r.deliverInbound(own) {
		return nil
	}
	return r.queueInbound(own)
}

// queueInbound queues m, from the transport, for the control entity.
func (r *Region[C]) queueInbound(m Message) error {
	r.queued.Add(1)
	if err := r.ctl.Tell(queuedInbound{m}); err != nil {
		r.queued.Add(-1)
		return err
	}
	return nil
}

// queuedInbound is a message from the transport in the control entity's
// mailbox, counted in Region.queued until it is handled.
type queuedInbound struct{ msg Message }

func (queuedInbound) ProtocolMessage() {}

// tellInboundFast hands d to its entity on the fast path and reports true,
// or reports false having done nothing. It keeps neither of d's ids, which
// may be borrowed, but for a message the entity refused (a dead letter).
func (r *Region[C]) tellInboundFast(d *protocol.Deliver) bool {
	msg, ok := d.Msg.(C)
	if !ok || d.Start {
		return false
	}
	ok, err := r.tellFast(d.EntityID, r.fast.entities.hash(d.EntityID), msg, traceOf(d))
	if ok && err != nil {
		own := r.s.remote.OwnDeliver(*d)
		r.deadLetter(err, pending[C]{entityID: own.EntityID, msg: msg, ask: own.Ask}, "forwarded or buffered message refused")
	}
	return ok
}

// deliverInbound hands d to its entity, as the core would with the shard
// routable here, and reports true; or, doing nothing, false when it
// cannot: the shard is not hosted here or not routable directly, or a
// writer holds or awaits the stripe's lock (inbound may be called with
// the lock of this region or another held: it never waits for one). A
// message the entity refuses is a dead letter, as when the core delivers
// it: its sender's Tell returned long ago.
func (r *Region[C]) deliverInbound(d protocol.Deliver) bool {
	msg, ok := d.Msg.(C)
	if !ok && !d.Start {
		return false // the core notes it
	}
	parent := traceOf(&d)
	stripe := r.mu.TryRLockShard(d.Shard)
	if stripe == nil {
		return false
	}
	e := r.core.routable(d.Shard)
	if e == nil || !e.hosted {
		stripe.RUnlock()
		return false
	}
	e.local.routed(r.mu.epoch.Load())
	err := e.local.deliver(d.EntityID, msg, d.Start, d.Ask, false, parent)
	stripe.RUnlock()
	if err != nil {
		r.deadLetter(err, pending[C]{entityID: d.EntityID, msg: msg, start: d.Start, ask: d.Ask}, "forwarded or buffered message refused")
	}
	return true
}
