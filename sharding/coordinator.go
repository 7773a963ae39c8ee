package sharding

import (
	"cmp"
	"maps"
	"slices"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/internal/runtime"
	"github.com/shoal-dev/shoal/sharding/allocation"
	"github.com/shoal-dev/shoal/sharding/internal/protocol"
)

// coordinatorCore is the coordinator's bookkeeping as a pure state machine:
// step takes one message and returns the store changes to make and the
// messages to send, in order. The runner around it does the IO, writing
// the changes before sending anything that depends on them.
type coordinatorCore struct {
	self       cluster.UniqueAddress // the coordinator's node
	epoch      uint64
	strategy   allocation.Strategy
	minMembers int

	members      map[cluster.UniqueAddress]cluster.Member
	regions      map[cluster.UniqueAddress]bool     // registered hosting regions
	proxies      map[cluster.UniqueAddress]bool     // registered routing-only regions
	shards       map[string]cluster.UniqueAddress   // shard → region
	byRegion     map[cluster.UniqueAddress][]string // region → shards, in allocation order
	handoffs     map[string]*handoff                // shards being moved
	leaving      map[cluster.UniqueAddress]bool     // regions that asked for a graceful shutdown
	waitingHomes map[string]bool                    // shards asked for before enough regions registered
	handOverFrom map[string]cluster.UniqueAddress   // shard → the region that holds mail for its next home
	// starting holds, until its home reports ShardStarted, the From of
	// each HostShard sent: a home that asks for its own shard lost the
	// HostShard, and gets it again rather than a ShardHome, which would
	// not tell it to wait for From's mail; a home that leaves the view first
	// passes the wait for From on to the shard's next home (else From's mail,
	// re-sent to the home that had died, would reach the next one after newer
	// mail). A From is stored with the allocation until then (see
	// Allocation).
	starting map[string]cluster.UniqueAddress
	// announcedTo are the members this coordinator made itself known to
	// (ShardHomes) without their registering first.
	announcedTo map[cluster.UniqueAddress]bool
	// down are the members the view holds Down, sorted, as last told to
	// every region (MembersDown).
	down []cluster.UniqueAddress
	// Hand-offs wait until every member's region has registered (see
	// allRegistered): later are the shards to hand off meanwhile, to stop
	// (true: StopShards) or to move; gone the regions that reported
	// RegionStopped while still in the view; waitRounds the rebalance
	// rounds waited so far.
	later      map[string]bool
	gone       map[cluster.UniqueAddress]bool
	waitRounds int
	// role is the type's role: a member with it runs the type's region
	// (see registrationWaitRounds); "" for every member.
	role string
	// handOffSeq numbers this coordinator's hand-offs (protocol.BeginHandOff
	// Seq): with the epoch it names each one, so that acknowledgements,
	// fences and ShardStopped of another hand-off of the shard (an
	// earlier one, or a predecessor's) count for nothing in this one.
	handOffSeq uint64
	// rebalanced counts the hand-offs the last rebalance round, or the last
	// operator's RebalanceShards, began (a metric: leaves and stop
	// requests are not rebalances).
	rebalanced int
}

// registrationWaitRounds bounds, in rebalance rounds, how long hand-offs
// wait for the region of a member without the type's role to register:
// such a node may never start a proxy for the type, and must not hold
// them up for ever. Rounds while such a member is unreachable do not
// count (see unregisteredUnreachable). A member with the role runs the
// type's region (that is how it hosts shards), and is waited for without
// a time bound: a slow link may hold its Register up for longer than any
// bound, while it forwards with the homes it knows.
const registrationWaitRounds = 3

type handoff struct {
	seq     uint64 // with the epoch, names the hand-off (handOffSeq)
	stop    bool   // StopShards: deallocate, do not move
	from    cluster.UniqueAddress
	pending map[cluster.UniqueAddress]bool // regions whose BeginHandOffAck is outstanding
	fences  []cluster.UniqueAddress        // regions that fenced their forwards to from
	handing bool                           // HandOff sent to from
}

// change is a store write the runner makes before sending step's output.
type change struct {
	shard  string
	region cluster.UniqueAddress // zero deallocates
	heldBy cluster.UniqueAddress // with region zero: the region holding the shard's mail
}

// stored is c as the store takes it.
func (c change) stored() AllocationChange {
	return AllocationChange{Shard: c.shard, Region: c.region, MailHeldBy: c.heldBy}
}

