package sharding

import (
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/sharding/allocation"
	"github.com/shoal-dev/shoal/sharding/internal/protocol"
)

// The coordinator's bookkeeping is a pure state machine: these tests step
// it with protocol messages and look at what it would write and send.

func newTestCore(minMembers int) *coordinatorCore {
	return newCoordinatorCore(addr("a"), 7, nil, allocation.NewLeastShard(allocation.DefaultLeastShardConfig()), minMembers)
}

// sent lists (to, message type) pairs for compact comparisons.
func sent(out []outbound) []string {
	var s []string
	for _, o := range out {
		var name string
		switch m := o.msg.(type) {
		case protocol.HostShard:
			name = "HostShard " + m.Shard
		case protocol.ShardHome:
			name = "ShardHome " + m.Shard + "@" + addrName(m.Region)
		case protocol.BeginHandOff:
			name = "BeginHandOff " + m.Shard
		case protocol.HandOff:
			name = "HandOff " + m.Shard
		case protocol.RegisterAck:
			name = "RegisterAck"
		case protocol.ShardHomes:
			name = "ShardHomes"
		case protocol.LeaveAck:
			name = "LeaveAck"
		case protocol.MembersDown:
			name = "MembersDown " + strings.Join(addrNames(m.Nodes), ",")
		default:
			name = "?"
		}
		s = append(s, addrName(o.to)+": "+name)
	}
	return s
}

func TestCoordinatorPushesEveryAllocationToEveryRegion(t *testing.T) {
	c := newTestCore(1)
	c.step(protocol.Register{Region: addr("a")})
	c.step(protocol.Register{Region: addr("b")})
	c.step(protocol.RegisterProxy{Region: addr("p")})
	changes, out := c.step(protocol.GetShardHome{Shard: "s1", Region: addr("b")})
	if !slices.Equal(changes, []change{{shard: "s1", region: addr("a")}}) {
		t.Fatalf("changes %v", changes)
	}
	want := []string{"a: HostShard s1", "a: ShardHome s1@a", "b: ShardHome s1@a", "p: ShardHome s1@a"}
	if got := sent(out); !slices.Equal(got, want) {
		t.Fatalf("sent %v, want %v", got, want)
	}
	for _, o := range out {
		if m, ok := o.msg.(protocol.ShardHome); ok && m.Epoch != 7 {
			t.Fatalf("ShardHome without the coordinator's epoch: %+v", m)
		}
	}
	// A known home is answered to the asker only; nothing is written.
	changes, out = c.step(protocol.GetShardHome{Shard: "s1", Region: addr("p")})
	if len(changes) != 0 || !slices.Equal(sent(out), []string{"p: ShardHome s1@a"}) {
		t.Fatalf("known home: changes %v, sent %v", changes, sent(out))
	}
}

func TestCoordinatorAllocatesNothingBeforeMinMembers(t *testing.T) {
	c := newTestCore(2)
	c.step(protocol.Register{Region: addr("a")})
	c.step(protocol.RegisterProxy{Region: addr("p")}) // a proxy does not count
	if changes, out := c.step(protocol.GetShardHome{Shard: "s1", Region: addr("a")}); len(changes)+len(out) != 0 {
		t.Fatalf("allocated with one region: %v %v", changes, sent(out))
	}
	changes, out := c.step(protocol.Register{Region: addr("b")})
	if len(changes) != 1 || changes[0].shard != "s1" {
		t.Fatalf("waiting shard not allocated when the second region registered: %v", changes)
	}
	got := sent(out)
	if !slices.Contains(got, "a: ShardHome s1@"+addrName(changes[0].region)) || !slices.Contains(got, "p: ShardHome s1@"+addrName(changes[0].region)) {
		t.Fatalf("sent %v", got)
	}
}

func TestCoordinatorHandOffNamesTheRegionHoldingMailToTheNextHome(t *testing.T) {
	c := newTestCore(1)
	c.step(protocol.Register{Region: addr("a")})
	c.step(protocol.GetShardHome{Shard: "s1", Region: addr("a")})
	c.step(protocol.Register{Region: addr("b")})
	_, out := c.step(protocol.StopShards{Shards: []string{"s1"}})
	if got := sent(out); !slices.Equal(got, []string{"a: BeginHandOff s1", "b: BeginHandOff s1"}) {
		t.Fatalf("sent %v", got)
	}
	// While the hand-off runs nobody learns the old home: a region that
	// forwarded there would race the messages other regions buffer.
	if _, out := c.step(protocol.GetShardHome{Shard: "s1", Region: addr("b")}); len(out) != 0 {
		t.Fatalf("answered during the hand-off: %v", sent(out))
	}
	c.step(ackOf(c, protocol.BeginHandOffAck{Shard: "s1", Region: addr("b")}))
	_, out = c.step(ackOf(c, protocol.BeginHandOffAck{Shard: "s1", Region: addr("a")}))
	if got := sent(out); !slices.Equal(got, []string{"a: HandOff s1"}) {
		t.Fatalf("sent %v", got)
	}
	changes, out := c.step(stoppedOf(c, protocol.ShardStopped{Shard: "s1", Region: addr("a"), Held: true}))
	// Stopped, not moved, but mail waits at a: it is allocated again at
	// once, and the new home learns first that a holds its mail. The
	// deallocation names a, should the allocation not land.
	if len(changes) != 2 || changes[0] != (change{shard: "s1", heldBy: addr("a")}) {
		t.Fatalf("changes %v", changes)
	}
	if len(out) == 0 {
		t.Fatal("nothing sent")
	}
	host, ok := out[0].msg.(protocol.HostShard)
	if !ok || host.From != addr("a") {
		t.Fatalf("first message %#v, want HostShard from a", out[0].msg)
	}
	if len(c.handOverFrom) != 0 {
		t.Fatalf("hand-over kept after allocation: %v", c.handOverFrom)
	}
}

