package sharding

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/cluster/inproc"
	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/sharding/internal/wire"
	"github.com/shoal-dev/shoal/timers"
)

// InProcessCluster runs several nodes of a cluster in one process, as the
// project's own tests do: they share one membership (cluster/inproc's
// Members), one cluster/inproc network, and in-memory coordinator and
// remember stores. Give each
// node's entity.System its own NodeID and the same journal and snapshot
// store (journal/memory, snapshot/memory), so that an event-sourced entity
// recovers wherever its shard moves. What crosses from one node to
// another is encoded as over a socket (sharding's wire, the user messages
// and replies with the System's codec), so give each System a codec that
// knows the commands and replies that may cross (entity.Config.Codec): a
// type it does not know fails its Tell or ask with
// codec.ErrUnregisteredType, as it would in production. Messages within a
// node are handed over as values.
//
// It suits examples, tests and single-process deployments that want
// several regions; nothing survives the process. Leave with
// Sharding.Shutdown: the node hands its shards off and leaves the
// membership.
type InProcessCluster struct {
	members  *inproc.Members
	net      *inproc.Network
	pump     *pump
	store    *MemoryCoordinatorStore
	remember *MemoryRememberStore

	mu    sync.Mutex
	nodes []*Sharding // every node that joined
}

// NewInProcessCluster returns a cluster with no nodes.
func NewInProcessCluster() *InProcessCluster {
	reg := codec.NewRegistry() // the network's: sharding's wire alone
	if err := wire.RegisterTypes(reg); err != nil {
		panic(err) // a fresh registry takes the wire's types
	}
	net, err := inproc.NewNetwork(inproc.Config{Codec: reg, Clock: timers.Real{}})
	if err != nil {
		panic(err) // a Codec and a Clock are all it needs
	}
	return &InProcessCluster{members: inproc.NewMembers(), net: net, pump: &pump{net: net},
		store: NewMemoryCoordinatorStore(), remember: NewMemoryRememberStore()}
}

// Join starts the sharding layer of a new node running sys, named by
// sys.NodeID() and sys.Incarnation(), with roles. The first node to join
// is the oldest: it hosts the coordinators. Then register entity types on
// it with Init, as on any node.
func (c *InProcessCluster) Join(sys *entity.System, roles ...string) (*Sharding, error) {
	node := cluster.UniqueAddress{Node: sys.NodeID(), Incarnation: sys.Incarnation()}
	for _, m := range c.members.View().Members() {
		if m.Address.Node == node.Node {
			return nil, fmt.Errorf("sharding: join in process: %w: node %q is a member already", ErrNodeNameTaken, node.Node)
		}
	}
	membership, err := c.members.Join(node, roles...)
	if err != nil {
		return nil, fmt.Errorf("sharding: join %s in process: %w", node, err)
	}
	var sh atomic.Pointer[Sharding]
	ct, err := c.net.Join(node, func(from cluster.UniqueAddress, msg any) {
		if s := sh.Load(); s != nil {
			s.Receive(from, msg)
		}
	})
	if err != nil {
		c.members.Remove(node)
		return nil, fmt.Errorf("sharding: join %s in process: %w", node, err)
	}
	s, err := New(sys, Config{Transport: pumped{ct, c.pump}, Membership: membership, Roles: roles,
		CoordinatorStore: c.store, RememberStore: c.remember})
	if err != nil {
		_ = ct.Close(context.Background())
		c.members.Remove(node)
		return nil, fmt.Errorf("sharding: join %s in process: %w", node, err)
	}
	sh.Store(s)
	// As if the membership told every node at once: each region knows of
	// the new node before Join returns.
	c.mu.Lock()
	c.nodes = append(c.nodes, s)
	nodes := slices.Clone(c.nodes)
	c.mu.Unlock()
	for _, n := range nodes {
		n.settle()
	}
	return s, nil
}

// Remove takes node out of the membership without a graceful leave, as a
// cluster's membership does with a node that crashed: call it after the
// node's Sharding.Terminate. The others start its shards elsewhere.
func (c *InProcessCluster) Remove(node cluster.UniqueAddress) { c.members.Remove(node) }

// ErrNodeNameTaken is returned by InProcessCluster.Join for a node name
// (entity.Config.NodeID) already in the cluster.
var ErrNodeNameTaken = errors.New("node name taken")

// pumped is a node's transport on the cluster's network: every message
// it sends starts the pump, so that the network delivers without a
// goroutine of its own running for the cluster's lifetime.
type pumped struct {
	*inproc.Transport
	pump *pump
}

// Send implements cluster.Transport.
func (t pumped) Send(to cluster.UniqueAddress, msg any) error {
	if err := t.Transport.Send(to, msg); err != nil {
		return err
	}
	t.pump.kick()
	return nil
}

// pump delivers what the network holds on a goroutine that runs while
// there is something to deliver: one at a time, so that handlers run one
// message at a time and each link keeps its order.
type pump struct {
	net *inproc.Network

	mu              sync.Mutex
	running, kicked bool
}

// kick makes the pump deliver what was sent so far. It never blocks.
func (p *pump) kick() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.running {
		p.kicked = true
		return
	}
	p.running = true
	go p.run()
}

func (p *pump) run() {
	for {
		p.net.DeliverDue()
		p.mu.Lock()
		if !p.kicked {
			p.running = false
			p.mu.Unlock()
			return
		}
		p.kicked = false
		p.mu.Unlock()
	}
}