// outbound is one message to send.
type outbound struct {
	to  cluster.UniqueAddress // a region's node; its address is (to, type, region)
	msg Message
}

// newCoordinatorCore starts from what the store holds of each shard: its
// home, or the region holding its mail.
func newCoordinatorCore(self cluster.UniqueAddress, epoch uint64, shards map[string]Allocation, strategy allocation.Strategy, minMembers int) *coordinatorCore {
	c := &coordinatorCore{
		self: self, epoch: epoch, strategy: strategy, minMembers: max(minMembers, 1),
		members: make(map[cluster.UniqueAddress]cluster.Member), regions: make(map[cluster.UniqueAddress]bool), proxies: make(map[cluster.UniqueAddress]bool),
		shards: make(map[string]cluster.UniqueAddress), byRegion: make(map[cluster.UniqueAddress][]string),
		handoffs: make(map[string]*handoff), leaving: make(map[cluster.UniqueAddress]bool), waitingHomes: make(map[string]bool),
		handOverFrom: make(map[string]cluster.UniqueAddress), later: make(map[string]bool), gone: make(map[cluster.UniqueAddress]bool),
		starting: make(map[string]cluster.UniqueAddress), announcedTo: make(map[cluster.UniqueAddress]bool),
	}
	for _, shard := range slices.Sorted(maps.Keys(shards)) {
		switch a := shards[shard]; {
		case !a.Region.IsZero():
			c.place(shard, a.Region)
			if !a.MailHeldBy.IsZero() {
				c.starting[shard] = a.MailHeldBy
			}
		case !a.MailHeldBy.IsZero():
			c.handOverFrom[shard] = a.MailHeldBy
		}
	}
	return c
}

// leaveAck lets a leaving region stop once nothing is allocated to it.
func (c *coordinatorCore) leaveAck(region cluster.UniqueAddress) []outbound {
	if !c.leaving[region] || len(c.byRegion[region]) > 0 {
		return nil
	}
	return []outbound{{to: region, msg: protocol.LeaveAck{Epoch: c.epoch}}}
}

// startShards makes shards without a home wait for one: they are
// allocated, and started, as soon as enough regions have registered.
func (c *coordinatorCore) startShards(shards []string) {
	for _, shard := range shards {
		if _, ok := c.shards[shard]; !ok {
			c.waitingHomes[shard] = true
		}
	}
}

func (c *coordinatorCore) place(shard string, region cluster.UniqueAddress) {
	c.shards[shard] = region
	c.byRegion[region] = append(c.byRegion[region], shard)
}

func (c *coordinatorCore) unplace(shard string) {
	region, ok := c.shards[shard]
	if !ok {
		return
	}
	delete(c.shards, shard)
	delete(c.starting, shard)
	list := slices.DeleteFunc(c.byRegion[region], func(s string) bool { return s == shard })
	if len(list) == 0 {
		delete(c.byRegion, region)
	} else {
		c.byRegion[region] = list
	}
}

// everyone is every registered region and proxy, and every leaving region
// (one that never registered with this coordinator still routes what it
// buffered, and may hold mail for a shard's next home), sorted for
// determinism.
func (c *coordinatorCore) everyone() []cluster.UniqueAddress {
	all := slices.Collect(maps.Keys(c.regions))
	for p := range c.proxies {
		all = append(all, p)
	}
	for r := range c.leaving {
		if !c.regions[r] && !c.proxies[r] {
			all = append(all, r)
		}
	}
	slices.SortFunc(all, cluster.UniqueAddress.Compare)
	return all
}

// knownRegions is every region the coordinator knows of, sorted: everyone,
// and the regions only named by what is stored, as homes or as holders of
// mail.
func (c *coordinatorCore) knownRegions() []cluster.UniqueAddress {
	known := c.everyone()
	for r := range c.byRegion {
		known = append(known, r)
	}
	for _, r := range c.handOverFrom {
		known = append(known, r)
	}
	slices.SortFunc(known, cluster.UniqueAddress.Compare)
	return slices.Compact(known)
}

func (c *coordinatorCore) broadcast(msg Message) []outbound {
	var out []outbound
	for _, r := range c.everyone() {
		out = append(out, outbound{to: r, msg: msg})
	}
	return out
}

