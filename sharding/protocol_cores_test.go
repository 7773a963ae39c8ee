package sharding

import (
	"fmt"
	"github.com/shoal-dev/shoal/cluster"
	"slices"
	"testing"

	"github.com/shoal-dev/shoal/sharding/allocation"
	"github.com/shoal-dev/shoal/sharding/internal/protocol"
)

// coreNet runs coordinator and region cores against each other, with no
// runner: what one sends is queued for the other, in send order, and a
// test may hold back messages to play a slow link.
type coreNet struct {
	t       *testing.T
	coord   *coordinatorCore
	regions map[string]*regionCore[string, string]
	queue   []netMsg
	held    []netMsg
	hold    func(netMsg) bool
	got     map[string][]string   // node → "entity msg" delivered to its local shards
	seen    []string              // every delivery, in order: "node:entity msg"
	stored  map[string]Allocation // the coordinator store
	// leftover is what a shard holds for stopping entities when its
	// hand-off ends, by shard.
	leftover map[string][]pending[string]
	// unreachable are the messages sent to a node with no region.
	unreachable []netMsg
}

type netMsg struct {
	from, to string // "coordinator" or a region's node
	msg      Message
}

func newCoreNet(t *testing.T, nodes ...string) *coreNet {
	n := &coreNet{t: t, regions: map[string]*regionCore[string, string]{}, got: map[string][]string{}, stored: map[string]Allocation{}}
	for _, node := range nodes {
		n.regions[node] = newRegionCore[string, string](regionCoreConfig{self: addr(node), bufferSize: 100, tickInterval: 1})
	}
	return n
}

// run delivers queued messages until none is left but those held back.
func (n *coreNet) run() {
	for len(n.queue) > 0 {
		m := n.queue[0]
		n.queue = n.queue[1:]
		if n.hold != nil && n.hold(m) {
			n.held = append(n.held, m)
			continue
		}
		if m.to == "coordinator" {
			changes, out := n.coord.step(m.msg)
			for _, c := range changes {
				applyChange(n.stored, c.stored())
			}
			for _, o := range out {
				n.queue = append(n.queue, netMsg{"coordinator", addrName(o.to), o.msg})
			}
			continue
		}
		r := n.regions[m.to]
		if r == nil {
			n.unreachable = append(n.unreachable, m)
			continue
		}
		r.step(m.msg)
		n.effects(m.to)
	}
}

// release queues the held messages again, after what is queued now.
func (n *coreNet) release() {
	n.hold = nil
	n.queue = append(n.queue, n.held...)
	n.held = nil
	n.run()
}

// effects carries out a region's effects as its runner would.
func (n *coreNet) effects(node string) {
	r := n.regions[node]
	for len(r.out) > 0 {
		out := r.out
		r.out = nil
		for _, ef := range out {
			switch ef.kind {
			case regSend:
				to := ef.node
				if ef.coordinator {
					to = addr("coordinator")
				}
				n.queue = append(n.queue, netMsg{node, addrName(to), ef.msg})
			case regForward:
				n.queue = append(n.queue, netMsg{node, addrName(ef.node), ef.p.deliver(ef.shard)})
			case regHost:
				r.attach(ef.shard, ef.shard)
			case regDeliver:
				n.delivered(node, ef.p)
			case regHandOff:
				// The shard's entities stop at once.
				r.handedOff(ef.shard, n.leftover[ef.shard])
			}
		}
	}
}

func (n *coreNet) delivered(node string, p pending[string]) {
	n.got[node] = append(n.got[node], p.entityID+" "+p.msg)
	n.seen = append(n.seen, node+":"+p.entityID+" "+p.msg)
}

// tell sends a message for entity of shard through node's region, as
// EntityRef.Tell would.
func (n *coreNet) tell(node, shard, entity, msg string) {
	n.input(node, func(r *regionCore[string, string]) {
		p := pending[string]{entityID: entity, msg: msg}
		switch v, e := r.route(shard, p); v {
		case routeLocal:
			n.delivered(node, p)
		case routeRemote:
			n.queue = append(n.queue, netMsg{node, addrName(e.home), p.deliver(shard)})
		case routeHeld:
		default:
			n.t.Fatalf("tell %s via %s refused: %d", msg, node, v)
		}
	})
}

func (n *coreNet) input(node string, fn func(r *regionCore[string, string])) {
	fn(n.regions[node])
	n.effects(node)
	n.run()
}

func (n *coreNet) members(oldest string, nodes ...string) {
	for _, node := range nodes {
		n.input(node, func(r *regionCore[string, string]) { r.membership(addr(oldest), addrs(nodes...)) })
	}
}

