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
//
// dropAfter after the view first saw its lease expired, such a member is
// left out of the view altogether, as if it had left: memberlist keeps a
// crashed member Up and unreachable for minutes (its reconnect timeout),
// and sharding would show it, and wait on it, all that time
// (docs/DESIGN.md, Cluster and leases). By then the coordinator has long
// moved its shards.
type leaseView struct {
	inner     sharding.Membership
	self      string
	expired   expiredFunc
	dropAfter time.Duration
	now       func() time.Time

	mu      sync.Mutex
	gone    map[string]time.Time // members whose lease expired (final) → when first seen so
	dropped map[string]bool      // those of gone left out of Members
	subs    map[int]func()
	next    int
}

var _ sharding.Membership = (*leaseView)(nil)

// expiredFunc reports which of nodes hold a node lease that has expired
// in the store, and the time left on the first of the others' leases to
// end (0 when none is live, or unknown).
type expiredFunc func(ctx context.Context, nodes []cluster.UniqueAddress) (expired []cluster.UniqueAddress, next time.Duration, err error)

func newLeaseView(inner sharding.Membership, expired expiredFunc, dropAfter time.Duration, now func() time.Time) *leaseView {
	return &leaseView{inner: inner, self: inner.Self().Node, expired: expired, dropAfter: dropAfter, now: now,
		gone: map[string]time.Time{}, dropped: map[string]bool{}, subs: map[int]func(){}}
}

// Self implements sharding.Membership.
func (v *leaseView) Self() sharding.Member { return v.inner.Self() }

// Members implements sharding.Membership.
func (v *leaseView) Members() []sharding.Member {
	members := v.inner.Members()
	v.mu.Lock()
	defer v.mu.Unlock()
	out := make([]sharding.Member, 0, len(members))
	for _, m := range members {
		if v.dropped[m.Node] {
			continue
		}
		if _, gone := v.gone[m.Node]; gone {
			m.Reachable = false
		}
		out = append(out, m)
	}
	return out
}

// Subscribe implements sharding.Membership: fn is called after every
// change of the gossip view and whenever a member's lease is newly seen
// expired or the member is dropped.
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

// refresh asks the store which of the other members have an expired
// lease, drops those seen expired for dropAfter, and tells the subscribers
// when either changes the view. Members that left the gossip view are
// forgotten. next is the store's time left on the first live lease to end
// (0 when none, or unknown).
func (v *leaseView) refresh(ctx context.Context) (next time.Duration, err error) {
	members := v.inner.Members()
	var ask []cluster.UniqueAddress
	inView := make(map[string]bool, len(members))
	v.mu.Lock()
	for _, m := range members {
		inView[m.Node] = true
		if _, gone := v.gone[m.Node]; m.Node == v.self || gone {
			continue
		}
		if a, err := remote.ParseNodeName(m.Node); err == nil {
			ask = append(ask, a)
		}
	}
	maps.DeleteFunc(v.gone, func(name string, _ time.Time) bool { return !inView[name] })
	maps.DeleteFunc(v.dropped, func(name string, _ bool) bool { return !inView[name] })
	v.mu.Unlock()
	var expired []cluster.UniqueAddress
	if len(ask) > 0 {
		expired, next, err = v.expired(ctx, ask)
	}
	now := v.now()
	v.mu.Lock()
	changed := false
	for _, a := range expired {
		v.gone[remote.NodeName(a)] = now
		changed = true
	}
	for name, since := range v.gone {
		if !v.dropped[name] && now.Sub(since) >= v.dropAfter {
			v.dropped[name] = true
			changed = true
		}
	}
	var subs []func()
	if changed {
		for _, fn := range v.subs {
			subs = append(subs, fn)
		}
	}
	v.mu.Unlock()
	for _, fn := range subs {
		fn()
	}
	return next, err
}

// run refreshes until done is closed: every interval, and sooner when the
// first live lease ends sooner (a moment after its expiry), so that a
// crashed member is seen expired as soon as the store says so, not up to
// an interval later: that interval was a quarter of the failover's time
// (docs/DESIGN.md, "Leases and self-fencing"). Each refresh is bounded by
// the interval, and a failed one is retried at the next.
func (v *leaseView) run(interval time.Duration, done <-chan struct{}) {
	t := time.NewTimer(interval)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), interval)
		next, _ := v.refresh(ctx) // the next tick retries; the lease itself is the guard
		cancel()
		t.Reset(nextRefresh(interval, next))
	}
}

// nextRefresh is when to refresh again: after interval, or just after
// the first live lease's end when that comes sooner. The store's time
// runs on while the answer travels, so a moment after is enough; the
// floor keeps a lease about to end from making the view ask in a loop.
func nextRefresh(interval, next time.Duration) time.Duration {
	if next <= 0 {
		return interval
	}
	return min(interval, max(next+time.Millisecond, interval/50))
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