// allocationState is what strategies see: registered hosting regions with
// their member information; leaving regions are marked Leaving.
func (c *coordinatorCore) allocationState() allocation.State {
	st := allocation.State{Shards: make(map[cluster.UniqueAddress][]string)}
	for _, r := range slices.SortedFunc(maps.Keys(c.regions), cluster.UniqueAddress.Compare) {
		m, known := c.members[r]
		reg := allocation.Region{ID: r, JoinOrder: m.JoinOrder, AppVersion: m.AppVersion, Status: m.Status, Reachable: !m.Unreachable}
		if !known {
			reg.Status, reg.Reachable = cluster.Up, true
		}
		if c.leaving[r] {
			reg.Status = cluster.Leaving
		}
		st.Regions = append(st.Regions, reg)
		st.Shards[r] = slices.Clone(c.byRegion[r])
	}
	return st
}

func (c *coordinatorCore) step(msg Message) (changes []change, out []outbound) {
	switch m := msg.(type) {
	case protocol.Register:
		if c.heldDown(m.Region) {
			// A Register that a slow link, or the region's own retry
			// before it fenced itself, brought after the view held its
			// node Down: the node never returns, and registered again it
			// would be counted on in hand-offs (its BeginHandOffAck
			// awaited for ever). See docs/DESIGN.md, 'Allocation and the
			// coordinator'.
			return nil, nil
		}
		c.regions[m.Region] = true
		out = append(out, c.welcome(m.Region)...)
		ch, o := c.allocateWaiting()
		return append(changes, ch...), append(append(out, o...), c.startDeferred()...)
	case protocol.RegisterProxy:
		if c.heldDown(m.Region) { // as for a Register
			return nil, nil
		}
		c.proxies[m.Region] = true
		return nil, append(c.welcome(m.Region), c.startDeferred()...)
	case protocol.GetShardHome:
		if c.handoffs[m.Shard] != nil {
			// Not the old home: a region that forwarded there now would
			// race the messages others buffer. The new home is pushed to
			// everyone when the hand-off ends.
			return nil, nil
		}
		if _, ok := c.shards[m.Shard]; ok {
			return nil, c.homeFor(m.Shard, m.Region)
		}
		if _, named := c.handOverFrom[m.Shard]; m.HandOver && !named {
			// A predecessor stopped the shard and did not place it: the
			// new home waits for this region's mail all the same. Stored,
			// should the shard stay without a home past this coordinator.
			c.handOverFrom[m.Shard] = m.Region
			changes = []change{{shard: m.Shard, heldBy: m.Region}}
		}
		if len(c.regions) < c.minMembers {
			c.waitingHomes[m.Shard] = true
			return changes, nil
		}
		ch, o := c.allocate(m.Region, m.Shard)
		return append(changes, ch...), o
	case protocol.ShardStarted:
		from, starting := c.starting[m.Shard]
		if !starting || c.shards[m.Shard] != m.Region {
			return nil, nil
		}
		delete(c.starting, m.Shard)
		if !from.IsZero() { // its mail is in: forget who held it
			return []change{{shard: m.Shard, region: m.Region}}, nil
		}
		return nil, nil
	case protocol.BeginHandOffAck:
		// Only an answer to this very hand-off counts: a region whose view
		// moved on answers a deposed coordinator's BeginHandOff to this
		// one, and the fence it sent then is not one the HandOff awaits.
		if h := c.handoffs[m.Shard]; h != nil && m.Epoch == c.epoch && m.Seq == h.seq {
			if h.pending[m.Region] && m.FencedAt == h.from && m.Region != h.from {
				h.fences = append(h.fences, m.Region)
			}
			delete(h.pending, m.Region)
			return nil, c.maybeHandOff(m.Shard)
		}
		if c.handoffs[m.Shard] == nil && m.Epoch <= c.epoch && !m.FencedAt.IsZero() {
			// A region still fenced for a hand-off that is over (this
			// coordinator's, or a predecessor's) acknowledges it again
			// each tick: the ShardHome that ended it there was lost.
			// Answered with the shard's home, or none, it stops fencing
			// (docs/DESIGN.md, "Fence on the data link").
			if _, ok := c.shards[m.Shard]; !ok {
				return nil, []outbound{{to: m.Region, msg: protocol.ShardHome{Shard: m.Shard, Epoch: c.epoch}}}
			}
			return nil, c.homeFor(m.Shard, m.Region)
		}
	case protocol.ShardStopped:
		h := c.handoffs[m.Shard]
		if h == nil && c.shards[m.Shard] == m.Region && m.Epoch < c.epoch {
			// A hand-off a predecessor began stopped the shard after
			// fences that regions, told by this coordinator that the
			// shard is still there, may have forwarded past since. A
			// hand-off of this coordinator's own fences them again; the
			// region, which hosts the shard no more, then reports it
			// stopped at once, with what it holds. A late or repeated
			// ShardStopped of this coordinator's own hand-off says nothing
			// of the shard placed there since (handed off again for it, a
			// shard placed back on the same region would move for ever).
			if _, queued := c.later[m.Shard]; !queued {
				c.later[m.Shard] = false
			}
			return nil, c.startDeferred()
		}
		if h == nil || h.from != m.Region || !h.handing || m.Epoch != c.epoch || m.Seq != h.seq {
			// Not after this coordinator's HandOff (a predecessor's,
			// whose fences may be stale): that HandOff comes once this
			// hand-off's fences are in, and the region reports again.
			return nil, nil
		}
		delete(c.handoffs, m.Shard)
		c.unplace(m.Shard)
		if m.Held {
			c.handOverFrom[m.Shard] = m.Region
		}
		changes = append(changes, change{shard: m.Shard, heldBy: c.handOverFrom[m.Shard]})
		if _, held := c.handOverFrom[m.Shard]; h.stop && !held {
			return changes, append(c.broadcast(protocol.ShardHome{Shard: m.Shard, Epoch: c.epoch}), c.leaveAck(m.Region)...)
		}
		ch, o := c.allocate(cluster.UniqueAddress{}, m.Shard)
		return append(changes, ch...), append(o, c.leaveAck(m.Region)...)
	case protocol.GracefulShutdownReq:
		if !c.regions[m.Region] && !c.proxies[m.Region] && len(c.byRegion[m.Region]) == 0 {
			// Unknown here, as a region that stopped already: nothing to
			// hand off, and nothing to remember (a leaving mark would
			// outlive it).
			return nil, []outbound{{to: m.Region, msg: protocol.LeaveAck{Epoch: c.epoch}}}
		}
		c.leaving[m.Region] = true
		return nil, append(c.startDeferred(), c.leaveAck(m.Region)...)
	case protocol.RegionStopped:
		if _, ok := c.members[m.Region]; ok {
			c.gone[m.Region] = true
		}
		return c.removeRegion(m.Region)
	case protocol.StopShards:
		for _, shard := range m.Shards {
			c.later[shard] = true
		}
		return nil, c.startDeferred()
	case protocol.RebalanceShards:
		c.rebalanced = 0
		for _, shard := range m.Shards {
			if _, queued := c.later[shard]; !queued {
				c.later[shard] = false // moved, not stopped
				if _, moving := c.handoffs[shard]; !moving {
					c.rebalanced++
				}
			}
		}
		return nil, c.startDeferred()
	case rebalanceTick:
		c.rebalanced = 0 // a round that returns early moved nothing
		out = c.resendHandOffs()
		switch {
		case c.everyRegionRegistered():
			c.waitRounds = 0 // a later wait starts afresh
		case !c.unregisteredUnreachable():
			c.waitRounds++
		}
		if !c.allRegistered() {
			return nil, out
		}
		out = append(out, c.startDeferred()...)
		if c.anyUnreachable() {
			return nil, out
		}
		inProgress := make(map[string]bool, len(c.handoffs))
		for s := range c.handoffs {
			inProgress[s] = true
		}
		c.rebalanced = 0
		for _, shard := range c.strategy.Rebalance(c.allocationState(), inProgress) {
			if _, moving := c.handoffs[shard]; !moving {
				c.rebalanced++
			}
			out = append(out, c.beginHandOff(shard)...)
		}
		return nil, out
	case membersChanged:
		previous := c.members
		c.members = make(map[cluster.UniqueAddress]cluster.Member, len(m.members))
		for _, mem := range m.members {
			c.members[mem.Address] = mem
		}
		// Regions that are gone, registered or only named by what is
		// stored (a predecessor's regions that never re-registered).
		for _, r := range c.knownRegions() {
			if mem, ok := c.members[r]; !ok || mem.Status == cluster.Down {
				ch, o := c.removeRegion(r)
				changes, out = append(changes, ch...), append(out, o...)
			}
		}
		for r := range c.gone {
			if _, ok := c.members[r]; !ok {
				delete(c.gone, r)
			}
		}
		if down := c.downMembers(); !slices.Equal(down, c.down) {
			// Regions whose views lag, or keep a crashed node unreachable
			// for long, would wait for its mail until they do not.
			c.down = down
			if len(down) > 0 {
				out = append(out, c.broadcast(protocol.MembersDown{Nodes: down})...)
			}
		} else if len(down) > 0 {
			// Again to a region reachable anew: what it was sent while
			// cut off was lost (without it, it would re-send its HandOver
			// to a crashed home until it left, holding the shard's
			// mail).
			for _, r := range c.everyone() {
				if was, ok := previous[r]; ok && was.Unreachable && !c.members[r].Unreachable {
					out = append(out, outbound{to: r, msg: protocol.MembersDown{Nodes: down}})
				}
			}
		}
		out = append(out, c.startDeferred()...)
		// A new coordinator makes itself known: regions that registered
		// with a predecessor (even one on this node that failed) see the
		// newer epoch and register again. Also members a later view
		// shows first, or reachable again: a region that registered with
		// a predecessor on this node and was missing from the first view
		// would otherwise never learn of this one, and hand-offs would
		// go on around it once registrationWaitRounds ran out, and its
		// forward to the old home would be lost when that node left. Only
		// reachable members: a hand-off does not wait for an unreachable one
		// to register (allRegistered), so it is not fenced, and with these
		// homes it would forward what it buffered to a shard's old home after
		// the shard moved on, perhaps after that node left (say the old
		// coordinator stood down on the minority side, and the new one, whose
		// view still shows it unreachable, announces to it and hands off a
		// leaving region's shard). It registers once it sees this node oldest,
		// and learns the homes then.
		maps.DeleteFunc(c.announcedTo, func(node cluster.UniqueAddress, _ bool) bool { return c.members[node].Unreachable })
		var homes map[cluster.UniqueAddress][]string
		for _, node := range slices.SortedFunc(maps.Keys(c.members), cluster.UniqueAddress.Compare) {
			m := c.members[node]
			if m.Unreachable || m.Status == cluster.Down || c.announcedTo[node] || c.regions[node] || c.proxies[node] {
				continue
			}
			if homes == nil {
				homes = c.homes()
			}
			c.announcedTo[node] = true
			out = append(out, c.hostAgain(node)...)
			out = append(out, outbound{to: node, msg: protocol.ShardHomes{Homes: homes, Epoch: c.epoch, Coordinator: c.self}})
			out = append(out, c.owedAgain(node)...)
		}
		return changes, out
	}
	return nil, nil
}

