package sharding

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/cluster/inproc"
	"github.com/shoal-dev/shoal/entity"
)

// InProcessCluster runs several nodes of a cluster in one process, as the
// project's own tests do: they share one membership (cluster/inproc's
// Members), an in-memory transport, and in-memory coordinator and
// remember stores. Give each
// node's entity.System its own NodeID and the same journal and snapshot
// store (journal/memory, snapshot/memory), so that an event-sourced entity
// recovers wherever its shard moves.
//
// It suits examples, tests and single-process deployments that want
// several regions; nothing survives the process. Leave with
// Sharding.Shutdown: the node hands its shards off and leaves the
// membership.
type InProcessCluster struct {
	members   *inproc.Members
	transport *memoryTransport
	store     *MemoryCoordinatorStore
	remember  *MemoryRememberStore

	mu    sync.Mutex
	nodes []*Sharding // every node that joined
}

// NewInProcessCluster returns a cluster with no nodes.
func NewInProcessCluster() *InProcessCluster {
	return &InProcessCluster{members: inproc.NewMembers(), transport: newMemoryTransport(),
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
	sh, err := New(sys, Config{Transport: c.transport, Membership: membership, Roles: roles,
		CoordinatorStore: c.store, RememberStore: c.remember})
	if err != nil {
		c.members.Remove(node)
		return nil, fmt.Errorf("sharding: join %s in process: %w", node, err)
	}
	// As if the membership told every node at once: each region knows of
	// the new node before Join returns.
	c.mu.Lock()
	c.nodes = append(c.nodes, sh)
	nodes := slices.Clone(c.nodes)
	c.mu.Unlock()
	for _, n := range nodes {
		n.settle()
	}
	return sh, nil
}

// Remove takes node out of the membership without a graceful leave, as a
// cluster's membership does with a node that crashed: call it after the
// node's Sharding.Terminate. The others start its shards elsewhere.
func (c *InProcessCluster) Remove(node cluster.UniqueAddress) { c.members.Remove(node) }

// ErrNodeNameTaken is returned by InProcessCluster.Join for a node name
// (entity.Config.NodeID) already in the cluster.
var ErrNodeNameTaken = errors.New("node name taken")
