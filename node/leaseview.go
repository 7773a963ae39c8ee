package node

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/shoal-dev/shoal/cluster"
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
	inner     cluster.Membership
	self      cluster.UniqueAddress
	expired   expiredFunc
	dropAfter time.Duration
	now       func() time.Time
	cancel    func() // stops following inner

	// publish serializes the views published with their notifications, so
	// that subscribers see changes in order and Subscribe a consistent start.
	publish sync.Mutex

	mu      sync.Mutex
	gossip  cluster.View                        // inner's latest view
	told    bool                                // inner has told a change
	view    cluster.View                        // the latest view published: gossip filtered
	gone    map[cluster.UniqueAddress]time.Time // members whose lease expired (final) → when first seen so
	dropped map[cluster.UniqueAddress]bool      // those of gone left out of the view
	subs    map[int]func(cluster.Change)
	next    int
}

var _ cluster.Membership = (*leaseView)(nil)

// expiredFunc reports which of nodes hold a node lease that has expired
// in the store, and the time left on the first of the others' leases to
// end (0 when none is live, or unknown).
type expiredFunc func(ctx context.Context, nodes []cluster.UniqueAddress) (expired []cluster.UniqueAddress, next time.Duration, err error)

func newLeaseView(inner cluster.Membership, expired expiredFunc, dropAfter time.Duration, now func() time.Time) *leaseView {
	v := &leaseView{inner: inner, self: inner.Self(), expired: expired, dropAfter: dropAfter, now: now,
		gone: map[cluster.UniqueAddress]time.Time{}, dropped: map[cluster.UniqueAddress]bool{}, subs: map[int]func(cluster.Change){}}
	gossip, cancel := inner.Subscribe(func(c cluster.Change) { v.update(&c.To) })
	v.cancel = cancel
	v.mu.Lock()
	if !v.told { // else a change came first, newer than gossip
		v.gossip = gossip
		v.view = v.filterLocked(gossip)
	}
	v.mu.Unlock()
	return v
}

// Close stops following the gossip view.
func (v *leaseView) Close() { v.cancel() }

// Self implements cluster.Membership.
func (v *leaseView) Self() cluster.UniqueAddress { return v.self }

// View implements cluster.Membership.
func (v *leaseView) View() cluster.View {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.view
}

// Subscribe implements cluster.Membership: fn is called after every
// change of the gossip view and whenever a member's lease is newly seen
// expired or the member is dropped.
func (v *leaseView) Subscribe(fn func(cluster.Change)) (cluster.View, func()) {
	v.publish.Lock()
	defer v.publish.Unlock()
	v.mu.Lock()
	defer v.mu.Unlock()
	id := v.next
	v.next++
	v.subs[id] = fn
	return v.view, func() {
		v.mu.Lock()
		defer v.mu.Unlock()
		delete(v.subs, id)
	}
}

// filterLocked is gossip as sharding sees it: members seen expired are
// unreachable, those dropped are left out. v.mu is held.
func (v *leaseView) filterLocked(gossip cluster.View) cluster.View {
	out := gossip
	for _, m := range gossip.Members() {
		if v.dropped[m.Address] {
			out = out.Without(m.Address)
			continue
		}
		if _, gone := v.gone[m.Address]; gone && !m.Unreachable {
			m.Unreachable = true
			if next, err := out.With(m); err == nil {
				out = next
			}
		}
	}
	return out
}

// update publishes the view filtered from gossip (inner's newest when nil)
// and tells the subscribers what changed, if anything did.
func (v *leaseView) update(gossip *cluster.View) {
	v.publish.Lock()
	defer v.publish.Unlock()
	v.mu.Lock()
	if gossip != nil {
		v.gossip, v.told = *gossip, true
	}
	old := v.view
	v.view = v.filterLocked(v.gossip)
	cur := v.view
	subs := make([]func(cluster.Change), 0, len(v.subs))
	for _, id := range slices.Sorted(maps.Keys(v.subs)) {
		subs = append(subs, v.subs[id])
	}
	v.mu.Unlock()
	events := cluster.Diff(old, cur)
	if len(events) == 0 {
		return
	}
	for _, fn := range subs {
		fn(cluster.Change{From: old, To: cur, Events: events})
	}
}