// welcome is what a region gets on registration: the ack, every known
// home, and the members Down.
func (c *coordinatorCore) welcome(region cluster.UniqueAddress) []outbound {
	out := []outbound{{to: region, msg: protocol.RegisterAck{Coordinator: c.self, Epoch: c.epoch}}}
	out = append(out, c.hostAgain(region)...)
	out = append(out, outbound{to: region, msg: protocol.ShardHomes{Homes: c.homes(), Epoch: c.epoch, Coordinator: c.self}})
	out = append(out, c.owedAgain(region)...)
	if len(c.down) > 0 {
		out = append(out, outbound{to: region, msg: protocol.MembersDown{Nodes: c.down}})
	}
	return out
}

// hostAgain sends region, ahead of a ShardHomes that names it a home, the
// HostShard of each shard placed there that has not started and waits
// for a previous home's mail: told only by the ShardHomes (its HostShard
// lost with a broken link), it would start the shard at once, and that
// mail would come after newer mail.
func (c *coordinatorCore) hostAgain(region cluster.UniqueAddress) []outbound {
	var out []outbound
	for _, shard := range c.byRegion[region] {
		if from := c.starting[shard]; !from.IsZero() && c.handoffs[shard] == nil {
			out = append(out, outbound{to: region, msg: protocol.HostShard{Shard: shard, From: from, Epoch: c.epoch}})
		}
	}
	return out
}