// A new home that asks for its own shard before it reported ShardStarted
// lost its HostShard: it gets it again, From and all, not a ShardHome,
// which would have it start at once, ahead of the previous home's mail.
func TestCoordinatorSendsTheHostShardAgainToAHomeThatAsks(t *testing.T) {
	c := newTestCore(1)
	c.step(protocol.Register{Region: addr("a")})
	c.step(protocol.GetShardHome{Shard: "s1", Region: addr("a")})
	c.step(protocol.Register{Region: addr("b")})
	c.step(protocol.GracefulShutdownReq{Region: addr("a")})
	c.step(ackOf(c, protocol.BeginHandOffAck{Shard: "s1", Region: addr("b")}))
	c.step(ackOf(c, protocol.BeginHandOffAck{Shard: "s1", Region: addr("a")}))
	_, out := c.step(stoppedOf(c, protocol.ShardStopped{Shard: "s1", Region: addr("a"), Held: true}))
	host, ok := out[0].msg.(protocol.HostShard)
	if !ok || host.From != addr("a") || out[0].to != addr("b") {
		t.Fatalf("first message %#v to %s, want HostShard from a to b", out[0].msg, out[0].to)
	}
	home := out[0].to
	_, out = c.step(protocol.GetShardHome{Shard: "s1", Region: home})
	if len(out) != 1 || out[0].msg != (protocol.HostShard{Shard: "s1", From: addr("a"), Epoch: host.Epoch}) {
		t.Fatalf("answered %v, want the HostShard again", sent(out))
	}
	c.step(protocol.ShardStarted{Shard: "s1", Region: home})
	_, out = c.step(protocol.GetShardHome{Shard: "s1", Region: home})
	if got := sent(out); !slices.Equal(got, []string{addrName(home) + ": ShardHome s1@" + addrName(home)}) {
		t.Fatalf("answered %v after ShardStarted, want its home", got)
	}
}

// A predecessor's hand-off stopped the shard after the fences of its
// own; regions this coordinator told the home to since (its ShardHomes)
// may have forwarded past them. So the new coordinator hands the shard off
// again under its own fences before it moves it (moved at once, what
// regions had forwarded to the old home since would reach the new home
// after their later messages).
func TestCoordinatorHandsOffAgainAShardItsPredecessorStopped(t *testing.T) {
	// A new coordinator rebuilt from the store: s1 on a, no hand-off known.
	c := newCoordinatorCore(addr("b"), 8, homed(map[string]string{"s1": "a"}), allocation.NewLeastShard(allocation.DefaultLeastShardConfig()), 1)
	c.step(protocol.Register{Region: addr("a")})
	c.step(protocol.Register{Region: addr("b")})
	if changes, out := c.step(protocol.ShardStopped{Shard: "s1", Region: addr("b")}); len(changes)+len(out) != 0 {
		t.Fatalf("ShardStopped from a region that does not own the shard acted upon: %v %v", changes, sent(out))
	}
	changes, out := c.step(protocol.ShardStopped{Shard: "s1", Region: addr("a"), Held: true})
	if len(changes) != 0 || !slices.Equal(sent(out), []string{"a: BeginHandOff s1", "b: BeginHandOff s1"}) {
		t.Fatalf("predecessor's ShardStopped: changes %v, sent %v; want a hand-off of its own", changes, sent(out))
	}
	// Reported again before this coordinator's HandOff (the predecessor's
	// HandOff came late): nothing yet, the fences are not all in.
	if changes, out := c.step(protocol.ShardStopped{Shard: "s1", Region: addr("a"), Held: true}); len(changes)+len(out) != 0 {
		t.Fatalf("ShardStopped before this coordinator's HandOff acted upon: %v %v", changes, sent(out))
	}
	c.step(ackOf(c, protocol.BeginHandOffAck{Shard: "s1", Region: addr("a")}))
	if _, out = c.step(ackOf(c, protocol.BeginHandOffAck{Shard: "s1", Region: addr("b"), FencedAt: addr("a")})); !slices.Equal(sent(out), []string{"a: HandOff s1"}) {
		t.Fatalf("sent %v once fenced, want the HandOff", sent(out))
	}
	changes, out = c.step(stoppedOf(c, protocol.ShardStopped{Shard: "s1", Region: addr("a"), Held: true}))
	if len(changes) != 2 || changes[0] != (change{shard: "s1", heldBy: addr("a")}) {
		t.Fatalf("changes %v", changes)
	}
	if host, ok := out[0].msg.(protocol.HostShard); !ok || host.From != addr("a") {
		t.Fatalf("first message %#v", out[0].msg)
	}
}

// A region forwards while it holds its lock, so that it cannot acknowledge
// a BeginHandOff (which takes the lock) while a message it already routed
// to the old home is still on its way there. The network's Intercept runs
// on the sending goroutine, inside the forward: it finds the lock held.
func TestRegionForwardsUnderItsLock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		net, ra := proxyPair(t, Settings{}, func(entity.Context[string]) entity.Behavior[string] {
			return entity.Receive(func(entity.Context[string], string) entity.Behavior[string] { return entity.Same[string]() })
		})
		var forwards, unlocked atomic.Int32
		net.Intercept(func(from, to cluster.UniqueAddress, m any) error {
			if _, msg, ok := sentProtocol(to, m); ok && from == addr("a") && to == addr("b") {
				if _, isDeliver := msg.(protocol.Deliver); isDeliver {
					forwards.Add(1)
					if ra.mu.TryLock() {
						ra.mu.Unlock()
						unlocked.Add(1)
					}
				}
			}
			return nil
		})
		for range 5 {
			if err := ra.EntityRefFor("e").Tell("x"); err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
		}
		if forwards.Load() != 5 || unlocked.Load() != 0 {
			t.Fatalf("%d forwards, %d of them without the region lock", forwards.Load(), unlocked.Load())
		}
	})
}

// A new coordinator announces itself once, to every member, with what it
// knows: regions that registered with a predecessor see its newer epoch.
func TestNewCoordinatorAnnouncesItselfToEveryMember(t *testing.T) {
	c := newCoordinatorCore(addr("a"), 3, homed(map[string]string{"s1": "b"}), allocation.NewLeastShard(allocation.DefaultLeastShardConfig()), 1)
	// d is unreachable: it is not announced to (see the next test).
	members := []cluster.Member{up("a"), up("b"), up("c"), {Address: addr("d"), Status: cluster.Up, Unreachable: true}}
	_, out := c.step(membersChanged{members: members})
	if got, want := sent(out), []string{"a: ShardHomes", "b: ShardHomes", "c: ShardHomes"}; !slices.Equal(got, want) {
		t.Fatalf("sent %v, want %v", got, want)
	}
	if h := out[0].msg.(protocol.ShardHomes); h.Epoch != 3 || !slices.Equal(h.Homes[addr("b")], []string{"s1"}) {
		t.Fatalf("announced %+v", h)
	}
	if _, out := c.step(membersChanged{members: members}); len(out) != 0 {
		t.Fatalf("announced again: %v", sent(out))
	}
	// A member a later view shows first (e, which registered with a
	// predecessor on this node), or that is reachable again (d), is
	// announced to then; a registered one needs it no more (else e never
	// learns of this coordinator, and a hand-off goes on around it
	// without fencing it).
	c.step(protocol.Register{Region: addr("b")})
	members = []cluster.Member{up("a"), up("b"), up("c"), up("d"), up("e")}
	if _, out := c.step(membersChanged{members: members}); !slices.Equal(sent(out), []string{"d: ShardHomes", "e: ShardHomes"}) {
		t.Fatalf("sent %v, want d and e announced to", sent(out))
	}
}

