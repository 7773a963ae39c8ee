package node

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/sharding"
	"github.com/shoal-dev/shoal/sharding/remote"
)

// leaseView is the membership sharding sees: the gossip view (inner), in
// which every other member whose node lease has expired in the database is
// shown unreachable. memberlist takes seconds to notice a crash (about
// 5.5 s with its LAN timing); an expired lease says more, and sooner: the
// incarnation fenced itself, by its own clock, before the store's expiry,
// and can never renew. So the coordinator's place moves off a crashed
// oldest member about a lease after the crash, and regions stop routing
// to a dead member. The shards themselves still move only once the
// coordinator has read the expiry in the store (sharding's downing).
type leaseView struct {
	inner   sharding.Membership
	self    string
	expired func(context.Context, []cluster.UniqueAddress) ([]cluster.UniqueAddress, error)

	mu   sync.Mutex
	gone map[string]bool // members whose lease expired: final
	subs map[int]func()
	next int
}

var _ sharding.Membership = (*leaseView)(nil)

func newLeaseView(inner sharding.Membership, expired func(context.Context, []cluster.UniqueAddress) ([]cluster.UniqueAddress, error)) *leaseView {
	return &leaseView{inner: inner, self: inner.Self().Node, expired: expired, gone: map[string]bool{}, subs: map[int]func(){}}
}

// Self implements sharding.Membership.
func (v *leaseView) Self() sharding.Member { return v.inner.Self() }

// Members implements sharding.Membership.
func (v *leaseView) Members() []sharding.Member {
	members := v.inner.Members()
	v.mu.Lock()
	defer v.mu.Unlock()
	for i, m := range members {
		if v.gone[m.Node] {
			members[i].Reachable = false
		}
	}
	return members
}

// Subscribe implements sharding.Membership: fn is called after every
// change of the gossip view and whenever a member's lease is newly seen
// expired.
func (v *leaseView) Subscribe(fn func()) func() {
	cancelInner := v.inner.Subscribe(fn)
	v.mu.Lock()
	id := v.next
	v.next++
	v.subs[id] = fn
	v.mu.Unlock()
	return func() {
		cancelInner()
		v.mu.Lock()
		delete(v.subs, id)
		v.mu.Unlock()
	}
}

// refresh asks the store which of the members the gossip view shows
// reachable have an expired lease, and tells the subscribers when that
// adds one. Members that left the view are forgotten.
func (v *leaseView) refresh(ctx context.Context) error {
	members := v.inner.Members()
	var ask []cluster.UniqueAddress
	inView := make(map[string]bool, len(members))
	v.mu.Lock()
	for _, m := range members {
		inView[m.Node] = true
		if m.Node == v.self || !m.Reachable || v.gone[m.Node] {
			continue
		}
		if a, err := remote.ParseNodeName(m.Node); err == nil {
			ask = append(ask, a)
		}
	}
	maps.DeleteFunc(v.gone, func(name string, _ bool) bool { return !inView[name] })
	v.mu.Unlock()
	if len(ask) == 0 {
		return nil
	}
	expired, err := v.expired(ctx, ask)
	if err != nil || len(expired) == 0 {
		return err
	}
	v.mu.Lock()
	for _, a := range expired {
		v.gone[remote.NodeName(a)] = true
	}
	subs := make([]func(), 0, len(v.subs))
	for _, fn := range v.subs {
		subs = append(subs, fn)
	}
	v.mu.Unlock()
	for _, fn := range subs {
		fn()
	}
	return nil
}

// run refreshes every interval until done is closed; each refresh is
// bounded by the interval, and a failed one is retried at the next.
func (v *leaseView) run(interval time.Duration, done <-chan struct{}) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), interval)
		_ = v.refresh(ctx) // the next tick retries; the lease itself is the guard
		cancel()
	}
}

// leasedTransport is the node's transport as sharding sees it: once the
// node no longer holds its lease by its own clock, nothing is sent and
// nothing received is handled. A node frozen past its lease (a pause, a
// stopped container) resumes with messages waiting in its sockets and
// overdue timers, and the goroutine that fences it may run last: until it
// does, a region would forward stale messages to the shards' new homes
// (out of order with what was sent there since) and entities would reply
// from a stale state. The holder fences the node at once after.
type leasedTransport struct {
	cluster.Transport
	holds func() bool
}

// Send implements cluster.Transport: ErrUnreachable, wrapping ErrFenced,
// once the lease is not held.
func (t leasedTransport) Send(to cluster.UniqueAddress, msg any) error {
	if !t.holds() {
		return fmt.Errorf("%w: %w: %s no longer holds its node lease", cluster.ErrUnreachable, ErrFenced, t.Self())
	}
	return t.Transport.Send(to, msg)
}

// handler wraps h: a message is dropped once the lease is not held.
func (t leasedTransport) handler(h cluster.Handler) cluster.Handler {
	return func(from cluster.UniqueAddress, msg any) {
		if t.holds() {
			h(from, msg)
		}
	}
}