// owedAgain sends region, behind a ShardHomes (which names no previous
// home), the ShardHome of each shard whose next home waits for region's
// HandOver and has not started: region owes it one, an empty one when it
// holds nothing, and the ShardHome that told it so may have been lost
// (a partition), else the next home waits for ever.
func (c *coordinatorCore) owedAgain(region cluster.UniqueAddress) []outbound {
	var out []outbound
	for _, shard := range slices.Sorted(maps.Keys(c.starting)) {
		home, placed := c.shards[shard]
		if from := c.starting[shard]; from == region && placed && home != region && c.handoffs[shard] == nil {
			out = append(out, outbound{to: region, msg: protocol.ShardHome{Shard: shard, Region: home, From: from, Epoch: c.epoch}})
		}
	}
	return out
}

// heldDown reports whether the view holds region's node Down.
func (c *coordinatorCore) heldDown(region cluster.UniqueAddress) bool {
	m, ok := c.members[region]
	return ok && m.Status == cluster.Down
}

// downMembers lists, sorted, the members the view holds Down.
func (c *coordinatorCore) downMembers() []cluster.UniqueAddress {
	var down []cluster.UniqueAddress
	for _, name := range slices.SortedFunc(maps.Keys(c.members), cluster.UniqueAddress.Compare) {
		if c.members[name].Status == cluster.Down {
			down = append(down, name)
		}
	}
	return down
}