// The last region leaving gets no new shard (it would refuse it); the
// shard waits for the next region to register.
func TestCoordinatorAllocatesNothingToALeavingRegion(t *testing.T) {
	c := newTestCore(1)
	c.step(protocol.Register{Region: addr("a")})
	c.step(protocol.GracefulShutdownReq{Region: addr("a")})
	if changes, out := c.step(protocol.GetShardHome{Shard: "s1", Region: addr("a")}); len(changes) != 0 || len(out) != 0 {
		t.Fatalf("allocated to the leaving region: changes %v, sent %v", changes, sent(out))
	}
	changes, out := c.step(protocol.Register{Region: addr("b")})
	if !slices.Equal(changes, []change{{shard: "s1", region: addr("b")}}) {
		t.Fatalf("after b registered: changes %v, sent %v", changes, sent(out))
	}
}

// A leaving region hears LeaveAck only once nothing is allocated to it:
// at once when it holds nothing, else after its last ShardStopped.
func TestCoordinatorAcknowledgesALeaveOnceNothingIsAllocated(t *testing.T) {
	c := newTestCore(1)
	c.step(protocol.Register{Region: addr("a")})
	c.step(protocol.Register{Region: addr("b")})
	c.step(protocol.Register{Region: addr("idle")})
	if _, out := c.step(protocol.GracefulShutdownReq{Region: addr("idle")}); !slices.Contains(sent(out), "idle: LeaveAck") {
		t.Fatalf("a region holding nothing: sent %v", sent(out))
	}
	c.step(protocol.GetShardHome{Shard: "s1", Region: addr("b")})
	home := c.shards["s1"]
	_, out := c.step(protocol.GracefulShutdownReq{Region: home})
	if slices.Contains(sent(out), addrName(home)+": LeaveAck") {
		t.Fatalf("acknowledged while %s still holds s1: %v", home, sent(out))
	}
	for _, r := range c.everyone() {
		c.step(ackOf(c, protocol.BeginHandOffAck{Shard: "s1", Region: r}))
	}
	if _, out := c.step(stoppedOf(c, protocol.ShardStopped{Shard: "s1", Region: home})); !slices.Contains(sent(out), addrName(home)+": LeaveAck") {
		t.Fatalf("after the last ShardStopped: sent %v", sent(out))
	}
}

// A GracefulShutdownReq from a region the coordinator does not know (one
// that stopped already, its request late) is acknowledged and leaves no
// mark: a region of that name registering later gets shards again.
func TestCoordinatorForgetsALateLeaveOfAnUnknownRegion(t *testing.T) {
	c := newTestCore(1)
	c.step(protocol.Register{Region: addr("a")})
	c.step(protocol.RegionStopped{Region: addr("a")})
	if _, out := c.step(protocol.GracefulShutdownReq{Region: addr("a")}); !slices.Equal(sent(out), []string{"a: LeaveAck"}) {
		t.Fatalf("late leave: sent %v", sent(out))
	}
	c.step(protocol.Register{Region: addr("a")})
	if changes, _ := c.step(protocol.GetShardHome{Shard: "s1", Region: addr("a")}); !slices.Equal(changes, []change{{shard: "s1", region: addr("a")}}) {
		t.Fatalf("a rejoined region gets no shard: changes %v", changes)
	}
}

// A shard whose region is gone and that cannot be placed again at once is
// pushed as deallocated, so that no region keeps forwarding to the dead
// one; it is placed when a region registers.
func TestCoordinatorPushesADeallocationItCannotPlace(t *testing.T) {
	c := newCoordinatorCore(addr("a"), 7, homed(map[string]string{"s1": "z"}), allocation.NewLeastShard(allocation.DefaultLeastShardConfig()), 1)
	c.step(protocol.RegisterProxy{Region: addr("p")}) // routes only: nothing can be placed
	members := []cluster.Member{{Address: addr("a"), Status: cluster.Up}, {Address: addr("p"), Status: cluster.Up}}
	changes, out := c.step(membersChanged{members: members})
	if !slices.Equal(changes, []change{{shard: "s1"}}) {
		t.Fatalf("changes %v, want s1 deallocated", changes)
	}
	if got := sent(out); !slices.Contains(got, "p: ShardHome s1@") {
		t.Fatalf("sent %v, want the deallocation pushed to p", got)
	}
	changes, out = c.step(protocol.Register{Region: addr("a")})
	if !slices.Equal(changes, []change{{shard: "s1", region: addr("a")}}) || !slices.Contains(sent(out), "p: ShardHome s1@a") {
		t.Fatalf("on registration: changes %v, sent %v", changes, sent(out))
	}
}

// A BeginHandOffAck or ShardStopped that never comes (lost with a broken
// link, or sent to another coordinator by a region whose view lagged) is
// asked for again on the next rebalance round, so the hand-off does not
// wait for ever (a leaving region would then stop with the shard's
// messages still buffered, and held mail would never reach the next
// home).
func TestCoordinatorAsksAgainForAMissingBeginHandOffAck(t *testing.T) {
	c := newTestCore(1)
	for _, r := range []string{"a", "b", "c"} {
		c.step(protocol.Register{Region: addr(r)})
	}
	c.step(protocol.GetShardHome{Shard: "s1", Region: addr("a")})
	c.step(protocol.StopShards{Shards: []string{"s1"}})
	c.step(ackOf(c, protocol.BeginHandOffAck{Shard: "s1", Region: addr("a")}))
	c.step(ackOf(c, protocol.BeginHandOffAck{Shard: "s1", Region: addr("b"), FencedAt: addr("a")}))
	// c's ack is lost.
	_, out := c.step(rebalanceTick{})
	if got := sent(out); !slices.Equal(got, []string{"c: BeginHandOff s1"}) {
		t.Fatalf("sent %v on the rebalance round, want BeginHandOff to c only", got)
	}
	_, out = c.step(ackOf(c, protocol.BeginHandOffAck{Shard: "s1", Region: addr("c"), FencedAt: addr("a")}))
	if got := sent(out); !slices.Equal(got, []string{"a: HandOff s1"}) {
		t.Fatalf("sent %v once c acked, want the HandOff", got)
	}
	// The old home's ShardStopped is lost: the HandOff is sent again.
	if _, out = c.step(rebalanceTick{}); !slices.Equal(sent(out), []string{"a: HandOff s1"}) {
		t.Fatalf("sent %v on the next round, want the HandOff again and no BeginHandOff", sent(out))
	}
}