// refresh asks the store which of the other members have an expired
// lease, drops those seen expired for dropAfter, and tells the subscribers
// when either changes the view. Members that left the gossip view are
// forgotten. next is the store's time left on the first live lease to end
// (0 when none, or unknown).
func (v *leaseView) refresh(ctx context.Context) (next time.Duration, err error) {
	v.mu.Lock()
	members := v.gossip.Members()
	var ask []cluster.UniqueAddress
	inView := make(map[cluster.UniqueAddress]bool, len(members))
	for _, m := range members {
		inView[m.Address] = true
		if _, gone := v.gone[m.Address]; m.Address == v.self || gone {
			continue
		}
		ask = append(ask, m.Address)
	}
	maps.DeleteFunc(v.gone, func(a cluster.UniqueAddress, _ time.Time) bool { return !inView[a] })
	maps.DeleteFunc(v.dropped, func(a cluster.UniqueAddress, _ bool) bool { return !inView[a] })
	v.mu.Unlock()
	var expired []cluster.UniqueAddress
	if len(ask) > 0 {
		expired, next, err = v.expired(ctx, ask)
	}
	now := v.now()
	v.mu.Lock()
	changed := false
	for _, a := range expired {
		v.gone[a] = now
		changed = true
	}
	for a, since := range v.gone {
		if !v.dropped[a] && now.Sub(since) >= v.dropAfter {
			v.dropped[a] = true
			changed = true
		}
	}
	v.mu.Unlock()
	if changed {
		v.update(nil)
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

// leased is ct as sharding sees it: a leasedTransport, which takes and
// hands over encoded messages too when ct does (tcp's, so that a tell
// crosses without being put in interface values).
func leased(ct cluster.Transport, holds func() bool) cluster.Transport {
	t := leasedTransport{Transport: ct, holds: holds}
	if e, ok := ct.(encodedTransport); ok {
		return leasedEncodedTransport{t, e}
	}
	return t
}

// Send implements cluster.Transport: ErrUnreachable, wrapping ErrFenced,
// once the lease is not held.
func (t leasedTransport) Send(to cluster.UniqueAddress, msg any) error {
	if err := t.fenced(); err != nil {
		return err
	}
	return t.Transport.Send(to, msg)
}

// fenced is the error of a send once the lease is not held.
func (t leasedTransport) fenced() error {
	if !t.holds() {
		return fmt.Errorf("%w: %w: %s no longer holds its node lease", cluster.ErrUnreachable, ErrFenced, t.Self())
	}
	return nil
}

// handler wraps h: a message is dropped once the lease is not held.
func (t leasedTransport) handler(h cluster.Handler) cluster.Handler {
	return func(from cluster.UniqueAddress, msg any) {
		if t.holds() {
			h(from, msg)
		}
	}
}

type encodedTransport interface {
	cluster.EncodedSender
	cluster.EncodedReceiver
}

// leasedEncodedTransport is a leasedTransport over a transport that takes
// and hands over encoded messages, under the same lease.
type leasedEncodedTransport struct {
	leasedTransport
	encoded encodedTransport
}

// SendEncoded implements cluster.EncodedSender as Send.
func (t leasedEncodedTransport) SendEncoded(to cluster.UniqueAddress, manifest string, payload []byte) error {
	if err := t.fenced(); err != nil {
		return err
	}
	return t.encoded.SendEncoded(to, manifest, payload)
}

// SendReply implements cluster.ReplySender as SendEncoded, on the
// transport's own way for replies when it has one.
func (t leasedEncodedTransport) SendReply(to cluster.UniqueAddress, manifest string, payload []byte) error {
	if err := t.fenced(); err != nil {
		return err
	}
	if r, ok := t.encoded.(cluster.ReplySender); ok {
		return r.SendReply(to, manifest, payload)
	}
	return t.encoded.SendEncoded(to, manifest, payload)
}

// HandleEncoded implements cluster.EncodedReceiver: h's messages are
// dropped once the lease is not held.
func (t leasedEncodedTransport) HandleEncoded(manifest string, h cluster.EncodedHandler) {
	if h == nil {
		t.encoded.HandleEncoded(manifest, nil)
		return
	}
	t.encoded.HandleEncoded(manifest, func(from cluster.UniqueAddress, payload []byte) error {
		if !t.holds() {
			return nil
		}
		return h(from, payload)
	})
}
