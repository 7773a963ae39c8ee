package sharding

import (
	"context"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/internal/runtime"
)

// NodeLeases is the coordinator's side of the node leases (docs/DESIGN.md,
// "Leases and self-fencing"): how it downs a node incarnation that membership
// reports failed, and how it learns when that node's shards may move. Nodes
// are named as Member.Node names them. Package node adapts a lease.Store.
type NodeLeases interface {
	// DownNode marks node down in the store, so that its next lease
	// renewal fails and it fences itself (stops every entity at once).
	// Downing twice, or a node that released its lease, is harmless.
	DownNode(ctx context.Context, node cluster.UniqueAddress) error
	// NodeLeaseExpired reports whether node's lease has expired in the
	// store's time; only then may its shards start elsewhere. A node the
	// store never heard of never hosted anything: expired.
	NodeLeaseExpired(ctx context.Context, node cluster.UniqueAddress) (bool, error)
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
// Which nodes: every member the view reports unreachable or Down, or
// that left the view after it was counted (below), is downed (a Down
// member that left gracefully released its lease first, so downing it
// changes nothing); a region the core knows of that the view does not
// hold at all and that was never counted (a predecessor's, or one the
// view has not caught up with) is not downed — it may be alive and new —
// but it is removed only once its lease has expired.
//
// Keep the majority (docs/DESIGN.md, "Downing: keep the majority"): a
// coordinator cut off from its peers but not from the store would otherwise
// down every other node and serve alone. So it downs only while its side is
// the majority, as Pekko's keep-majority split-brain strategy does:
//
//   - Who counts (counted): every member with the type's role (only they
//     can host the coordinator, so a majority counted among them can
//     always elect one), and this node, from the first view that shows it
//     Up, Leaving, Exiting or Down (never Joining), until the store says
//     its lease expired or was released. A member first seen while a
//     counted one is on the other side counts only once none is (admit):
//     the other side cannot see it join. Membership's own verdicts never
//     shrink the count: memberlist turns a failed member Down after its
//     reconnect timeout and then drops it from the view, on both sides
//     of a partition, so a count taken from the view would let a cut-off
//     coordinator count itself a majority of one (as a reverted first
//     attempt did). Only the store's word ends a member: its lease
//     expired (it crashed or fenced itself) or was released (it left
//     gracefully, which releases the lease before it goes, so it stops
//     counting at once). This is where the arbiter beats Pekko: a
//     survivor of crashes regains the majority as the crashed nodes'
//     leases expire.
//   - The sides: this node's side is itself and the counted members the
//     latest view shows Reachable and not Down (and not already being
//     downed); the other side every other counted member.
//   - A strict majority of the counted members wins. On an exact half, the
//     side holding the oldest counted member wins (Pekko breaks the tie by
//     the lowest address; the oldest is what every node's view agrees on
//     here, and it is normally the coordinator already, so a tie moves
//     nothing).
//   - It decides only once the other side has been unchanged for
//     stableAfter (Pekko's stable-after): memberlist detects the members
//     of the other side one by one, and a coordinator that sees only part
//     of the other side unreachable must not down it.
//   - On the minority side it downs nobody (it still asks the store which
//     leases expired: that is only reading, and lets crashed members stop
//     counting) and, once the other side is stable and the store said,
//     since it became stable, that every member on it holds a live lease,
//     stands down (standDown): the runner releases the coordinator lease
//     and stops, and keeps off the lease for heldOff, so that the
//     majority's oldest reachable member (the coordinator's place in its
//     view, as unreachable members are never oldest) acquires it and
//     downs this side's nodes, which then fence themselves. Their shards
//     move once their leases expired.
//
// The machine outlives its runner: the region keeps it (resume), so that
// a coordinator restarted on the minority side still counts the members
// its node saw before memberlist dropped them; and a runner waiting for
// the lease observes every view too, so that the majority's new
// coordinator counts (and downs) the old one, which memberlist drops from
// its view before the old coordinator lease is released or expires.
//
// The lease is still the final guard: whichever side decides, only the
// holder of the coordinator lease downs, and only expired leases move
// shards.
type downing struct {
	self        cluster.UniqueAddress
	role        string
	stableAfter time.Duration
	nodes       map[cluster.UniqueAddress]*failedNode
	counted     map[cluster.UniqueAddress]cluster.Member // who counts towards the majority (see downing), as last seen
	view        map[cluster.UniqueAddress]cluster.Member // the latest view, by node
	theirsSig   string                                   // the other side, sorted, joined
	stableSince time.Time                                // when theirsSig last changed; zero before the first view
	side        uint64                                   // counts the changes of theirsSig
	offUntil    time.Time                                // after a stand-down: do not take the lease before
	// polling names the counted members, healthy in the view, whose lease
	// expiry a call under way asks of the store (see due).
	polling map[cluster.UniqueAddress]bool
}

type failedNode struct {
	last    cluster.Member // as last seen in a view; zero while never seen
	down    bool           // the store must down it (membership said it failed)
	downed  bool           // the store confirmed the down
	expired bool           // the store confirmed its lease expired: final
	checked bool           // the store said its lease is live since the other side last changed
	askedOn uint64         // the side (downing.side) the call under way was asked on
	// downSent: a DownNode call went out; the node is doomed even if it
	// turns up healthy.
	downSent bool
	busy     bool // a store call for it is under way
}

// downCall is a store call the runner makes for the machine.
type downCall struct {
	node cluster.UniqueAddress
	down bool // DownNode; else NodeLeaseExpired
	// poll: the node is no failed node but a counted member the view
	// shows healthy; only an expired lease makes it one.
	poll bool
}

// downResult is the answer to a downCall, delivered to the coordinator.
type downResult struct {
	runtime.OwnTick
	call    downCall
	expired bool
	err     error
}

func (downResult) ProtocolMessage() {}

// downingTick makes the runner retry failed calls and poll expiries.
type downingTick struct{ runtime.OwnTick }

func (downingTick) ProtocolMessage() {}

// newDowning returns the machine of the coordinator on node self for the
// type's role; it decides on a view stable for stableAfter.
func newDowning(self cluster.UniqueAddress, role string, stableAfter time.Duration) *downing {
	return &downing{self: self, role: role, stableAfter: stableAfter,
		nodes: make(map[cluster.UniqueAddress]*failedNode), counted: make(map[cluster.UniqueAddress]cluster.Member), view: make(map[cluster.UniqueAddress]cluster.Member),
		polling: make(map[cluster.UniqueAddress]bool)}
}

// resume readies the machine for a new coordinator runner on its node:
// the store calls of the last one will never answer, and what the store
// said of live leases, and how long the other side was stable, are
// asked again (the view may have changed and changed back meanwhile).
// What the store said for good (downed, expired) and who counts stay.
func (d *downing) resume() *downing {
	for _, n := range d.nodes {
		n.busy, n.checked = false, false
	}
	clear(d.polling)
	d.stableSince = time.Time{}
	return d
}

// observe takes a membership view, the regions the core knows of, and
// the coordinator's clock.
func (d *downing) observe(members []cluster.Member, known []cluster.UniqueAddress, now time.Time) {
	clear(d.view)
	first := len(d.counted) == 0
	for _, m := range members {
		d.view[m.Address] = m
		if _, counts := d.counted[m.Address]; d.countable(m) && (counts || first || m.Address == d.self) {
			d.counted[m.Address] = m
		}
		n := d.nodes[m.Address]
		failed := m.Address != d.self && (m.Unreachable || m.Status == cluster.Down)
		switch {
		case failed && n == nil:
			d.nodes[m.Address] = &failedNode{last: m, down: true}
		case failed:
			n.last, n.down = m, true
		case n != nil && !n.downSent && !n.expired:
			// Absent before, or failed but never downed (the view was
			// not stable yet), healthy now: nothing to do.
			delete(d.nodes, m.Address)
		case n != nil:
			n.last = m
		}
	}
	// A counted member the view dropped: membership said it failed or
	// left; it stays a failed node until the store says its lease ended.
	for name, m := range d.counted {
		if _, ok := d.view[name]; !ok && d.nodes[name] == nil {
			d.nodes[name] = &failedNode{last: m, down: true}
		}
	}
	for _, r := range known {
		if _, ok := d.view[r]; !ok && d.nodes[r] == nil {
			d.nodes[r] = &failedNode{}
		}
	}
	// Forget what neither the view nor the core names any more, and
	// nobody counts.
	for name, n := range d.nodes {
		_, inView := d.view[name]
		_, counts := d.counted[name]
		if !inView && !counts && !slices.Contains(known, name) && (n.expired || !n.down) {
			delete(d.nodes, name)
		}
	}
	d.admit()
	d.settle(now)
}

// countable reports whether m may count towards the majority: it has the
// role (or is this node), is past Joining, and its lease has not ended.
func (d *downing) countable(m cluster.Member) bool {
	if m.Address != d.self && !m.HasRole(d.role) || m.Status == cluster.Joining {
		return false
	}
	n := d.nodes[m.Address]
	return n == nil || !n.expired
}

// admit starts counting the members of the view that do not count yet,
// but only while no counted member is on the other side: the other side
// never sees a member join during a cut, so counted on this side only it
// could make both sides a majority, and each would down the other (Pekko
// does not count a member that joined while others were unreachable
// either: it stays WeaklyUp). The first view counts all.
func (d *downing) admit() {
	if _, theirs := d.sides(); len(theirs) > 0 {
		return
	}
	for name, m := range d.view {
		if _, counts := d.counted[name]; !counts && d.countable(m) {
			d.counted[name] = m
		}
	}
}

// settle restarts the stability clock when the other side changed, and
// forgets what the store said of live leases on the old one.
func (d *downing) settle(now time.Time) {
	_, theirs := d.sides()
	if sig := joinAddresses(theirs); sig != d.theirsSig || d.stableSince.IsZero() {
		d.theirsSig, d.stableSince = sig, now
		d.side++
		for _, n := range d.nodes {
			n.checked = false
		}
	}
}

// due returns the store calls to make now, at most one per node, sorted:
// for failed nodes, downs while the coordinator may down (mayDown),
// expiry checks otherwise; then an expiry check (poll) of every other
// counted member. The polls are what make failover take about a lease
// length whatever the membership's failure detector: a crashed node's
// lease expires in the store's time, final (an expired lease is never
// renewed), and its holder fenced itself before, by its own clock; so an
// expired lease is as good as Down, and the shards move once the store
// says so, not once the membership has noticed.
func (d *downing) due(now time.Time) []downCall {
	var calls []downCall
	mayDown := d.mayDown(now)
	for _, name := range slices.SortedFunc(maps.Keys(d.nodes), cluster.UniqueAddress.Compare) {
		n := d.nodes[name]
		if n.busy || n.expired {
			continue
		}
		n.busy, n.askedOn = true, d.side
		down := mayDown && n.down && !n.downed
		n.downSent = n.downSent || down
		calls = append(calls, downCall{node: name, down: down})
	}
	for _, name := range slices.SortedFunc(maps.Keys(d.counted), cluster.UniqueAddress.Compare) {
		if name == d.self || d.nodes[name] != nil || d.polling[name] {
			continue
		}
		d.polling[name] = true
		calls = append(calls, downCall{node: name, poll: true})
	}
	return calls
}

// stable reports whether the other side has held for stableAfter.
func (d *downing) stable(now time.Time) bool {
	return !d.stableSince.IsZero() && now.Sub(d.stableSince) >= d.stableAfter
}

// mayDown reports whether the coordinator may down failed members now:
// the other side is stable and this side is the majority.
func (d *downing) mayDown(now time.Time) bool {
	mine, _ := d.sides()
	return d.stable(now) && mine
}

// standDown reports whether the coordinator must give its lease up: the
// other side is stable, this side is the minority, and the store said of
// every member on the other side, since it became stable, that its lease
// is live. It then keeps the machine's node off the lease for heldOff
// (see offLease).
func (d *downing) standDown(now time.Time, heldOff time.Duration) bool {
	mine, theirs := d.sides()
	if mine || !d.stable(now) {
		return false
	}
	for _, name := range theirs {
		if n := d.nodes[name]; n == nil || !n.checked {
			return false
		}
	}
	d.offUntil = now.Add(heldOff)
	return true
}

// offLease reports whether this node's coordinator must not take the
// lease now: it stood down less than heldOff ago. The majority's oldest
// retries every RetryInterval, far more often, so it gets the lease; and
// the hold is bounded, so a node that stood down for a survivor of a
// crash (whose lease then expired) takes the lease again.
func (d *downing) offLease(now time.Time) bool {
	return now.Before(d.offUntil)
}

// sides reports whether this node's side is the majority of the counted
// members (see downing), and names the members on the other side, sorted.
func (d *downing) sides() (majority bool, theirs []cluster.UniqueAddress) {
	self, ok := d.counted[d.self]
	if !ok {
		self = cluster.Member{Address: d.self, JoinOrder: math.MaxUint64} // not seen Up yet: never the oldest
	}
	mine, oldest := 1, self
	for name, m := range d.counted {
		if name == d.self {
			continue
		}
		v, inView := d.view[name]
		n := d.nodes[name]
		if inView && !v.Unreachable && v.Status != cluster.Down && (n == nil || !n.downSent) {
			mine++
		} else {
			theirs = append(theirs, name)
		}
		if m.Older(oldest) {
			oldest = m
		}
	}
	slices.SortFunc(theirs, cluster.UniqueAddress.Compare)
	switch {
	case mine != len(theirs):
		return mine > len(theirs), theirs
	default:
		return !slices.Contains(theirs, oldest.Address), theirs
	}
}

// result records a call's answer at now; it reports whether a node's
// lease is newly known to have expired, so that the core must see a new
// view. An expired (or released) lease ends the member: it no longer
// counts towards the majority.
func (d *downing) result(r downResult, now time.Time) bool {
	n := d.nodes[r.call.node]
	if r.call.poll {
		delete(d.polling, r.call.node)
		if r.err != nil || !r.expired {
			return false
		}
		if n == nil {
			// Healthy in the view, gone in the store: a failed node now,
			// whose lease ended.
			m, counts := d.counted[r.call.node]
			if !counts {
				m = d.view[r.call.node]
			}
			n = &failedNode{last: m, down: true}
			d.nodes[r.call.node] = n
		}
		if n.busy || n.expired {
			// A failed node's own check is under way, or answered: its
			// answer decides, as it would have without the poll.
			return false
		}
		n.busy = true // taken as the answer of its own check
	}
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
		delete(d.counted, r.call.node)
		d.admit()
		d.settle(now)
		return true
	case !r.expired:
		// Only an answer asked since the other side last changed: one
		// from before says nothing of the side as it is.
		n.checked = n.askedOn == d.side
	}
	return false
}