// A region that registers while a shard is handed off is not told the old
// home: it was not fenced, so what it forwarded there could arrive after
// the hand-off and reach the new home after its own later messages, sent
// straight.
func TestCoordinatorHidesAShardInHandOffFromARegionThatRegisters(t *testing.T) {
	c := newTestCore(1)
	c.step(protocol.Register{Region: addr("a")})
	c.step(protocol.GetShardHome{Shard: "s1", Region: addr("a")})
	c.step(protocol.GetShardHome{Shard: "s2", Region: addr("a")})
	c.step(protocol.StopShards{Shards: []string{"s1"}})
	_, out := c.step(protocol.Register{Region: addr("b")})
	for _, o := range out {
		if m, ok := o.msg.(protocol.ShardHomes); ok {
			if !slices.Equal(m.Homes[addr("a")], []string{"s2"}) {
				t.Fatalf("homes told to b: %v, want only s2 on a", m.Homes)
			}
			return
		}
	}
	t.Fatalf("sent %v: no ShardHomes", sent(out))
}

// No hand-off begins before every reachable member's region registered: a
// region that has not registered yet (typically with a coordinator that
// just took over) is not fenced, and could forward to the old home after
// the shard moved on, perhaps after that node left, and be lost. The wait
// is bounded by registrationWaitRounds.
func TestCoordinatorHandsOffOnlyOnceEveryRegionRegistered(t *testing.T) {
	c := newTestCore(1)
	c.step(membersChanged{members: []cluster.Member{up("a"), up("b"), up("c")}})
	c.step(protocol.Register{Region: addr("a")})
	c.step(protocol.Register{Region: addr("b")})
	c.step(protocol.GetShardHome{Shard: "s1", Region: addr("a")})
	home := c.shards["s1"]
	if _, out := c.step(protocol.GracefulShutdownReq{Region: home}); slices.ContainsFunc(sent(out), func(s string) bool { return strings.Contains(s, "BeginHandOff") }) {
		t.Fatalf("sent %v before c registered", sent(out))
	}
	_, out := c.step(protocol.Register{Region: addr("c")})
	var begun []string
	for _, s := range sent(out) {
		if strings.HasSuffix(s, "BeginHandOff s1") {
			begun = append(begun, s)
		}
	}
	if want := []string{"a: BeginHandOff s1", "b: BeginHandOff s1", "c: BeginHandOff s1"}; !slices.Equal(begun, want) {
		t.Fatalf("once c registered: %v, want %v", begun, want)
	}

	// A member without the type's role, which may never start a proxy,
	// holds hand-offs up for a few rounds only; one with the role runs
	// the type's region, and is waited for as long as it is reachable (a
	// slow link may hold its Register up for longer than any bound, while
	// it forwards with the homes it knows).
	withRole := func(node string) cluster.Member { m := up(node); m.Roles = []string{"r"}; return m }
	for _, tc := range []struct {
		x      cluster.Member
		rounds int
	}{{up("x"), registrationWaitRounds}, {withRole("x"), 0}} {
		c = newTestCore(1)
		c.role = "r"
		c.step(membersChanged{members: []cluster.Member{withRole("a"), withRole("b"), tc.x}})
		c.step(protocol.Register{Region: addr("a")})
		c.step(protocol.Register{Region: addr("b")})
		c.step(protocol.GetShardHome{Shard: "s1", Region: addr("a")})
		c.step(protocol.StopShards{Shards: []string{"s1"}})
		rounds := 0
		for round := 1; round <= 10*registrationWaitRounds; round++ {
			if _, out := c.step(rebalanceTick{}); len(out) > 0 {
				rounds = round
				break
			}
		}
		if rounds != tc.rounds {
			t.Fatalf("x with roles %v: the stop began after %d rounds (0: never), want %d", tc.x.Roles, rounds, tc.rounds)
		}
	}
}

// A member unreachable but not Down may be alive (a partition that healed
// before the view caught up, or the other side, which keep-majority does
// not down), and it is not fenced by a hand-off that does not wait for
// it: hand-offs wait for it to register (as for a reachable member, up to
// registrationWaitRounds), a rebalance does not begin while it is
// unreachable, and a new coordinator does not announce its homes to it
// (else, after keep-majority's stand-down, what it forwards with old homes
// arrives out of order or is lost).
func TestCoordinatorHandsOffAroundAnUnreachableMember(t *testing.T) {
	cut := cluster.Member{Address: addr("c"), Status: cluster.Up, Unreachable: true} // unreachable
	c := newTestCore(1)
	_, out := c.step(membersChanged{members: []cluster.Member{up("a"), up("b"), cut}})
	if got := sent(out); !slices.Equal(got, []string{"a: ShardHomes", "b: ShardHomes"}) {
		t.Fatalf("announced %v, want a and b only", got)
	}
	c.step(protocol.Register{Region: addr("a")})
	c.step(protocol.Register{Region: addr("b")})
	c.step(protocol.GetShardHome{Shard: "s1", Region: addr("a")})
	home := c.shards["s1"]
	begins := func(out []outbound) bool {
		return slices.ContainsFunc(sent(out), func(s string) bool { return strings.Contains(s, "BeginHandOff") })
	}
	if _, out := c.step(protocol.GracefulShutdownReq{Region: home}); begins(out) {
		t.Fatalf("sent %v while c is unreachable and unregistered", sent(out))
	}
	if _, out := c.step(membersChanged{members: []cluster.Member{up("a"), up("b"), up("c")}}); begins(out) {
		t.Fatalf("sent %v once c is reachable, before it registered", sent(out))
	}
	if _, out := c.step(protocol.Register{Region: addr("c")}); !slices.Contains(sent(out), "c: BeginHandOff s1") {
		t.Fatalf("once c registered: %v, want c fenced", sent(out))
	}

	// The wait for it is not bounded by registrationWaitRounds while it
	// is unreachable: it is over when c is Down (else a leaving
	// coordinator hands off around c and stops, and c's forward after
	// the heal is lost).
	c = newTestCore(1)
	c.step(membersChanged{members: []cluster.Member{up("a"), up("b"), cut}})
	c.step(protocol.Register{Region: addr("a")})
	c.step(protocol.Register{Region: addr("b")})
	c.step(protocol.GetShardHome{Shard: "s1", Region: addr("a")})
	c.step(protocol.GracefulShutdownReq{Region: c.shards["s1"]})
	for range registrationWaitRounds + 2 {
		if _, out := c.step(rebalanceTick{}); begins(out) {
			t.Fatalf("sent %v while c is unreachable and unregistered", sent(out))
		}
	}
	if _, out := c.step(membersChanged{members: []cluster.Member{up("a"), up("b"), {Address: addr("c"), Status: cluster.Down, Unreachable: true}}}); !begins(out) {
		t.Fatalf("once c is Down: %v, want the hand-off begun", sent(out))
	}

	// Rebalancing waits while a member is unreachable, and resumes after.
	c = newTestCore(1)
	c.step(membersChanged{members: []cluster.Member{up("a"), up("b")}})
	c.step(protocol.Register{Region: addr("a")})
	for i := range 10 {
		c.step(protocol.GetShardHome{Shard: fmt.Sprintf("s%d", i), Region: addr("a")})
	}
	c.step(membersChanged{members: []cluster.Member{up("a"), up("b"), cut}})
	c.step(protocol.Register{Region: addr("b")})
	c.step(protocol.Register{Region: addr("c")})
	for range registrationWaitRounds + 1 {
		if _, out := c.step(rebalanceTick{}); begins(out) {
			t.Fatalf("rebalanced while c is unreachable: %v", sent(out))
		}
	}
	c.step(membersChanged{members: []cluster.Member{up("a"), up("b"), up("c")}})
	if _, out := c.step(rebalanceTick{}); !begins(out) {
		t.Fatalf("no rebalance once every member is reachable: %v", sent(out))
	}
}

