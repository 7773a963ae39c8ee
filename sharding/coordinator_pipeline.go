package sharding

import (
	"slices"

	"github.com/shoal-dev/shoal/sharding/internal/protocol"
)

// coordinatorPipeline orders a coordinator's store writes and the messages
// that wait for them, so that the core keeps stepping while a write is in
// flight (docs/DESIGN.md, "Store before send"). It does no IO: the runner
// (and the simulator's) asks it what to write and what to send.
//
// Each step's store changes join the pending batch; at most one batch is
// in flight, so batches commit in the order of the steps that made them,
// and a batch is the changes of consecutive steps, in order (one Update:
// all or none). A step's messages are held until every change of that
// step and of every earlier step has committed, and go out in step order:
// they may name homes the store does not have yet, and a successor that
// rebuilds from the store must never contradict what was announced. A
// failed batch stays in flight and is written again, whole, while later
// steps keep joining the pending batch behind it, so nothing is lost or
// reordered.
//
// One exception lets a region that lost a home get it back while a slow
// batch is in flight: see mayAnswerNow.
type coordinatorPipeline struct {
	inflight *writeBatch // nil while nothing is being written
	pending  writeBatch  // the steps since; not written yet
	seq      uint64      // of the last batch put in flight
	failures int         // failed writes of the batch in flight, in a row
	idle     bool        // the batch in flight failed and waits for retry
}

// writeBatch is the changes of consecutive steps, in order, and their
// messages, sent once the changes committed.
type writeBatch struct {
	seq     uint64
	changes []AllocationChange
	out     []outbound
	steps   int // steps whose messages wait here
}

// held reports whether any step's messages still wait for the store.
func (p *coordinatorPipeline) held() bool {
	return p.inflight != nil || p.pending.steps > 0
}

// heldSteps counts the steps whose messages wait for the store: the
// runner bounds it, as the store may be down for long.
func (p *coordinatorPipeline) heldSteps() int {
	n := p.pending.steps
	if p.inflight != nil {
		n += p.inflight.steps
	}
	return n
}

// retrying reports whether the batch in flight failed at least once.
func (p *coordinatorPipeline) retrying() bool { return p.failures > 0 }

// take queues the outcome of the core's step on in, and returns what may
// be sent at once: everything, when the step changed nothing and nothing
// before it is held; else only an answer mayAnswerNow allows.
func (p *coordinatorPipeline) take(in Message, changes []change, out []outbound) (now []outbound) {
	if len(changes) == 0 && (len(out) == 0 || !p.held() || p.mayAnswerNow(in, out)) {
		return out // nothing to write, and nothing that must wait for a write
	}
	for _, c := range changes {
		p.pending.changes = append(p.pending.changes, c.stored())
	}
	p.pending.out = append(p.pending.out, out...)
	p.pending.steps++
	return nil
}

// mayAnswerNow allows the answer to a GetShardHome for a shard whose
// home has committed to overtake the messages held for the store. It is
// safe because:
//   - the step made no change, and no uncommitted change (in flight or
//     pending) names the shard, so the home it names is the stored one: a
//     successor rebuilding from the store knows the same home;
//   - no held message to the asker names the shard (a ShardHomes names
//     every shard), so the asker sees this shard's messages in the order
//     they were decided; a region applies a ShardHome to that shard alone
//     (regionCore.step), so its order against other shards' messages does
//     not matter, and against a held RegisterAck of the same epoch neither
//     (that epoch is adopted by whichever comes first);
//   - the core answers no GetShardHome for a shard being handed off, so
//     no hand-off message is overtaken.
func (p *coordinatorPipeline) mayAnswerNow(in Message, out []outbound) bool {
	q, ok := in.(protocol.GetShardHome)
	if !ok || len(out) != 1 || out[0].to != q.Region {
		return false
	}
	if home, ok := out[0].msg.(protocol.ShardHome); !ok || home.Shard != q.Shard {
		return false
	}
	names := func(c AllocationChange) bool { return c.Shard == q.Shard }
	if slices.ContainsFunc(p.pending.changes, names) {
		return false
	}
	toAsker := func(o outbound) bool { return o.to == q.Region && namesShard(o.msg, q.Shard) }
	if slices.ContainsFunc(p.pending.out, toAsker) {
		return false
	}
	if b := p.inflight; b != nil && (slices.ContainsFunc(b.changes, names) || slices.ContainsFunc(b.out, toAsker)) {
		return false
	}
	return true
}

// namesShard reports whether a coordinator message may say something of
// shard: conservatively, any message but the few that name no shard.
func namesShard(msg Message, shard string) bool {
	switch m := msg.(type) {
	case protocol.ShardHome:
		return m.Shard == shard
	case protocol.HostShard:
		return m.Shard == shard
	case protocol.BeginHandOff:
		return m.Shard == shard
	case protocol.HandOff:
		return m.Shard == shard
	case protocol.RegisterAck, protocol.LeaveAck:
		return false
	}
	return true // ShardHomes, and anything new
}

// next puts the pending batch in flight when nothing is, and returns it
// for the runner to write; nil when there is nothing to write or a batch
// is in flight already.
func (p *coordinatorPipeline) next() *writeBatch {
	if p.inflight != nil || len(p.pending.changes) == 0 {
		return nil
	}
	p.seq++
	b := p.pending
	b.seq = p.seq
	p.inflight, p.pending = &b, writeBatch{}
	return p.inflight
}

// committed takes the success of batch seq and returns the messages it
// released, in step order: its own, and the pending steps' when they
// changed nothing (they waited only for it). Then call next.
func (p *coordinatorPipeline) committed(seq uint64) []outbound {
	if p.inflight == nil || p.inflight.seq != seq {
		return nil // not the batch in flight: ignored
	}
	out := p.inflight.out
	p.inflight, p.failures, p.idle = nil, 0, false
	if len(p.pending.changes) == 0 {
		out = append(out, p.pending.out...)
		p.pending = writeBatch{}
	}
	return out
}

// failed takes the failure of batch seq: it stays in flight, to be
// written again by retry; false if seq is not the batch in flight.
func (p *coordinatorPipeline) failed(seq uint64) bool {
	if p.inflight == nil || p.inflight.seq != seq {
		return false
	}
	p.failures++
	p.idle = true
	return true
}

// retry returns the failed batch in flight, to be written again whole;
// nil when there is none, or it is being written already.
func (p *coordinatorPipeline) retry() *writeBatch {
	if p.inflight == nil || !p.idle {
		return nil
	}
	p.idle = false
	return p.inflight
}

// drop forgets everything held, returning the messages that will never
// be sent (the coordinator stops).
func (p *coordinatorPipeline) drop() []outbound {
	var out []outbound
	if p.inflight != nil {
		out = append(out, p.inflight.out...)
	}
	out = append(out, p.pending.out...)
	p.inflight, p.pending, p.failures, p.idle = nil, writeBatch{}, 0, false
	return out
}