// homes is every allocation, region → shards, but for shards being handed
// off: a region that registers meanwhile was not fenced, and forwarding to
// the old home it could overtake its own later messages, which reach the
// new home straight. It asks, and hears of the new home with everyone.
func (c *coordinatorCore) homes() map[cluster.UniqueAddress][]string {
	homes := make(map[cluster.UniqueAddress][]string, len(c.byRegion))
	for r, shards := range c.byRegion {
		shards = slices.DeleteFunc(slices.Clone(shards), func(s string) bool { return c.handoffs[s] != nil })
		if len(shards) > 0 {
			homes[r] = shards
		}
	}
	return homes
}

func (c *coordinatorCore) allocateWaiting() ([]change, []outbound) {
	if len(c.regions) < c.minMembers {
		return nil, nil
	}
	var changes []change
	var out []outbound
	for _, shard := range slices.Sorted(maps.Keys(c.waitingHomes)) {
		delete(c.waitingHomes, shard)
		if _, ok := c.shards[shard]; ok {
			continue
		}
		ch, o := c.allocate(cluster.UniqueAddress{}, shard)
		changes, out = append(changes, ch...), append(out, o...)
	}
	return changes, out
}

// allocate picks a home for shard and tells every region about it.
func (c *coordinatorCore) allocate(requester cluster.UniqueAddress, shard string) ([]change, []outbound) {
	region, err := c.strategy.Allocate(requester, shard, c.allocationState())
	// A leaving region, offered when it is the last one, would only refuse.
	if err != nil || !c.regions[region] || c.leaving[region] {
		c.waitingHomes[shard] = true // retried when a region registers
		return nil, nil
	}
	c.place(shard, region)
	// HostShard goes first, so that the new home knows to wait for the
	// previous home's mail before any region, told below, forwards to it.
	from := c.handOverFrom[shard]
	out := []outbound{{to: region, msg: protocol.HostShard{Shard: shard, From: from, Epoch: c.epoch}}}
	delete(c.handOverFrom, shard)
	c.starting[shard] = from
	home := protocol.ShardHome{Shard: shard, Region: region, From: from, Epoch: c.epoch}
	out = append(out, c.broadcast(home)...)
	if everyone := c.everyone(); !from.IsZero() && !slices.Contains(everyone, from) {
		// The region holding the mail hands it over when it learns the
		// new home: it must learn it even when it is not registered here.
		out = append(out, outbound{to: from, msg: home})
	}
	return []change{{shard: shard, region: region, heldBy: from}}, out
}

func (c *coordinatorCore) beginHandOff(shard string) []outbound {
	from, ok := c.shards[shard]
	if !ok || c.handoffs[shard] != nil {
		return nil
	}
	c.handOffSeq++
	h := &handoff{seq: c.handOffSeq, from: from, pending: make(map[cluster.UniqueAddress]bool)}
	for _, r := range c.everyone() {
		h.pending[r] = true
	}
	c.handoffs[shard] = h
	return append(c.broadcast(protocol.BeginHandOff{Shard: shard, Epoch: c.epoch, Seq: h.seq}), c.maybeHandOff(shard)...)
}