// A leaving region that never registered with this coordinator is fenced
// and told where its shards went; the region holding a shard's mail is
// told the new home even when it is not registered here.
func TestCoordinatorTellsLeavingAndMailHoldingRegions(t *testing.T) {
	c := newCoordinatorCore(addr("b"), 8, homed(map[string]string{"s1": "a"}), allocation.NewLeastShard(allocation.DefaultLeastShardConfig()), 1)
	c.step(protocol.Register{Region: addr("b")})
	c.step(protocol.Register{Region: addr("c")})
	_, out := c.step(protocol.GracefulShutdownReq{Region: addr("a")}) // a registered with a predecessor only
	if got := sent(out); !slices.Contains(got, "a: BeginHandOff s1") {
		t.Fatalf("sent %v: the leaving region is not fenced", got)
	}
	c.step(ackOf(c, protocol.BeginHandOffAck{Shard: "s1", Region: addr("a")}))
	c.step(ackOf(c, protocol.BeginHandOffAck{Shard: "s1", Region: addr("b")}))
	c.step(ackOf(c, protocol.BeginHandOffAck{Shard: "s1", Region: addr("c")}))
	_, out = c.step(stoppedOf(c, protocol.ShardStopped{Shard: "s1", Region: addr("a"), Held: true}))
	if got := sent(out); !slices.ContainsFunc(got, func(s string) bool { return strings.HasPrefix(s, "a: ShardHome s1@") }) {
		t.Fatalf("sent %v: the region holding the mail is not told the new home", got)
	}
}

// The region holding a shard's mail is stored with the deallocation: a
// coordinator cut off or replaced before it placed the shard leaves it to
// its successor, which makes the next home wait for that mail (else the
// successor places the shard with no previous home, and the mail, handed
// over after the partition heals, comes after newer mail). A region that asks
// with mail it holds is stored too; one that leaves the view takes its mail
// with it, and the store forgets it.
func TestCoordinatorStoresTheRegionHoldingAShardsMail(t *testing.T) {
	strategy := allocation.NewLeastShard(allocation.DefaultLeastShardConfig())
	c := newCoordinatorCore(addr("a"), 1, homed(map[string]string{"s1": "a"}), strategy, 3)
	c.step(protocol.Register{Region: addr("a")})
	c.step(protocol.Register{Region: addr("b")})
	c.step(protocol.StopShards{Shards: []string{"s1"}})
	c.step(ackOf(c, protocol.BeginHandOffAck{Shard: "s1", Region: addr("a")}))
	c.step(ackOf(c, protocol.BeginHandOffAck{Shard: "s1", Region: addr("b"), FencedAt: addr("a")}))
	stopped, _ := c.step(stoppedOf(c, protocol.ShardStopped{Shard: "s1", Region: addr("a"), Held: true}))
	if len(stopped) == 0 || stopped[0] != (change{shard: "s1", heldBy: addr("a")}) {
		t.Fatalf("changes %v; want s1 deallocated, held by a, first", stopped)
	}
	// Two regions of three minimum: s2 is placed nowhere yet.
	asked, _ := c.step(protocol.GetShardHome{Shard: "s2", Region: addr("b"), HandOver: true})
	if !slices.Equal(asked, []change{{shard: "s2", heldBy: addr("b")}}) {
		t.Fatalf("changes %v; want s2 held by b, the region that asked with its mail", asked)
	}

	// The successor reads what was stored, had the cut-off coordinator's
	// allocation of s1 not landed.
	stored := map[string]Allocation{}
	for _, ch := range append(stopped[:1], asked...) {
		applyChange(stored, ch.stored())
	}
	next := newCoordinatorCore(addr("c"), 2, stored, strategy, 1)
	next.step(membersChanged{members: []cluster.Member{{Address: addr("a"), Status: cluster.Up, Unreachable: true}, {Address: addr("b"), Status: cluster.Up}, {Address: addr("c"), Status: cluster.Up}}})
	next.step(protocol.Register{Region: addr("c")})
	changes, out := next.step(protocol.GetShardHome{Shard: "s1", Region: addr("c")})
	if len(out) == 0 {
		t.Fatalf("nothing sent for s1")
	}
	if host, ok := out[0].msg.(protocol.HostShard); !ok || out[0].to != addr("c") || host.From != addr("a") {
		t.Fatalf("first message %s %#v; want c told to host s1 once a's mail is in", out[0].to, out[0].msg)
	}
	if !slices.Equal(changes, []change{{shard: "s1", region: addr("c"), heldBy: addr("a")}}) {
		t.Fatalf("changes %v; want s1 placed on c, still held by a", changes)
	}
	// a, which held s1's mail, is also told where it goes, though it
	// never registered here.
	if !slices.Contains(sent(out), "a: ShardHome s1@c") {
		t.Fatalf("sent %v; want a told s1's new home", sent(out))
	}
	// Once s1 started on c, a's mail is in: the store forgets a.
	if changes, _ := next.step(protocol.ShardStarted{Shard: "s1", Region: addr("c")}); !slices.Equal(changes, []change{{shard: "s1", region: addr("c")}}) {
		t.Fatalf("changes %v on ShardStarted; want s1 on c, held by nobody", changes)
	}
	if changes, _ := next.step(protocol.ShardStarted{Shard: "s1", Region: addr("c")}); len(changes) != 0 {
		t.Fatalf("changes %v on a second ShardStarted; want none", changes)
	}

	// b leaves the view: s2's mail is gone with it.
	changes, _ = next.step(membersChanged{members: []cluster.Member{{Address: addr("a"), Status: cluster.Up}, {Address: addr("c"), Status: cluster.Up}}})
	if !slices.Equal(changes, []change{{shard: "s2"}}) {
		t.Fatalf("changes %v; want s2's holder forgotten", changes)
	}
	if _, out := next.step(protocol.GetShardHome{Shard: "s2", Region: addr("c")}); len(out) == 0 || !out[0].msg.(protocol.HostShard).From.IsZero() {
		t.Fatalf("sent %v; want s2 hosted without waiting", out)
	}
}

