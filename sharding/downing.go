package sharding

import (
	"context"
	"maps"
	"slices"
	"strings"
	"time"

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
//
// Keep the majority (issue 12): a coordinator cut off from its peers but
// not from the store would otherwise down every other node and serve
// alone. So it downs only while its side is the majority, as Pekko's
// keep-majority split-brain strategy does:
//
//   - The sides: the members of the view that are not Down and carry the
//     type's role (only they can host the coordinator, so a majority
//     counted among them can always elect one). The coordinator's side is
//     itself and those it sees reachable; the other side those it sees
//     unreachable (or has downed), except those whose node lease the
//     store says expired: they have fenced themselves, they are dead, not
//     a side. This is where the arbiter beats Pekko: a survivor of crashes
//     regains the majority as the crashed nodes' leases expire.
//   - A strict majority wins. On an exact half, the side holding the
//     oldest of the counted members wins. (Pekko's keep-majority breaks
//     the tie by the lowest address; the oldest is what every node's view
//     agrees on here, and it is normally the coordinator already, so a tie
//     moves nothing.)
//   - It decides only once the view's unreachable set has been unchanged
//     for stableAfter (Pekko's stable-after): memberlist detects the
//     members of the other side one by one, and a coordinator that sees
//     only part of the other side unreachable must not down it.
//   - On the minority side it downs nobody (it still asks the store which
//     leases expired: that is only reading) and, once the view is stable
//     and every member counted against it is known to hold a live lease,
//     stands down (standDown): the runner releases the coordinator lease
//     and stops, so that the majority's oldest reachable member (the
//     coordinator's place in its view, as unreachable members are never
//     oldest) acquires it and downs the minority's nodes, whose shards move
//     once their leases expired. The region restarts its coordinator after
//     a back-off, as after any failure; while another holds the lease it
//     waits for it.
//
// The lease is still the final guard: whichever side decides, only the
// holder of the coordinator lease downs, and only expired leases move
// shards.
type downing struct {
	self        string
	role        string
	stableAfter time.Duration
	nodes       map[string]*failedNode
	view        []Member  // the latest view
	failedSig   string    // the view's unreachable or Down members, sorted
	stableSince time.Time // when failedSig last changed
}

type failedNode struct {
	last    Member // as last seen in a view; zero while never seen
	down    bool   // the store must down it (membership said it failed)
	downed  bool   // the store confirmed the down
	expired bool   // the store confirmed its lease expired: final
	checked bool   // the store answered an expiry check
	// downSent: a DownNode call went out; the node is doomed even if it
	// turns up healthy.
	downSent bool
	busy     bool // a store call for it is under way
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

// newDowning returns the machine of the coordinator on node self for the
// type's role; it decides on a view stable for stableAfter.
func newDowning(self, role string, stableAfter time.Duration) *downing {
	return &downing{self: self, role: role, stableAfter: stableAfter, nodes: make(map[string]*failedNode)}
}

// observe takes a membership view, the regions the core knows of, and
// the coordinator's clock.
func (d *downing) observe(members []Member, known []string, now time.Time) {
	d.view = members
	var failed []string
	for _, m := range members {
		if !m.Reachable || m.Status == allocation.Down {
			failed = append(failed, m.Node)
		}
	}
	slices.Sort(failed)
	if sig := strings.Join(failed, ","); sig != d.failedSig || d.stableSince.IsZero() {
		d.failedSig, d.stableSince = sig, now
	}
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
		case n != nil && !n.downSent && !n.expired:
			// Absent before, or failed but never downed (the view was
			// not stable yet), healthy now: nothing to do.
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

// due returns the store calls to make now, at most one per node, sorted:
// downs while the coordinator may down (mayDown), expiry checks
// otherwise.
func (d *downing) due(now time.Time) []downCall {
	var calls []downCall
	mayDown := d.mayDown(now)
	for _, name := range slices.Sorted(maps.Keys(d.nodes)) {
		n := d.nodes[name]
		if n.busy || n.expired {
			continue
		}
		n.busy = true
		down := mayDown && n.down && !n.downed
		n.downSent = n.downSent || down
		calls = append(calls, downCall{node: name, down: down})
	}
	return calls
}

// stable reports whether the view's unreachable set has held for
// stableAfter.
func (d *downing) stable(now time.Time) bool {
	return !d.stableSince.IsZero() && now.Sub(d.stableSince) >= d.stableAfter
}

// mayDown reports whether the coordinator may down failed members now:
// the view is stable and its side is the majority.
func (d *downing) mayDown(now time.Time) bool {
	mine, _ := d.sides()
	return d.stable(now) && mine
}

// standDown reports whether the coordinator must give its lease up: the
// view is stable, its side is the minority, and the store said of every
// member counted against it that its lease had not expired.
func (d *downing) standDown(now time.Time) bool {
	mine, theirs := d.sides()
	if mine || !d.stable(now) {
		return false
	}
	for _, name := range theirs {
		if n := d.nodes[name]; n == nil || !n.checked {
			return false
		}
	}
	return true
}

// sides reports whether the coordinator's side of the latest view is the
// majority (see downing), and names the members counted on the other side.
func (d *downing) sides() (majority bool, theirs []string) {
	var mine []string
	var oldest Member
	counted := 0
	for _, m := range d.view {
		if m.Status == allocation.Down || !m.HasRole(d.role) && m.Node != d.self {
			continue
		}
		n := d.nodes[m.Node]
		switch {
		case n != nil && n.expired:
			continue // fenced itself: dead, no side
		case m.Node == d.self || m.Reachable && (n == nil || !n.down):
			mine = append(mine, m.Node)
		default:
			theirs = append(theirs, m.Node)
		}
		if counted == 0 || older(m, oldest) {
			oldest = m
		}
		counted++
	}
	if !slices.Contains(mine, d.self) {
		mine = append(mine, d.self) // a view without self: it is on its own side
	}
	switch {
	case len(mine) != len(theirs):
		return len(mine) > len(theirs), theirs
	default:
		return slices.Contains(mine, oldest.Node), theirs
	}
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
	}
	n.checked = true
	switch {
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
