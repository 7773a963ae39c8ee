package sharding

import (
	"context"
	"maps"
	"slices"

	"github.com/shoal-dev/shoal/sharding/allocation"
)

// NodeLeases is the coordinator's side of the node leases (DESIGN §8):
// how it downs a node incarnation that membership reports failed, and how
// it learns when that node's shards may move. Nodes are named as
// Member.Node names them. Package sharding/remote adapts a lease.Store.
type NodeLeases interface {
	// DownNode marks node down in the store, so that its next lease
	// renewal fails and it fences itself (stops every entity at once).
	// Downing twice, or a node that released its lease, is harmless.
	DownNode(ctx context.Context, node string) error
	// NodeLeaseExpired reports whether node's lease has expired in the
	// store's time; only then may its shards start elsewhere. A node the
	// store never heard of never hosted anything: expired.
	NodeLeaseExpired(ctx context.Context, node string) (bool, error)
}

// downing is the coordinator's bookkeeping of failed nodes as a pure
// machine: the runner shows it each membership view (observe), makes the
// store calls it asks for (due) and reports their results (result); the
// coordinator core sees the view through filter, in which a failed node
// stays a member, unreachable and not allocatable, until the store says
// its lease expired, and only then is Down. So a shard never starts
// elsewhere while its old home may still run it: the old home fences
// itself by its own clock before its lease expires in the store's.
//
// Which nodes: every member the view reports unreachable or Down is
// downed (a Down member that left gracefully released its lease first, so
// downing it changes nothing); a region the core knows of that the view
// does not hold at all (a predecessor's, or one the view has not caught up
// with) is not downed — it may be alive and new — but it is removed only
// once its lease has expired.
type downing struct {
	nodes map[string]*failedNode
}

type failedNode struct {
	last    Member // as last seen in a view; zero while never seen
	down    bool   // the store must down it (membership said it failed)
	downed  bool   // the store confirmed the down
	expired bool   // the store confirmed its lease expired: final
	busy    bool   // a store call for it is under way
}

// downCall is a store call the runner makes for the machine.
type downCall struct {
	node string
	down bool // DownNode; else NodeLeaseExpired
}

// downResult is the answer to a downCall, delivered to the coordinator.
type downResult struct {
	call    downCall
	expired bool
	err     error
}

func (downResult) ProtocolMessage() {}

// downingTick makes the runner retry failed calls and poll expiries.
type downingTick struct{}

func (downingTick) ProtocolMessage() {}

func newDowning() *downing { return &downing{nodes: make(map[string]*failedNode)} }

// observe takes a membership view and the regions the core knows of.
func (d *downing) observe(members []Member, known []string) {
	inView := make(map[string]bool, len(members))
	for _, m := range members {
		inView[m.Node] = true
		n := d.nodes[m.Node]
		failed := !m.Reachable || m.Status == allocation.Down
		switch {
		case failed && n == nil:
			d.nodes[m.Node] = &failedNode{last: m, down: true}
		case failed:
			n.last, n.down = m, true
		case n != nil && !n.down && !n.expired:
			// Absent before, healthy now: the view had not caught up.
			delete(d.nodes, m.Node)
		case n != nil:
			n.last = m
		}
	}
	for _, r := range known {
		if !inView[r] && d.nodes[r] == nil {
			d.nodes[r] = &failedNode{}
		}
	}
	// Forget what neither the view nor the core names any more.
	for name, n := range d.nodes {
		if !inView[name] && !slices.Contains(known, name) && (n.expired || !n.down) {
			delete(d.nodes, name)
		}
	}
}

// due returns the store calls to make now, at most one per node, sorted.
func (d *downing) due() []downCall {
	var calls []downCall
	for _, name := range slices.Sorted(maps.Keys(d.nodes)) {
		n := d.nodes[name]
		if n.busy || n.expired {
			continue
		}
		n.busy = true
		calls = append(calls, downCall{node: name, down: n.down && !n.downed})
	}
	return calls
}

// result records a call's answer; it reports whether a node's lease is
// newly known to have expired, so that the core must see a new view.
func (d *downing) result(r downResult) bool {
	n := d.nodes[r.call.node]
	if n == nil {
		return false
	}
	n.busy = false
	switch {
	case r.err != nil: // retried on the next tick
		return false
	case r.call.down:
		n.downed = true
		return false
	case r.expired && !n.expired:
		n.expired = true
		return true
	}
	return false
}

// filter returns the view as the core must see it: a failed node whose
// lease has not expired is an unreachable, Leaving member (so its shards
// stay put and it gets no new ones), one whose lease expired is Down.
// known are the regions the core knows of now: one the view does not hold
// is held back as observe does, even when it registered after the last
// view (the view lags), so that the core never takes it for gone.
func (d *downing) filter(members []Member, known []string) []Member {
	inView := make(map[string]bool, len(members))
	for _, m := range members {
		inView[m.Node] = true
	}
	for _, r := range known {
		if !inView[r] && d.nodes[r] == nil {
			d.nodes[r] = &failedNode{}
		}
	}
	out := make([]Member, 0, len(members)+len(d.nodes))
	for _, m := range members {
		if d.nodes[m.Node] == nil {
			out = append(out, m)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(d.nodes)) {
		n := d.nodes[name]
		m := n.last
		m.Node = name
		m.Reachable = false
		m.Status = allocation.Leaving
		if n.expired {
			m.Status = allocation.Down
		}
		out = append(out, m)
	}
	return out
}