// The coordinator tells every region the members it holds Down (their
// leases expired), when that changes, on registration and when the region
// is reachable again: a region whose
// view keeps a crashed node unreachable would wait for its hand-over for
// ever, and a leaving one would leave with the shard's buffer.
func TestCoordinatorTellsRegionsTheMembersDown(t *testing.T) {
	c := newTestCore(1)
	c.step(protocol.Register{Region: addr("a")})
	c.step(protocol.Register{Region: addr("b")})
	view := func(statusOfC cluster.Status) []cluster.Member {
		return []cluster.Member{{Address: addr("a"), Status: cluster.Up}, {Address: addr("b"), Status: cluster.Up}, {Address: addr("c"), Status: statusOfC, Unreachable: true}}
	}
	if _, out := c.step(membersChanged{members: view(cluster.Up)}); slices.ContainsFunc(out, func(o outbound) bool { _, ok := o.msg.(protocol.MembersDown); return ok }) {
		t.Fatalf("sent %v with nobody Down", sent(out))
	}
	_, out := c.step(membersChanged{members: view(cluster.Down)})
	if got, want := sent(out), []string{"a: MembersDown c", "b: MembersDown c"}; !slices.Equal(got, want) {
		t.Fatalf("sent %v, want %v", got, want)
	}
	if _, out := c.step(membersChanged{members: view(cluster.Down)}); len(out) != 0 {
		t.Fatalf("sent %v for a view that changed nothing", sent(out))
	}
	if _, out := c.step(protocol.Register{Region: addr("d")}); !slices.Contains(sent(out), "d: MembersDown c") {
		t.Fatalf("sent %v on registration, want the members Down", sent(out))
	}
	// b is cut off, then reachable again: told again (the word sent
	// while it was cut off was lost).
	cut := view(cluster.Down)
	cut[1].Unreachable = true
	if _, out := c.step(membersChanged{members: cut}); len(out) != 0 {
		t.Fatalf("sent %v when b became unreachable", sent(out))
	}
	if _, out := c.step(membersChanged{members: view(cluster.Down)}); !slices.Equal(sent(out), []string{"b: MembersDown c"}) {
		t.Fatalf("sent %v when b became reachable again, want the members Down to b", sent(out))
	}
}

// A home that leaves the view before its shard started there, waiting for
// the mail of the shard's previous home, passes the wait on to the next
// home, which a successor reads from the store (else the mail, re-sent to
// the home that had died, goes to the next one, which started with no
// previous home, after newer mail).
func TestCoordinatorPassesAWaitForMailOnFromAHomeThatDied(t *testing.T) {
	strategy := allocation.NewLeastShard(allocation.DefaultLeastShardConfig())
	view := func(nodes ...string) membersChanged {
		var ms []cluster.Member
		for _, n := range nodes {
			ms = append(ms, cluster.Member{Address: addr(n), Status: cluster.Up})
		}
		return membersChanged{members: ms}
	}
	for _, successor := range []bool{false, true} {
		t.Run(fmt.Sprintf("successor=%v", successor), func(t *testing.T) {
			c := newCoordinatorCore(addr("x"), 1, homed(map[string]string{"s1": "a"}), strategy, 1)
			c.step(view("a", "b", "c"))
			for _, r := range []string{"a", "b", "c"} {
				c.step(protocol.Register{Region: addr(r)})
			}
			c.step(protocol.GracefulShutdownReq{Region: addr("a")})
			for _, r := range []string{"a", "b", "c"} {
				c.step(ackOf(c, protocol.BeginHandOffAck{Shard: "s1", Region: addr(r), FencedAt: addr("a")}))
			}
			changes, _ := c.step(stoppedOf(c, protocol.ShardStopped{Shard: "s1", Region: addr("a"), Held: true}))
			if len(changes) != 2 || changes[1].heldBy != addr("a") {
				t.Fatalf("changes %v; want s1 placed, held by a", changes)
			}
			home := changes[1].region
			if successor {
				stored := map[string]Allocation{}
				for _, ch := range changes {
					applyChange(stored, ch.stored())
				}
				c = newCoordinatorCore(addr("x"), 2, stored, strategy, 1)
				c.step(view("a", "b", "c"))
				for _, r := range []string{"a", "b", "c"} {
					c.step(protocol.Register{Region: addr(r)})
				}
			}
			var rest []string
			for _, r := range []string{"a", "b", "c"} {
				if addr(r) != home {
					rest = append(rest, r)
				}
			}
			changes, out := c.step(view(rest...))
			if len(out) == 0 {
				t.Fatalf("nothing sent when %s left", home)
			}
			host, ok := out[0].msg.(protocol.HostShard)
			if !ok || host.From != addr("a") {
				t.Fatalf("first message %#v; want a HostShard from a", out[0].msg)
			}
			if want := (change{shard: "s1", region: out[0].to, heldBy: addr("a")}); len(changes) != 2 || changes[1] != want {
				t.Fatalf("changes %v; want s1 deallocated, then %v", changes, want)
			}
			// a learns that the new home waits for it: it hands over even
			// with nothing left to hand (its mail went to the dead home).
			if !slices.ContainsFunc(out, func(o outbound) bool {
				h, ok := o.msg.(protocol.ShardHome)
				return o.to == addr("a") && ok && h.Region == out[0].to && h.From == addr("a")
			}) {
				t.Fatalf("sent %#v; want a told the new home, naming a as the holder", out)
			}
		})
	}
}

// A home that registers (again) before its shard started, waiting for a
// previous home's mail, gets the HostShard again ahead of the ShardHomes
// that names it: with the ShardHomes alone, its HostShard lost, it would
// start the shard at once, ahead of that mail. A
// successor, which reads the holder from the store, does the same when
// it announces itself. The holder is told the home again behind its
// ShardHomes (which names no previous home): it owes that home a
// HandOver, an empty one if it holds nothing, and the ShardHome that
// said so may have been lost (else the home waits for ever).
func TestCoordinatorHostsAgainAHomeThatRegistersBeforeItsShardStarted(t *testing.T) {
	strategy := allocation.NewLeastShard(allocation.DefaultLeastShardConfig())
	c := newCoordinatorCore(addr("x"), 3, map[string]Allocation{"s1": {Region: addr("b"), MailHeldBy: addr("a")}, "s2": {Region: addr("b")}}, strategy, 1)
	members := []cluster.Member{{Address: addr("a"), Status: cluster.Up}, {Address: addr("b"), Status: cluster.Up}}
	if _, out := c.step(membersChanged{members: members}); !slices.Equal(sent(out), []string{"a: ShardHomes", "a: ShardHome s1@b", "b: HostShard s1", "b: ShardHomes"}) {
		t.Fatalf("announced %v; want b told to host s1 (from a) ahead of the homes", sent(out))
	}
	_, out := c.step(protocol.Register{Region: addr("b")})
	if !slices.Equal(sent(out), []string{"b: RegisterAck", "b: HostShard s1", "b: ShardHomes"}) {
		t.Fatalf("welcomed with %v; want the HostShard of s1 ahead of the homes", sent(out))
	}
	if host := out[1].msg.(protocol.HostShard); host.From != addr("a") {
		t.Fatalf("HostShard %+v, want From a", host)
	}
	_, out = c.step(protocol.Register{Region: addr("a")})
	if got := sent(out); !slices.Equal(got, []string{"a: RegisterAck", "a: ShardHomes", "a: ShardHome s1@b"}) {
		t.Fatalf("welcomed the holder with %v; want the home it owes a HandOver after the homes", got)
	}
	if home := out[2].msg.(protocol.ShardHome); home.From != addr("a") {
		t.Fatalf("ShardHome %+v, want From a", home)
	}
	c.step(protocol.ShardStarted{Shard: "s1", Region: addr("b")})
	if _, out := c.step(protocol.Register{Region: addr("b")}); !slices.Equal(sent(out), []string{"b: RegisterAck", "b: ShardHomes"}) {
		t.Fatalf("welcomed with %v once s1 started; want no HostShard", sent(out))
	}
}