// A HostShard from a coordinator that has just been replaced arrives late,
// after its successor's ShardHomes: the region ignores it, as it must a
// stale epoch, and must lose nothing by that. The messages the shard's
// previous home held stay there until it learns the new home, and go to it
// straight (they used to ride in the HostShard, and were dropped with it).
func TestLateHostShardFromAReplacedCoordinatorLosesNothing(t *testing.T) {
	n := newCoreNet(t, "b", "c")
	strategy := allocation.NewLeastShard(allocation.DefaultLeastShardConfig())
	n.coord = newCoordinatorCore(addr("a"), 1, homed(map[string]string{"s": "b"}), strategy, 1)
	n.members("a", "b", "c")
	if !n.regions["b"].registered || !n.regions["c"].registered {
		t.Fatal("regions did not register")
	}
	n.input("b", func(r *regionCore[string, string]) {
		if v, _ := r.route("s", pending[string]{entityID: "e", msg: "0"}); v != routeLocal {
			t.Fatalf("s not hosted on b: verdict %d", v)
		}
	})
	// b leaves: its shard is handed off while entity e passivates, holding 1 and 2.
	n.leftover = map[string][]pending[string]{"s": {{entityID: "e", msg: "1"}, {entityID: "e", msg: "2"}}}
	n.hold = func(m netMsg) bool { _, ok := m.msg.(protocol.HostShard); return ok && m.to == "c" }
	n.input("b", func(r *regionCore[string, string]) { r.leave(addr("a")) })
	if n.stored["s"].Region != addr("c") || len(n.held) != 1 {
		t.Fatalf("stored %v, held %v: want s allocated to c and its HostShard held", n.stored, n.held)
	}
	// The coordinator is replaced; its successor rebuilds from the store
	// and announces every home under a newer epoch.
	n.coord = newCoordinatorCore(addr("a"), 2, n.stored, strategy, 1)
	changes, out := n.coord.step(membersChanged{members: []cluster.Member{{Address: addr("b"), Status: cluster.Leaving}, {Address: addr("c"), Status: cluster.Up}}})
	if len(changes) > 0 {
		t.Fatalf("changes %v", changes)
	}
	for _, o := range out {
		n.queue = append(n.queue, netMsg{"coordinator", addrName(o.to), o.msg})
	}
	n.run()
	n.release() // the late HostShard, epoch 1
	if got := n.got["c"]; !slices.Equal(got, []string{"e 1", "e 2"}) {
		t.Fatalf("c delivered %v, want [e 1 e 2]", got)
	}
	if got := fmt.Sprint(n.got["b"]); got != "[]" {
		t.Fatalf("b delivered %v after its hand-off", got)
	}
}

// A message forwarded to a shard's home is overtaken, on another link, by
// the hand-off of its shard: the home must not stop the shard before the
// forwarding region's fence, sent on the link the forward took, arrived
// after it. Else the forwarded message reaches the entity after one sent
// later, which waited at its sender for the new home: 0, 2, 1.
func TestForwardOvertakenByAHandOffOnAnotherLink(t *testing.T) {
	n := newCoreNet(t, "o", "x", "y")
	strategy := allocation.NewLeastShard(allocation.DefaultLeastShardConfig())
	n.coord = newCoordinatorCore(addr("a"), 1, homed(map[string]string{"s": "o", "t": "y"}), strategy, 1)
	n.members("a", "o", "x", "y")
	n.tell("x", "s", "e", "0")
	n.hold = func(m netMsg) bool { return m.from == "x" && m.to == "o" } // a slow link
	n.tell("x", "s", "e", "1")
	n.input("o", func(r *regionCore[string, string]) { r.leave(addr("a")) }) // s moves to x, the region with fewest shards
	n.tell("x", "s", "e", "2")
	n.release()
	want := []string{"o:e 0", "x:e 1", "x:e 2"}
	if !slices.Equal(n.seen, want) {
		t.Fatalf("deliveries %v, want %v", n.seen, want)
	}
}

// Homes can be unlearned. A coordinator on a leaving node finds a region
// gone, deallocates its shard and cannot place it (no region registered
// yet), and goes before anyone asks; its successor, rebuilt from the
// store, knows no home for the shard. Regions that learned the dead home
// from an older epoch must forget it: their ShardHomes do not list it. Else
// they forward to the dead node forever and never ask again.
func TestStaleHomeIsUnlearned(t *testing.T) {
	n := newCoreNet(t, "x", "y")
	strategy := allocation.NewLeastShard(allocation.DefaultLeastShardConfig())
	for _, node := range []string{"x", "y"} {
		n.input(node, func(r *regionCore[string, string]) {
			r.step(protocol.ShardHomes{Homes: map[cluster.UniqueAddress][]string{addr("z"): {"s"}}, Epoch: 1})
		})
	}
	alive := []cluster.Member{{Address: addr("l"), Status: cluster.Leaving},
		{Address: addr("x"), Status: cluster.Up}, {Address: addr("y"), Status: cluster.Up}}
	n.coord = newCoordinatorCore(addr("l"), 2, homed(map[string]string{"s": "z"}), strategy, 1)
	n.hold = func(m netMsg) bool { return m.to == "coordinator" } // l goes before it hears from anyone
	changes, out := n.coord.step(membersChanged{members: alive})
	if !slices.Equal(changes, []change{{shard: "s"}}) {
		t.Fatalf("changes %v, want s deallocated", changes)
	}
	for _, o := range out {
		n.queue = append(n.queue, netMsg{"coordinator", addrName(o.to), o.msg})
	}
	n.run()
	n.hold, n.held = nil, nil
	n.stored = map[string]Allocation{}
	n.coord = newCoordinatorCore(addr("x"), 3, n.stored, strategy, 1)
	_, out = n.coord.step(membersChanged{members: alive[1:]})
	for _, o := range out {
		n.queue = append(n.queue, netMsg{"coordinator", addrName(o.to), o.msg})
	}
	n.members("x", "x", "y")
	n.tell("y", "s", "e", "1")
	if len(n.seen) != 1 || n.seen[0][2:] != "e 1" {
		t.Fatalf("deliveries %v, unreachable %v: want e 1 delivered", n.seen, n.unreachable)
	}
}
