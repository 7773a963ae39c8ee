package inproc

import (
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/shoal-dev/shoal/cluster"
)

// Members is the membership of the nodes of one process when they share
// one opinion of it: every node has its own cluster.LocalMembership, and
// each change is set on all of them, in order, before the call returns.
// It is what the in-process cluster of package sharding and the tests of
// several nodes in one process use; a test that needs views to diverge
// gives each node a LocalMembership of its own instead.
type Members struct {
	mu    sync.Mutex
	view  cluster.View
	order uint64 // the join order of the youngest member so far
	nodes map[cluster.UniqueAddress]*cluster.LocalMembership
}

// NewMembers returns a membership without members.
func NewMembers() *Members {
	return &Members{nodes: make(map[cluster.UniqueAddress]*cluster.LocalMembership)}
}

// Membership is one node's membership in Members: its own view of the
// shared one. Leave removes the node.
type Membership struct {
	*cluster.LocalMembership
	members *Members
}

// Leave removes this node from the membership: every node, this one
// included, sees it gone.
func (m Membership) Leave() { m.members.Remove(m.Self()) }

// Join adds addr as an Up member, younger than every earlier one, with
// roles, and returns its membership. It refuses an address that is a
// member already, or has no node id (cluster.ErrInvalidMember).
func (m *Members) Join(addr cluster.UniqueAddress, roles ...string) (Membership, error) {
	return m.JoinVersion(addr, "", roles...)
}

// JoinVersion is Join with an application version.
func (m *Members) JoinVersion(addr cluster.UniqueAddress, appVersion string, roles ...string) (Membership, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.view.Member(addr); ok {
		return Membership{}, fmt.Errorf("%w: %s is a member already", cluster.ErrInvalidMember, addr)
	}
	next, err := m.view.With(cluster.Member{Address: addr, Roles: slices.Clone(roles), AppVersion: appVersion,
		JoinOrder: m.order + 1, Status: cluster.Up})
	if err != nil {
		return Membership{}, err
	}
	m.order++
	local := cluster.NewLocalMembership(addr, m.view)
	m.nodes[addr] = local
	m.setLocked(next)
	return Membership{LocalMembership: local, members: m}, nil
}

// SetStatus moves the member at addr to status, as every node sees it.
// Unlike a real membership it lets a status move back (Leaving to Up, say),
// so that a test can hand the oldest role back and forth; it does nothing
// for an address that is no member.
func (m *Members) SetStatus(addr cluster.UniqueAddress, status cluster.Status) {
	m.update(addr, func(mem *cluster.Member) { mem.Status = status })
}

// SetReachable marks the member at addr reachable or not, as every node
// sees it.
func (m *Members) SetReachable(addr cluster.UniqueAddress, reachable bool) {
	m.update(addr, func(mem *cluster.Member) { mem.Unreachable = !reachable })
}

func (m *Members) update(addr cluster.UniqueAddress, change func(*cluster.Member)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	mem, ok := m.view.Member(addr)
	if !ok {
		return
	}
	change(&mem)
	next, err := m.view.Without(addr).With(mem)
	if err != nil {
		return // an invalid status: nothing changes
	}
	m.setLocked(next)
}

// Remove drops the member at addr: every node, that one included, sees
// it gone, and it sees no later change.
func (m *Members) Remove(addr cluster.UniqueAddress) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.view.Member(addr); !ok {
		return
	}
	m.setLocked(m.view.Without(addr))
	delete(m.nodes, addr)
}

// View is the shared view.
func (m *Members) View() cluster.View {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.view
}

// setLocked makes v every node's view, in address order; m.mu is held,
// so that every node sees the changes in the order they were made.
func (m *Members) setLocked(v cluster.View) {
	m.view = v
	for _, a := range slices.SortedFunc(maps.Keys(m.nodes), cluster.UniqueAddress.Compare) {
		m.nodes[a].Set(v)
	}
}