// homed is what a store holds of shards that all have a home.
func homed(homes map[string]string) map[string]Allocation {
	shards := make(map[string]Allocation, len(homes))
	for shard, region := range homes {
		shards[shard] = Allocation{Region: addr(region)}
	}
	return shards
}

// ackOf is m as a region answers the coordinator's running hand-off of
// m.Shard: with its epoch and number.
func ackOf(c *coordinatorCore, m protocol.BeginHandOffAck) protocol.BeginHandOffAck {
	if h := c.handoffs[m.Shard]; h != nil {
		m.Epoch, m.Seq = c.epoch, h.seq
	}
	return m
}

// stoppedOf is m as the old home answers the coordinator's running
// hand-off of m.Shard.
func stoppedOf(c *coordinatorCore, m protocol.ShardStopped) protocol.ShardStopped {
	if h := c.handoffs[m.Shard]; h != nil {
		m.Epoch, m.Seq = c.epoch, h.seq
	}
	return m
}

// Only acknowledgements of this very hand-off count (docs/DESIGN.md,
// "Passivation and hand-off"): a region whose view moved on answers a
// deposed coordinator's BeginHandOff to its successor, and the fence it
// sent then belongs to that hand-off. Counted, the successor's HandOff
// would name the region, and the home would stop the shard on the stale
// fence, ahead of what the region forwarded since.
func TestCoordinatorCountsOnlyAcknowledgementsOfItsOwnHandOff(t *testing.T) {
	c := newCoordinatorCore(addr("a"), 7, homed(map[string]string{"s1": "a"}), allocation.NewLeastShard(allocation.DefaultLeastShardConfig()), 1)
	c.step(protocol.Register{Region: addr("a")})
	c.step(protocol.Register{Region: addr("b")})
	_, out := c.step(protocol.StopShards{Shards: []string{"s1"}})
	var begin protocol.BeginHandOff
	for _, o := range out {
		if m, ok := o.msg.(protocol.BeginHandOff); ok {
			begin = m
		}
	}
	if begin.Epoch != 7 || begin.Seq == 0 {
		t.Fatalf("BeginHandOff %+v: want the hand-off named by epoch 7 and a number", begin)
	}
	for _, stale := range []protocol.BeginHandOffAck{
		{Shard: "s1", Region: addr("b"), FencedAt: addr("a"), Epoch: 6, Seq: begin.Seq},               // a predecessor's
		{Shard: "s1", Region: addr("b"), FencedAt: addr("a"), Epoch: 7, Seq: begin.Seq + 1},           // another hand-off's
		{Shard: "s1", Region: addr("b"), FencedAt: addr("a"), Epoch: begin.Epoch, Seq: 0},             // none named
		{Shard: "s1", Region: addr("b"), FencedAt: addr("a"), Epoch: begin.Epoch + 1, Seq: begin.Seq}, // a successor's
	} {
		c.step(stale)
	}
	_, out = c.step(protocol.BeginHandOffAck{Shard: "s1", Region: addr("a"), Epoch: 7, Seq: begin.Seq})
	if got := sent(out); len(got) != 0 {
		t.Fatalf("sent %v after stale acknowledgements from b: want nothing until b answers this hand-off", got)
	}
	_, out = c.step(protocol.BeginHandOffAck{Shard: "s1", Region: addr("b"), FencedAt: addr("a"), Epoch: 7, Seq: begin.Seq})
	if len(out) != 1 {
		t.Fatalf("sent %v, want the HandOff", sent(out))
	}
	if h, ok := out[0].msg.(protocol.HandOff); !ok || h.Seq != begin.Seq || h.Epoch != 7 || !slices.Equal(h.Fences, addrs("b")) {
		t.Fatalf("sent %#v, want HandOff of the hand-off 7.%d awaiting b's fence", out[0].msg, begin.Seq)
	}
}

// A late or repeated ShardStopped of this coordinator's own hand-off,
// after the shard was placed back on the same region, moves nothing:
// taken for a predecessor's, it would start a needless hand-off, and with
// duplicated control messages one after another for ever.
func TestCoordinatorIgnoresALateShardStoppedOfItsOwnHandOff(t *testing.T) {
	c := newCoordinatorCore(addr("a"), 7, homed(map[string]string{"s1": "a", "s2": "b"}), allocation.NewLeastShard(allocation.DefaultLeastShardConfig()), 1)
	c.step(protocol.Register{Region: addr("a")})
	c.step(protocol.Register{Region: addr("b")})
	c.step(protocol.RebalanceShards{Shards: []string{"s1"}})
	c.step(ackOf(c, protocol.BeginHandOffAck{Shard: "s1", Region: addr("a")}))
	c.step(ackOf(c, protocol.BeginHandOffAck{Shard: "s1", Region: addr("b"), FencedAt: addr("a")}))
	stopped := stoppedOf(c, protocol.ShardStopped{Shard: "s1", Region: addr("a"), Held: true})
	_, out := c.step(stopped)
	if got := sent(out); len(got) == 0 || got[0] != "a: HostShard s1" {
		t.Fatalf("sent %v, want s1 placed back on a", got)
	}
	for range 2 {
		if changes, out := c.step(stopped); len(changes)+len(out) != 0 || len(c.handoffs) != 0 || len(c.later) != 0 {
			t.Fatalf("the repeated ShardStopped acted: changes %v, sent %v, hand-offs %d, later %v", changes, sent(out), len(c.handoffs), c.later)
		}
	}
}