// allRegistered reports whether every reachable member's region has
// registered here (or is leaving, or stopped), or the wait ran out for
// those without the type's role (see registrationWaitRounds). Until then
// no hand-off begins (as in Akka's coordinator): a region that has not
// registered yet, typically with a coordinator that just took over, is
// not fenced, and what it forwards to the old home with the homes it
// knows would arrive there after the shard moved on, perhaps after that
// node left.
func (c *coordinatorCore) allRegistered() bool {
	for _, name := range slices.SortedFunc(maps.Keys(c.members), cluster.UniqueAddress.Compare) {
		m := c.members[name]
		if m.Status == cluster.Down || c.regions[name] || c.proxies[name] || c.leaving[name] || c.gone[name] {
			continue
		}
		if m.HasRole(c.role) || c.waitRounds < registrationWaitRounds {
			return false
		}
	}
	return true
}

// everyRegionRegistered reports whether every reachable member's region
// has registered here, or is leaving, or stopped.
func (c *coordinatorCore) everyRegionRegistered() bool {
	for _, name := range slices.SortedFunc(maps.Keys(c.members), cluster.UniqueAddress.Compare) {
		m := c.members[name]
		if m.Status == cluster.Down {
			continue
		}
		if !c.regions[name] && !c.proxies[name] && !c.leaving[name] && !c.gone[name] {
			return false
		}
	}
	return true
}

// unregisteredUnreachable reports whether a member whose region has not
// registered here is unreachable but not Down. The wait for it is not
// bounded (registrationWaitRounds bounds the wait for a reachable node
// that never starts the region): it may be alive behind a partition, with
// the homes it knew, and a hand-off around it would not fence it; it
// forwards to the old home when the partition heals, maybe after that
// node left (a leaving coordinator would hand its shards off around a cut
// member and stop before that member's forward came).
func (c *coordinatorCore) unregisteredUnreachable() bool {
	for name, m := range c.members {
		if m.Unreachable && m.Status != cluster.Down && !c.regions[name] && !c.proxies[name] && !c.leaving[name] && !c.gone[name] {
			return true
		}
	}
	return false
}

// anyUnreachable reports whether a member is unreachable but not Down. A
// rebalance waits for it: that member may be alive (a partition that
// healed before this view caught up, or the other side that keep-majority
// does not down), and a hand-off neither waits for its ack nor fences it,
// so what it forwards to the shard's old home with the homes it knows
// would arrive there after the shard moved on, behind what it sends the
// new home directly (as a coordinator on the minority side would, if it
// rebalanced to a new node just after the heal). Hand-offs that must
// happen (a leaving region's, RebalanceShards) do not wait.
func (c *coordinatorCore) anyUnreachable() bool {
	for _, m := range c.members {
		if m.Unreachable && m.Status != cluster.Down {
			return true
		}
	}
	return false
}

// startDeferred begins, once every region has registered, the hand-offs
// of leaving regions' shards and of the shards in later.
func (c *coordinatorCore) startDeferred() []outbound {
	if !c.allRegistered() {
		return nil
	}
	var out []outbound
	for _, r := range slices.SortedFunc(maps.Keys(c.leaving), cluster.UniqueAddress.Compare) {
		for _, shard := range slices.Clone(c.byRegion[r]) {
			out = append(out, c.beginHandOff(shard)...)
		}
	}
	for _, shard := range slices.Sorted(maps.Keys(c.later)) {
		stop := c.later[shard]
		delete(c.later, shard)
		out = append(out, c.beginHandOff(shard)...)
		if h := c.handoffs[shard]; h != nil && stop {
			h.stop = true
		}
	}
	return out
}

// resendHandOffs asks again every region whose BeginHandOffAck is still
// outstanding, and the old home whose ShardStopped is: the answer, or the
// question, may have been lost with a broken link, or sent to another
// coordinator by a region whose view lags; without it the hand-off, and
// the shard, would wait for ever. A region that answered already answers
// again, which changes nothing.
func (c *coordinatorCore) resendHandOffs() []outbound {
	var out []outbound
	for _, shard := range slices.Sorted(maps.Keys(c.handoffs)) {
		h := c.handoffs[shard]
		if h.handing {
			out = append(out, outbound{to: h.from, msg: c.handOff(shard, h)})
			continue
		}
		for _, r := range slices.SortedFunc(maps.Keys(h.pending), cluster.UniqueAddress.Compare) {
			out = append(out, outbound{to: r, msg: protocol.BeginHandOff{Shard: shard, Epoch: c.epoch, Seq: h.seq}})
		}
	}
	return out
}

