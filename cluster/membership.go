package cluster

import (
	"fmt"
	"maps"
	"slices"
	"sync"
)

// Membership is one node's source of views: memberlist behind it in a
// cluster, a LocalMembership per node in tests and the simulator. Views of
// different nodes may differ for a while.
type Membership interface {
	// Self is this node's incarnation.
	Self() UniqueAddress
	// View is the current view.
	View() View
	// Subscribe calls fn with every change after the returned view, in
	// order and one at a time. fn must not block and must not update the
	// membership; hand the change to a goroutine of your own if handling
	// it takes time. cancel stops further calls (one already running
	// finishes).
	Subscribe(fn func(Change)) (current View, cancel func())
}

// LocalMembership is a Membership whose views its owner sets: the
// single-process default, and each node's own opinion in tests and the
// simulator (give every node its own to let their views diverge).
type LocalMembership struct {
	self UniqueAddress

	// publish serializes updates with their notifications, so subscribers
	// see changes in order and Subscribe sees a consistent start.
	publish sync.Mutex

	mu   sync.Mutex // guards view and subs for readers
	view View
	subs map[int]func(Change)
	next int
}

var _ Membership = (*LocalMembership)(nil)

// NewLocalMembership returns a membership for self starting at view.
func NewLocalMembership(self UniqueAddress, view View) *LocalMembership {
	return &LocalMembership{self: self, view: view, subs: make(map[int]func(Change))}
}

// Self implements Membership.
func (m *LocalMembership) Self() UniqueAddress { return m.self }

// View implements Membership.
func (m *LocalMembership) View() View {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.view
}

// Subscribe implements Membership.
func (m *LocalMembership) Subscribe(fn func(Change)) (View, func()) {
	m.publish.Lock()
	defer m.publish.Unlock()
	m.mu.Lock()
	defer m.mu.Unlock()
	id := m.next
	m.next++
	m.subs[id] = fn
	return m.view, func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		delete(m.subs, id)
	}
}

// Set replaces the view and tells the subscribers what changed; a view
// equal to the current one tells them nothing.
func (m *LocalMembership) Set(v View) {
	_ = m.apply(func(View) (View, error) { return v, nil })
}

// Update applies members to the view with View.With (adds, or moves
// status forward) and tells the subscribers. It changes nothing when any
// member is refused (ErrInvalidMember, ErrStatusRegression).
func (m *LocalMembership) Update(members ...Member) error {
	return m.apply(func(v View) (View, error) {
		for _, mem := range members {
			next, err := v.With(mem)
			if err != nil {
				return View{}, fmt.Errorf("cluster: update %s: %w", m.self, err)
			}
			v = next
		}
		return v, nil
	})
}

// Remove drops members from the view and tells the subscribers.
func (m *LocalMembership) Remove(addrs ...UniqueAddress) {
	_ = m.apply(func(v View) (View, error) {
		for _, a := range addrs {
			v = v.Without(a)
		}
		return v, nil
	})
}

// apply replaces the view by next(current) and tells the subscribers, or
// changes nothing when next fails.
func (m *LocalMembership) apply(next func(View) (View, error)) error {
	m.publish.Lock()
	defer m.publish.Unlock()
	m.mu.Lock()
	old := m.view
	cur, err := next(old)
	if err == nil {
		m.view = cur
	}
	m.mu.Unlock()
	if err != nil {
		return err
	}
	m.notify(old, cur)
	return nil
}

// notify runs with publish held and mu not held. It calls subscribers in
// the order they subscribed, skipping any cancelled since notify began (by
// an earlier subscriber's fn, say), so that cancel stops further calls.
func (m *LocalMembership) notify(old, cur View) {
	events := Diff(old, cur)
	if len(events) == 0 {
		return
	}
	m.mu.Lock()
	ids := slices.Sorted(maps.Keys(m.subs))
	m.mu.Unlock()
	change := Change{From: old, To: cur, Events: events}
	for _, id := range ids {
		m.mu.Lock()
		fn, ok := m.subs[id]
		m.mu.Unlock()
		if ok {
			fn(change)
		}
	}
}
