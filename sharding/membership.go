package sharding

import (
	"cmp"
	"slices"
	"sync"

	"github.com/shoal-dev/shoal/sharding/allocation"
)

// Member is one node as the sharding layer sees it.
type Member struct {
	Node       string
	Roles      []string
	JoinedAt   int64 // smaller is older; ties broken by Node
	AppVersion string
	Status     allocation.Status
	Reachable  bool
}

// HasRole reports whether m carries role; the empty role matches every member.
func (m Member) HasRole(role string) bool {
	return role == "" || slices.Contains(m.Roles, role)
}

// Membership is this node's view of the cluster.
type Membership interface {
	// Self is this node.
	Self() Member
	// Members is the current view, in any order.
	Members() []Member
	// Subscribe calls fn after every change of the view; fn must not block.
	Subscribe(fn func()) (cancel func())
}

// Oldest is the oldest Up, reachable member with role, the one that hosts
// the coordinator; ok is false when there is none.
func Oldest(members []Member, role string) (Member, bool) {
	var best Member
	found := false
	for _, m := range members {
		if m.Status != allocation.Up || !m.Reachable || !m.HasRole(role) {
			continue
		}
		if !found || older(m, best) {
			best, found = m, true
		}
	}
	return best, found
}

func older(a, b Member) bool {
	return cmp.Or(cmp.Compare(a.JoinedAt, b.JoinedAt), cmp.Compare(a.Node, b.Node)) < 0
}

// LocalCluster is a Membership shared by the nodes of one process: the
// single-node default, and the multi-region simulations of the tests.
type LocalCluster struct {
	mu      sync.Mutex
	members map[string]Member
	subs    map[int]func()
	next    int
	clock   int64
}

// NewLocalCluster returns an empty cluster.
func NewLocalCluster() *LocalCluster {
	return &LocalCluster{members: make(map[string]Member), subs: make(map[int]func())}
}

// Join adds an Up member younger than every earlier one, and returns the
// Membership view of that node.
func (c *LocalCluster) Join(node string, roles ...string) Membership {
	return c.JoinVersion(node, "", roles...)
}

// JoinVersion is Join with an application version.
func (c *LocalCluster) JoinVersion(node, appVersion string, roles ...string) Membership {
	c.mu.Lock()
	c.clock++
	c.members[node] = Member{Node: node, Roles: roles, JoinedAt: c.clock, AppVersion: appVersion, Status: allocation.Up, Reachable: true}
	c.mu.Unlock()
	c.notify()
	return localView{c: c, node: node}
}

// SetStatus changes a member's status (Leaving before a graceful leave).
func (c *LocalCluster) SetStatus(node string, s allocation.Status) {
	c.mu.Lock()
	if m, ok := c.members[node]; ok {
		m.Status = s
		c.members[node] = m
	}
	c.mu.Unlock()
	c.notify()
}

// Remove drops a member.
func (c *LocalCluster) Remove(node string) {
	c.mu.Lock()
	delete(c.members, node)
	c.mu.Unlock()
	c.notify()
}

func (c *LocalCluster) notify() {
	c.mu.Lock()
	subs := make([]func(), 0, len(c.subs))
	for _, fn := range c.subs {
		subs = append(subs, fn)
	}
	c.mu.Unlock()
	for _, fn := range subs {
		fn()
	}
}

type localView struct {
	c    *LocalCluster
	node string
}

func (v localView) Self() Member {
	v.c.mu.Lock()
	defer v.c.mu.Unlock()
	return v.c.members[v.node]
}

func (v localView) Members() []Member {
	v.c.mu.Lock()
	defer v.c.mu.Unlock()
	out := make([]Member, 0, len(v.c.members))
	for _, m := range v.c.members {
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b Member) int { return cmp.Compare(a.Node, b.Node) })
	return out
}

func (v localView) Subscribe(fn func()) func() {
	v.c.mu.Lock()
	defer v.c.mu.Unlock()
	id := v.c.next
	v.c.next++
	v.c.subs[id] = fn
	return func() {
		v.c.mu.Lock()
		defer v.c.mu.Unlock()
		delete(v.c.subs, id)
	}
}

// Leave removes this member from the cluster; Sharding.Shutdown calls it last.
func (v localView) Leave() { v.c.Remove(v.node) }