// A Register from a region whose node the view holds Down (a slow link, or
// the region's retry from before it fenced itself, brought it late) does
// not bring the region back: a hand-off would await its BeginHandOffAck
// for ever, and the shard's mail with it.
func TestCoordinatorIgnoresARegisterFromANodeHeldDown(t *testing.T) {
	c := newCoordinatorCore(addr("a"), 7, homed(map[string]string{"s1": "b"}), allocation.NewLeastShard(allocation.DefaultLeastShardConfig()), 1)
	c.step(protocol.Register{Region: addr("a")})
	c.step(protocol.Register{Region: addr("b")})
	c.step(protocol.Register{Region: addr("c")})
	c.step(membersChanged{members: []cluster.Member{up("a"), up("b"), {Address: addr("c"), Status: cluster.Down, Unreachable: true}}})
	for _, late := range []Message{protocol.Register{Region: addr("c")}, protocol.RegisterProxy{Region: addr("c")}} {
		if _, out := c.step(late); len(out) != 0 {
			t.Fatalf("sent %v for a %T of a node held Down, want nothing", sent(out), late)
		}
	}
	_, out := c.step(protocol.StopShards{Shards: []string{"s1"}})
	if got, want := sent(out), []string{"a: BeginHandOff s1", "b: BeginHandOff s1"}; !slices.Equal(got, want) {
		t.Fatalf("sent %v, want %v: no BeginHandOff to the node held Down", got, want)
	}
	c.step(ackOf(c, protocol.BeginHandOffAck{Shard: "s1", Region: addr("a"), FencedAt: addr("b")}))
	_, out = c.step(ackOf(c, protocol.BeginHandOffAck{Shard: "s1", Region: addr("b")}))
	if got := sent(out); !slices.Equal(got, []string{"b: HandOff s1"}) {
		t.Fatalf("sent %v once every live region acked, want the HandOff", got)
	}
}

// A HandOff names the region whose mail the home still waits for (the
// From of its HostShard, read from the store by a successor), and says
// that it does: a home whose HostShard was lost waits for exactly that
// region rather than guess. Once the home reported ShardStarted, it names
// none, and still says so (a zero of a coordinator that predates the
// field means "unknown").
func TestCoordinatorHandOffNamesTheMailHolderTheHomeAwaits(t *testing.T) {
	strategy := allocation.NewLeastShard(allocation.DefaultLeastShardConfig())
	c := newCoordinatorCore(addr("x"), 3, map[string]Allocation{"s1": {Region: addr("b"), MailHeldBy: addr("a")}}, strategy, 1)
	members := []cluster.Member{{Address: addr("a"), Status: cluster.Up}, {Address: addr("b"), Status: cluster.Up}}
	c.step(membersChanged{members: members})
	c.step(protocol.Register{Region: addr("a")})
	c.step(protocol.Register{Region: addr("b")})
	handOff := func() protocol.HandOff {
		t.Helper()
		c.step(protocol.StopShards{Shards: []string{"s1"}})
		c.step(ackOf(c, protocol.BeginHandOffAck{Shard: "s1", Region: addr("a")}))
		_, out := c.step(ackOf(c, protocol.BeginHandOffAck{Shard: "s1", Region: addr("b")}))
		if got := sent(out); !slices.Equal(got, []string{"b: HandOff s1"}) {
			t.Fatalf("sent %v, want the HandOff", got)
		}
		return out[0].msg.(protocol.HandOff)
	}
	if m := handOff(); m.MailHeldBy != addr("a") || !m.MailHeldByKnown {
		t.Fatalf("HandOff %+v, want MailHeldBy a, known", m)
	}
	// The hand-off ends with b holding nothing; the shard is stopped.
	c.step(stoppedOf(c, protocol.ShardStopped{Shard: "s1", Region: addr("b")}))
	c.step(protocol.GetShardHome{Shard: "s1", Region: addr("b")})
	home := c.shards["s1"]
	c.step(protocol.ShardStarted{Shard: "s1", Region: home})
	_, out := c.step(protocol.StopShards{Shards: []string{"s1"}})
	for _, o := range out {
		if b, ok := o.msg.(protocol.BeginHandOff); ok {
			c.step(protocol.BeginHandOffAck{Shard: "s1", Region: o.to, Epoch: b.Epoch, Seq: b.Seq})
		}
	}
	_, out = c.step(rebalanceTick{}) // the HandOff, sent again
	var m protocol.HandOff
	for _, o := range out {
		if h, ok := o.msg.(protocol.HandOff); ok {
			m = h
		}
	}
	if !m.MailHeldBy.IsZero() || !m.MailHeldByKnown || m.Shard != "s1" {
		t.Fatalf("HandOff %+v after the shard started, want no holder, known", m)
	}
}

// A region still fenced for a hand-off that is over (the ShardHome that
// ended it there was lost) acknowledges it again each tick: the
// coordinator answers with the shard's home, or none once stopped, which
// ends the fence. While the hand-off runs, a repeated acknowledgement
// changes nothing.
func TestCoordinatorAnswersARepeatedAckOfAnEndedHandOffWithTheHome(t *testing.T) {
	c := newTestCore(1)
	c.step(protocol.Register{Region: addr("a")})
	c.step(protocol.GetShardHome{Shard: "s1", Region: addr("a")})
	c.step(protocol.Register{Region: addr("b")})
	c.step(protocol.StopShards{Shards: []string{"s1"}})
	ack := ackOf(c, protocol.BeginHandOffAck{Shard: "s1", Region: addr("b"), FencedAt: addr("a")})
	c.step(ack)
	if _, out := c.step(ack); len(out) != 0 {
		t.Fatalf("a repeated ack of the running hand-off sent %v", sent(out))
	}
	c.step(ackOf(c, protocol.BeginHandOffAck{Shard: "s1", Region: addr("a")}))
	c.step(stoppedOf(c, protocol.ShardStopped{Shard: "s1", Region: addr("a")}))
	_, out := c.step(ack)
	if got := sent(out); !slices.Equal(got, []string{"b: ShardHome s1@"}) {
		t.Fatalf("answered the ack of the ended hand-off with %v, want the home (none)", got)
	}
	if m := out[0].msg.(protocol.ShardHome); !m.Region.IsZero() || m.Epoch != c.epoch {
		t.Fatalf("answered %+v, want no home in epoch %d", m, c.epoch)
	}
	c.step(protocol.GetShardHome{Shard: "s1", Region: addr("a")})
	home := c.shards["s1"]
	if _, out = c.step(ack); len(out) != 1 || out[0].msg.(protocol.ShardHome).Region != home {
		t.Fatalf("answered %v once placed again, want the ShardHome of %v", sent(out), home)
	}
	// From a newer coordinator than this one: no answer (this one is deposed).
	newer := ack
	newer.Epoch = c.epoch + 1
	if _, out := c.step(newer); len(out) != 0 {
		t.Fatalf("answered a newer coordinator's hand-off with %v", sent(out))
	}
}
