package remote

import (
	"maps"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/sharding"
	"github.com/shoal-dev/shoal/sharding/allocation"
)

// Membership is a sharding.Membership fed by a cluster.Membership. The
// cluster's change notifications only store the new view and wake the
// Membership's own goroutine, which calls sharding's subscribers (they
// take locks a region's shutdown may hold), so a cluster membership is
// never held up by sharding. Subscribers may see
// several changes as one; Members always returns the latest view.
type Membership struct {
	src   cluster.Membership
	self  cluster.UniqueAddress
	roles []string

	view   atomic.Pointer[cluster.View]
	cancel func()
	wake   chan struct{}
	stop   chan struct{}
	done   chan struct{}

	mu   sync.Mutex
	subs map[int]func()
	next int
}

var _ sharding.Membership = (*Membership)(nil)

// NewMembership follows src until Close. roles are this node's, for Self
// while the view does not hold it yet.
func NewMembership(src cluster.Membership, roles ...string) *Membership {
	m := &Membership{
		src: src, self: src.Self(), roles: slices.Clone(roles),
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
		subs: make(map[int]func()),
	}
	current, cancel := src.Subscribe(func(c cluster.Change) {
		v := c.To
		m.view.Store(&v)
		select {
		case m.wake <- struct{}{}:
		default: // a wake-up is pending; it will read this view
		}
	})
	m.view.Store(&current)
	m.cancel = cancel
	go m.run()
	return m
}

func (m *Membership) run() {
	defer close(m.done)
	for {
		select {
		case <-m.stop:
			return
		case <-m.wake:
			m.mu.Lock()
			subs := make([]func(), 0, len(m.subs))
			for _, id := range slices.Sorted(maps.Keys(m.subs)) {
				subs = append(subs, m.subs[id])
			}
			m.mu.Unlock()
			for _, fn := range subs {
				fn()
			}
		}
	}
}

// Close stops following the cluster membership; no subscriber is called
// after it returns. It must not be called from a subscriber.
func (m *Membership) Close() {
	m.cancel()
	select {
	case <-m.stop:
	default:
		close(m.stop)
	}
	<-m.done
}

// Self implements sharding.Membership.
func (m *Membership) Self() sharding.Member {
	if mem, ok := m.view.Load().Member(m.self); ok {
		return member(mem)
	}
	return sharding.Member{Node: NodeName(m.self), Roles: slices.Clone(m.roles), Status: allocation.Joining, Reachable: true}
}

// Members implements sharding.Membership: every member of the latest
// view, Down ones included (as Down).
func (m *Membership) Members() []sharding.Member {
	members := m.view.Load().Members()
	out := make([]sharding.Member, len(members))
	for i, mem := range members {
		out[i] = member(mem)
	}
	return out
}

// Subscribe implements sharding.Membership; fn runs on the Membership's
// goroutine.
func (m *Membership) Subscribe(fn func()) func() {
	m.mu.Lock()
	defer m.mu.Unlock()
	id := m.next
	m.next++
	m.subs[id] = fn
	return func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		delete(m.subs, id)
	}
}

// member is mem as sharding sees it.
func member(mem cluster.Member) sharding.Member {
	return sharding.Member{
		Node:       NodeName(mem.Address),
		Roles:      slices.Clone(mem.Roles),
		JoinedAt:   int64(mem.JoinOrder),
		AppVersion: mem.AppVersion,
		Status:     status(mem.Status),
		Reachable:  !mem.Unreachable,
	}
}

func status(s cluster.Status) allocation.Status {
	switch s {
	case cluster.Up:
		return allocation.Up
	case cluster.Leaving:
		return allocation.Leaving
	case cluster.Down:
		return allocation.Down
	}
	return allocation.Joining
}