// filter returns the view as the core must see it: a failed node whose
// lease has not expired is an unreachable, Leaving member (so its shards
// stay put and it gets no new ones), one whose lease expired is Down.
// known are the regions the core knows of now: one the view does not hold
// is held back as observe does, even when it registered after the last
// view (the view lags), so that the core never takes it for gone.
func (d *downing) filter(members []cluster.Member, known []cluster.UniqueAddress) []cluster.Member {
	inView := make(map[cluster.UniqueAddress]bool, len(members))
	for _, m := range members {
		inView[m.Address] = true
	}
	for _, r := range known {
		if !inView[r] && d.nodes[r] == nil {
			d.nodes[r] = &failedNode{}
		}
	}
	out := make([]cluster.Member, 0, len(members)+len(d.nodes))
	for _, m := range members {
		if d.nodes[m.Address] == nil {
			out = append(out, m)
		}
	}
	for _, name := range slices.SortedFunc(maps.Keys(d.nodes), cluster.UniqueAddress.Compare) {
		n := d.nodes[name]
		m := n.last
		m.Address = name
		m.Unreachable = true
		m.Status = cluster.Leaving
		if n.expired {
			m.Status = cluster.Down
		}
		out = append(out, m)
	}
	return out
}

// downingSettings gives st the node's derived DowningStableAfter when it
// left it zero, and warns of a set one no longer than the membership's
// spread (Config.DowningSpread). A warning, not an error: the spread is a
// worst case for the largest cluster planned, a shorter value trades that
// case for faster downing (tests, small clusters), and what it risks is
// availability, not safety: a coordinator that downs on a half-seen cut
// makes nodes fence themselves and restart, while the leases still keep
// every shard in one place.
func (s *Sharding) downingSettings(typ string, st Settings) Settings {
	switch set := st.DowningStableAfter; {
	case set <= 0:
		st.DowningStableAfter = s.cfg.DowningStableAfter
	case set <= s.cfg.DowningSpread:
		s.log.Warn("sharding: DowningStableAfter is not longer than the membership may take to report a whole partition; a coordinator may down members on a cut it has seen only in part",
			"entity_type", typ, "downing_stable_after", set, "spread", s.cfg.DowningSpread)
	}
	return st
}

// joinAddresses renders addrs, joined by commas: a signature of a side.
func joinAddresses(addrs []cluster.UniqueAddress) string {
	var b strings.Builder
	for i, a := range addrs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(a.String())
	}
	return b.String()
}