func (c *coordinatorCore) maybeHandOff(shard string) []outbound {
	h := c.handoffs[shard]
	if h == nil || h.handing || len(h.pending) > 0 {
		return nil
	}
	h.handing = true
	slices.SortFunc(h.fences, cluster.UniqueAddress.Compare)
	return []outbound{{to: h.from, msg: c.handOff(shard, h)}}
}

// homeFor tells region where a placed shard lives: its HostShard again
// when the shard is placed on region and has not reported starting there
// (the HostShard may have been lost; a ShardHome would not say whose mail
// to wait for), else a ShardHome.
func (c *coordinatorCore) homeFor(shard string, region cluster.UniqueAddress) []outbound {
	home := c.shards[shard]
	if from, starting := c.starting[shard]; starting && home == region {
		return []outbound{{to: region, msg: protocol.HostShard{Shard: shard, From: from, Epoch: c.epoch}}}
	}
	return []outbound{{to: region, msg: protocol.ShardHome{Shard: shard, Region: home, Epoch: c.epoch}}}
}

// handOff is the HandOff of h. It names the region whose mail the home
// still waits for (the From of its HostShard, kept until the home reports
// ShardStarted), zero for none: a home whose HostShard was lost learns it
// only from here, and waits for exactly that region's HandOver, ahead of
// its own (docs/DESIGN.md, "Hand-over, not carry").
func (c *coordinatorCore) handOff(shard string, h *handoff) protocol.HandOff {
	return protocol.HandOff{Shard: shard, Epoch: c.epoch, Seq: h.seq, Fences: h.fences, MailHeldBy: c.starting[shard], MailHeldByKnown: true}
}

// removeRegion forgets a region that stopped or vanished; shards it still
// held are allocated anew, and hand-offs stop waiting for its ack.
func (c *coordinatorCore) removeRegion(region cluster.UniqueAddress) (changes []change, out []outbound) {
	delete(c.regions, region)
	delete(c.proxies, region)
	delete(c.leaving, region)
	for _, shard := range slices.Sorted(maps.Keys(c.handOverFrom)) {
		if c.handOverFrom[shard] == region { // its mail is gone with it
			delete(c.handOverFrom, shard)
			changes = append(changes, change{shard: shard})
		}
	}
	for _, shard := range slices.Sorted(maps.Keys(c.handoffs)) {
		h := c.handoffs[shard]
		if h.from == region {
			delete(c.handoffs, shard) // its entities are gone with it
			continue
		}
		delete(h.pending, region)
		if !h.handing {
			h.fences = slices.DeleteFunc(h.fences, func(r cluster.UniqueAddress) bool { return r == region })
		}
		out = append(out, c.maybeHandOff(shard)...)
	}
	for _, shard := range slices.Clone(c.byRegion[region]) {
		from := c.starting[shard]
		c.unplace(shard)
		if m, ok := c.members[from]; ok && from != region && m.Status != cluster.Down {
			// It died before the mail came: the next home waits for it.
			c.handOverFrom[shard] = from
		}
		changes = append(changes, change{shard: shard, heldBy: c.handOverFrom[shard]})
		ch, o := c.allocate(cluster.UniqueAddress{}, shard)
		if len(ch) == 0 {
			// Placed later, when a region registers: meanwhile no region
			// may keep forwarding to the one that is gone.
			o = c.broadcast(protocol.ShardHome{Shard: shard, Epoch: c.epoch})
		}
		changes, out = append(changes, ch...), append(out, o...)
	}
	return changes, out
}

// membersChanged carries a new membership view into the coordinator.
type membersChanged struct {
	runtime.OwnTick
	members []cluster.Member
}

func (membersChanged) ProtocolMessage() {}

// sortedShards returns the allocation as region → sorted shards, for queries.
func sortedShards(byRegion map[cluster.UniqueAddress][]string) map[cluster.UniqueAddress][]string {
	out := make(map[cluster.UniqueAddress][]string, len(byRegion))
	for r, s := range byRegion {
		out[r] = slices.SortedFunc(slices.Values(s), cmp.Compare[string])
	}
	return out
}
