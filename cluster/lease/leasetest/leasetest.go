// Package leasetest holds the conformance suite every lease.Store passes,
// driven by a fake clock so that expiry is tested without waiting:
//
//	func TestLeaseStoreConformance(t *testing.T) {
//		leasetest.Run(t, func(t *testing.T, clock *leasetest.Clock) lease.Store {
//			return lease.NewMemoryStore(clock.Now)
//		})
//	}
//
// The store must take its time from clock.Now: the memory store directly,
// the Postgres store by passing it to the server in place of its own
// clock (see cluster/lease/postgres). The constructor is called once per
// subtest; node ids and lease names are unique per subtest, so a store
// may be shared.
package leasetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/cluster/lease"
)

// Clock is a fake clock that only the suite moves. It starts at a whole
// second and moves in whole microseconds, the resolution of Postgres.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a clock at start.
func NewClock(start time.Time) *Clock { return &Clock{now: start.Truncate(time.Second)} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d (truncated to microseconds).
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d.Truncate(time.Microsecond))
}

const ttl = 10 * time.Second

type suite struct {
	t     *testing.T
	s     lease.Store
	clock *Clock
	ctx   context.Context
	id    string
}

func (su *suite) node(name string, inc uint64) cluster.UniqueAddress {
	return cluster.UniqueAddress{Node: su.id + "|" + name, Incarnation: inc}
}

func (su *suite) name(n string) string { return su.id + "|" + n }

func (su *suite) expired(node cluster.UniqueAddress) bool {
	su.t.Helper()
	exp, err := su.s.NodeLeaseExpired(su.ctx, node)
	if err != nil {
		su.t.Fatalf("NodeLeaseExpired(%s): %v", node, err)
	}
	return exp
}

func (su *suite) ok(what string, err error) {
	su.t.Helper()
	if err != nil {
		su.t.Fatalf("%s: %v", what, err)
	}
}

func (su *suite) is(what string, err, want error) {
	su.t.Helper()
	if !errors.Is(err, want) {
		su.t.Fatalf("%s: %v, want %v", what, err, want)
	}
}

// Run runs the lease.Store suite as subtests of t.
func Run(t *testing.T, newStore func(t *testing.T, clock *Clock) lease.Store) {
	tests := []struct {
		name string
		fn   func(su *suite)
	}{
		{"NodeLeaseExpiresAfterTTL", testNodeExpires},
		{"RenewalExtendsFromStoreTime", testRenewExtends},
		{"ExpiredNodeLeaseNeverComesBack", testExpiredNeverBack},
		{"DownedNodeCannotRenewButKeepsExpiry", testDown},
		{"DownBeforeAcquireBlocksIt", testDownUnknown},
		{"ReleaseExpiresAtOnce", testRelease},
		{"RenewalNeverCreatesALease", testNoLease},
		{"IncarnationsAreSeparate", testIncarnations},
		{"BadArguments", testBadArguments},
		{"CancelledContext", testCancelled},
		{"NodeConcurrentAcquireAndDown", testNodeConcurrent},
		{"PruneForgetsLongExpiredNodes", testPrune},
		{"CoordinatorLeaseHeldUntilExpiry", testCoordinatorHeld},
		{"CoordinatorRenewal", testCoordinatorRenew},
		{"CoordinatorSameOwnerNewEpoch", testCoordinatorSameOwner},
		{"CoordinatorRelease", testCoordinatorRelease},
		{"CoordinatorUnknown", testCoordinatorUnknown},
		{"CoordinatorConcurrentAcquire", testCoordinatorConcurrent},
		{"CoordinatorNamesIsolated", testCoordinatorIsolated},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clock := NewClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
			// The store first: making it may start a database server, which
			// must not eat into the operations' deadline.
			store := newStore(t, clock)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			t.Cleanup(cancel)
			tc.fn(&suite{t: t, s: store, clock: clock, ctx: ctx,
				id: fmt.Sprintf("%s-%d", tc.name, time.Now().UnixNano())})
		})
	}
}

func testNodeExpires(su *suite) {
	n := su.node("a", 1)
	su.ok("AcquireNode", su.s.AcquireNode(su.ctx, n, ttl))
	if su.expired(n) {
		su.t.Fatal("expired at once")
	}
	su.clock.Advance(ttl - time.Microsecond)
	if su.expired(n) {
		su.t.Fatal("expired 1µs before its ttl")
	}
	su.clock.Advance(time.Microsecond)
	if !su.expired(n) {
		su.t.Fatal("not expired at its ttl")
	}
}

func testRenewExtends(su *suite) {
	n := su.node("a", 1)
	su.ok("AcquireNode", su.s.AcquireNode(su.ctx, n, ttl))
	su.clock.Advance(6 * time.Second)
	su.ok("RenewNode", su.s.RenewNode(su.ctx, n, ttl))
	su.clock.Advance(ttl - time.Microsecond) // 6s + ttl − 1µs: past the first expiry
	if su.expired(n) {
		su.t.Fatal("expired before the renewed ttl ran out")
	}
	// Acquiring a held lease again extends it too (an acquisition whose
	// answer was lost can be retried).
	su.ok("AcquireNode again", su.s.AcquireNode(su.ctx, n, ttl))
	su.clock.Advance(ttl)
	if !su.expired(n) {
		su.t.Fatal("not expired after the last ttl")
	}
}

func testExpiredNeverBack(su *suite) {
	n := su.node("a", 1)
	su.ok("AcquireNode", su.s.AcquireNode(su.ctx, n, ttl))
	su.clock.Advance(ttl)
	su.is("RenewNode after expiry", su.s.RenewNode(su.ctx, n, ttl), lease.ErrLeaseExpired)
	su.is("AcquireNode after expiry", su.s.AcquireNode(su.ctx, n, ttl), lease.ErrLeaseExpired)
	if !su.expired(n) {
		su.t.Fatal("a refused renewal revived the lease")
	}
	// The node rejoins as a new incarnation.
	su.ok("AcquireNode of the next incarnation", su.s.AcquireNode(su.ctx, su.node("a", 2), ttl))
}

func testDown(su *suite) {
	n, other := su.node("a", 1), su.node("b", 1)
	su.ok("AcquireNode", su.s.AcquireNode(su.ctx, n, ttl))
	su.ok("AcquireNode other", su.s.AcquireNode(su.ctx, other, ttl))
	su.clock.Advance(time.Second)
	su.ok("DownNode", su.s.DownNode(su.ctx, n))
	su.ok("DownNode twice", su.s.DownNode(su.ctx, n))
	su.is("RenewNode of a downed node", su.s.RenewNode(su.ctx, n, ttl), lease.ErrNodeDown)
	su.is("AcquireNode of a downed node", su.s.AcquireNode(su.ctx, n, ttl), lease.ErrNodeDown)
	// Its shards wait for the lease to run out in store time.
	su.clock.Advance(ttl - time.Second - time.Microsecond)
	if su.expired(n) {
		su.t.Fatal("downing expired the lease early: its shards could move while it still runs them")
	}
	su.clock.Advance(time.Microsecond)
	if !su.expired(n) {
		su.t.Fatal("a downed node's lease did not expire at its ttl")
	}
	su.is("RenewNode after expiry", su.s.RenewNode(su.ctx, other, ttl), lease.ErrLeaseExpired)
}

func testDownUnknown(su *suite) {
	n := su.node("a", 1)
	su.ok("DownNode of an unknown incarnation", su.s.DownNode(su.ctx, n))
	su.is("AcquireNode after being downed", su.s.AcquireNode(su.ctx, n, ttl), lease.ErrNodeDown)
	if !su.expired(n) {
		su.t.Fatal("a node downed before it acquired holds a lease")
	}
}

func testRelease(su *suite) {
	n := su.node("a", 1)
	su.ok("AcquireNode", su.s.AcquireNode(su.ctx, n, ttl))
	su.ok("ReleaseNode", su.s.ReleaseNode(su.ctx, n))
	if !su.expired(n) {
		su.t.Fatal("a released lease has not expired")
	}
	su.is("RenewNode after release", su.s.RenewNode(su.ctx, n, ttl), lease.ErrNodeDown)
	su.ok("ReleaseNode twice", su.s.ReleaseNode(su.ctx, n))
	// Releasing after downing (the coordinator was first) still expires it now.
	m := su.node("b", 1)
	su.ok("AcquireNode", su.s.AcquireNode(su.ctx, m, ttl))
	su.ok("DownNode", su.s.DownNode(su.ctx, m))
	su.ok("ReleaseNode", su.s.ReleaseNode(su.ctx, m))
	if !su.expired(m) {
		su.t.Fatal("release after down did not expire the lease")
	}
}

func testNoLease(su *suite) {
	n := su.node("a", 1)
	su.is("RenewNode without a lease", su.s.RenewNode(su.ctx, n, ttl), lease.ErrNoLease)
	_, err := su.s.NodeLeaseExpired(su.ctx, n)
	su.is("NodeLeaseExpired without a lease", err, lease.ErrNoLease)
	su.ok("AcquireNode", su.s.AcquireNode(su.ctx, n, ttl))
	if su.expired(n) {
		su.t.Fatal("a refused renewal left an expired lease behind")
	}
}

func testIncarnations(su *suite) {
	a1, a2, a3 := su.node("a", 1), su.node("a", 2), su.node("a", 3)
	su.ok("AcquireNode a#1", su.s.AcquireNode(su.ctx, a1, ttl))
	su.ok("AcquireNode a#3", su.s.AcquireNode(su.ctx, a3, ttl))
	su.is("AcquireNode a#2 after a#3", su.s.AcquireNode(su.ctx, a2, ttl), cluster.ErrStaleIncarnation)
	su.ok("DownNode a#1", su.s.DownNode(su.ctx, a1))
	su.ok("RenewNode a#3", su.s.RenewNode(su.ctx, a3, ttl))
	// An older incarnation already holding a lease keeps renewing it: only
	// the coordinator downs it.
	su.ok("AcquireNode b#2", su.s.AcquireNode(su.ctx, su.node("b", 2), ttl))
	su.ok("AcquireNode b#5", su.s.AcquireNode(su.ctx, su.node("b", 5), ttl))
	su.ok("RenewNode b#2", su.s.RenewNode(su.ctx, su.node("b", 2), ttl))
	// Downing an unknown, newer incarnation counts as knowing it.
	su.ok("DownNode c#4", su.s.DownNode(su.ctx, su.node("c", 4)))
	su.is("AcquireNode c#3 after c#4 was downed", su.s.AcquireNode(su.ctx, su.node("c", 3), ttl), cluster.ErrStaleIncarnation)
}

// testPrune: PruneNodes forgets leases expired more than olderThan ago,
// keeping the newest incarnation of a node id, down, so that an older one
// still cannot acquire; live leases and recent expiries are left alone.
func testPrune(su *suite) {
	p, ok := su.s.(lease.NodePruner)
	if !ok {
		su.t.Skip("the store does not implement lease.NodePruner")
	}
	old, newer, lone, live := su.node("p", 1), su.node("p", 2), su.node("r", 1), su.node("q", 1)
	for _, n := range []cluster.UniqueAddress{old, newer, lone} {
		su.ok("acquire", su.s.AcquireNode(su.ctx, n, time.Second))
	}
	su.ok("acquire live", su.s.AcquireNode(su.ctx, live, time.Hour))
	su.clock.Advance(30 * time.Second)
	if _, err := p.PruneNodes(su.ctx, time.Minute); err != nil {
		su.t.Fatalf("prune: %v", err)
	}
	if !su.expired(old) || !su.expired(newer) || !su.expired(lone) {
		su.t.Fatalf("leases expired 29 s ago were pruned with olderThan 1 min")
	}
	su.clock.Advance(time.Minute)
	n, err := p.PruneNodes(su.ctx, time.Minute)
	if err != nil || n < 3 {
		su.t.Fatalf("prune: %d changed, %v; want at least 3 (p#1 deleted, p#2 and r#1 downed)", n, err)
	}
	_, err = su.s.NodeLeaseExpired(su.ctx, old)
	su.is("expired? after prune, the older incarnation", err, lease.ErrNoLease)
	su.is("renew after prune, the older incarnation", su.s.RenewNode(su.ctx, old, time.Second), lease.ErrNoLease)
	su.is("acquire after prune, the older incarnation", su.s.AcquireNode(su.ctx, old, time.Second), lease.ErrStaleIncarnation)
	for _, n := range []cluster.UniqueAddress{newer, lone} {
		if !su.expired(n) {
			su.t.Fatalf("%s: the newest incarnation is kept, expired", n)
		}
		su.is("renew after prune, the newest incarnation", su.s.RenewNode(su.ctx, n, time.Second), lease.ErrNodeDown)
		su.is("acquire after prune, the newest incarnation", su.s.AcquireNode(su.ctx, n, time.Second), lease.ErrNodeDown)
	}
	su.ok("renew the live lease after prune", su.s.RenewNode(su.ctx, live, time.Hour))
	if _, err := p.PruneNodes(su.ctx, -time.Second); !errors.Is(err, lease.ErrInvalidConfig) {
		su.t.Fatalf("prune with a negative age: %v, want ErrInvalidConfig", err)
	}
}

func testBadArguments(su *suite) {
	n := su.node("a", 1)
	empty := cluster.UniqueAddress{Incarnation: 1}
	for what, err := range map[string]error{
		"AcquireNode empty node":    su.s.AcquireNode(su.ctx, empty, ttl),
		"AcquireNode zero ttl":      su.s.AcquireNode(su.ctx, n, 0),
		"AcquireNode negative ttl":  su.s.AcquireNode(su.ctx, n, -time.Second),
		"RenewNode zero ttl":        su.s.RenewNode(su.ctx, n, 0),
		"DownNode empty node":       su.s.DownNode(su.ctx, empty),
		"ReleaseNode empty node":    su.s.ReleaseNode(su.ctx, empty),
		"RenewCoordinator no name":  su.s.RenewCoordinator(su.ctx, "", 1, ttl),
		"RenewCoordinator zero ttl": su.s.RenewCoordinator(su.ctx, su.name("c"), 1, 0),
		"ReleaseCoordinator noname": su.s.ReleaseCoordinator(su.ctx, "", 1),
	} {
		su.is(what, err, cluster.ErrInvalidConfig)
	}
	_, err := su.s.NodeLeaseExpired(su.ctx, empty)
	su.is("NodeLeaseExpired empty node", err, cluster.ErrInvalidConfig)
	for what, args := range map[string][2]string{"no name": {"", "o"}, "no owner": {su.name("c"), ""}} {
		_, err := su.s.AcquireCoordinator(su.ctx, args[0], args[1], ttl)
		su.is("AcquireCoordinator "+what, err, cluster.ErrInvalidConfig)
	}
	_, err = su.s.AcquireCoordinator(su.ctx, su.name("c"), "o", 0)
	su.is("AcquireCoordinator zero ttl", err, cluster.ErrInvalidConfig)
	// Nothing was written.
	_, err = su.s.NodeLeaseExpired(su.ctx, n)
	su.is("NodeLeaseExpired after refused calls", err, lease.ErrNoLease)
	su.is("RenewCoordinator after refused calls", su.s.RenewCoordinator(su.ctx, su.name("c"), 1, ttl), lease.ErrNoLease)
}

func testCancelled(su *suite) {
	ctx, cancel := context.WithCancel(su.ctx)
	cancel()
	n := su.node("a", 1)
	su.is("AcquireNode", su.s.AcquireNode(ctx, n, ttl), context.Canceled)
	su.is("DownNode", su.s.DownNode(ctx, n), context.Canceled)
	_, err := su.s.AcquireCoordinator(ctx, su.name("c"), "o", ttl)
	su.is("AcquireCoordinator", err, context.Canceled)
	_, err = su.s.NodeLeaseExpired(su.ctx, n)
	su.is("NodeLeaseExpired after cancelled calls", err, lease.ErrNoLease)
	su.is("RenewCoordinator after cancelled calls", su.s.RenewCoordinator(su.ctx, su.name("c"), 1, ttl), lease.ErrNoLease)
}

// Racing acquisitions of one incarnation all get the lease (a retried
// acquisition extends it); an acquisition racing a down either wins and is
// downed after, or is refused: the incarnation ends down either way.
func testNodeConcurrent(su *suite) {
	const racers = 8
	n := su.node("a", 1)
	errs := make([]error, racers)
	var wg sync.WaitGroup
	for i := range racers {
		wg.Go(func() { errs[i] = su.s.AcquireNode(su.ctx, n, ttl) })
	}
	wg.Wait()
	for i, err := range errs {
		su.ok(fmt.Sprintf("racing AcquireNode %d", i), err)
	}
	if su.expired(n) {
		su.t.Fatal("expired after racing acquisitions")
	}
	for i := range racers {
		m := su.node(fmt.Sprint("b", i), 1)
		var acqErr, downErr error
		wg.Go(func() { acqErr = su.s.AcquireNode(su.ctx, m, ttl) })
		wg.Go(func() { downErr = su.s.DownNode(su.ctx, m) })
		wg.Wait()
		su.ok("racing DownNode", downErr)
		if acqErr != nil && !errors.Is(acqErr, lease.ErrNodeDown) {
			su.t.Fatalf("AcquireNode racing DownNode: %v, want nil or ErrNodeDown", acqErr)
		}
		su.is("RenewNode after the race", su.s.RenewNode(su.ctx, m, ttl), lease.ErrNodeDown)
	}
}

func (su *suite) acquire(name, owner string) uint64 {
	su.t.Helper()
	epoch, err := su.s.AcquireCoordinator(su.ctx, name, owner, ttl)
	if err != nil {
		su.t.Fatalf("AcquireCoordinator(%s, %s): %v", name, owner, err)
	}
	return epoch
}

func testCoordinatorHeld(su *suite) {
	c := su.name("coord")
	e1 := su.acquire(c, "a#1")
	if e1 == 0 {
		su.t.Fatal("epoch 0 handed out")
	}
	_, err := su.s.AcquireCoordinator(su.ctx, c, "b#1", ttl)
	su.is("AcquireCoordinator while held", err, lease.ErrLeaseHeld)
	if left, ok := lease.HeldFor(err); !ok || left != ttl {
		su.t.Fatalf("AcquireCoordinator while held: %v left (%v), want %v", left, ok, ttl)
	}
	su.clock.Advance(ttl - time.Microsecond)
	_, err = su.s.AcquireCoordinator(su.ctx, c, "b#1", ttl)
	su.is("AcquireCoordinator 1µs before expiry", err, lease.ErrLeaseHeld)
	if left, _ := lease.HeldFor(err); left != time.Microsecond {
		su.t.Fatalf("AcquireCoordinator 1µs before expiry: %v left, want 1µs", left)
	}
	su.clock.Advance(time.Microsecond)
	e2 := su.acquire(c, "b#1")
	if e2 <= e1 {
		su.t.Fatalf("takeover epoch %d, not above %d", e2, e1)
	}
	su.is("RenewCoordinator of the old holder", su.s.RenewCoordinator(su.ctx, c, e1, ttl), lease.ErrStaleEpoch)
	su.is("ReleaseCoordinator of the old holder", su.s.ReleaseCoordinator(su.ctx, c, e1), lease.ErrStaleEpoch)
	// The stale holder's calls changed nothing.
	_, err = su.s.AcquireCoordinator(su.ctx, c, "a#1", ttl)
	su.is("AcquireCoordinator by the old holder", err, lease.ErrLeaseHeld)
}

func testCoordinatorRenew(su *suite) {
	c := su.name("coord")
	e := su.acquire(c, "a#1")
	su.clock.Advance(6 * time.Second)
	su.ok("RenewCoordinator", su.s.RenewCoordinator(su.ctx, c, e, ttl))
	su.clock.Advance(ttl - time.Microsecond)
	_, err := su.s.AcquireCoordinator(su.ctx, c, "b#1", ttl)
	su.is("AcquireCoordinator within the renewed ttl", err, lease.ErrLeaseHeld)
	su.clock.Advance(time.Microsecond)
	su.is("RenewCoordinator after expiry", su.s.RenewCoordinator(su.ctx, c, e, ttl), lease.ErrLeaseExpired)
	// Expired and not renewed: another owner may take it.
	if e2 := su.acquire(c, "b#1"); e2 <= e {
		su.t.Fatalf("epoch %d after %d", e2, e)
	}
}

func testCoordinatorSameOwner(su *suite) {
	c := su.name("coord")
	e1 := su.acquire(c, "a#1")
	e2 := su.acquire(c, "a#1")
	if e2 <= e1 {
		su.t.Fatalf("re-acquisition epoch %d, not above %d", e2, e1)
	}
	su.is("RenewCoordinator under the old epoch", su.s.RenewCoordinator(su.ctx, c, e1, ttl), lease.ErrStaleEpoch)
	su.ok("RenewCoordinator under the new epoch", su.s.RenewCoordinator(su.ctx, c, e2, ttl))
	su.is("RenewCoordinator under an epoch never issued", su.s.RenewCoordinator(su.ctx, c, e2+1, ttl), lease.ErrStaleEpoch)
}

func testCoordinatorRelease(su *suite) {
	c := su.name("coord")
	e := su.acquire(c, "a#1")
	su.ok("ReleaseCoordinator", su.s.ReleaseCoordinator(su.ctx, c, e))
	su.is("RenewCoordinator after release", su.s.RenewCoordinator(su.ctx, c, e, ttl), lease.ErrLeaseExpired)
	if e2 := su.acquire(c, "b#1"); e2 <= e {
		su.t.Fatalf("epoch %d after %d", e2, e)
	}
}

func testCoordinatorUnknown(su *suite) {
	c := su.name("never")
	su.is("RenewCoordinator", su.s.RenewCoordinator(su.ctx, c, 1, ttl), lease.ErrNoLease)
	su.is("ReleaseCoordinator", su.s.ReleaseCoordinator(su.ctx, c, 1), lease.ErrNoLease)
}

func testCoordinatorConcurrent(su *suite) {
	const owners = 8
	c := su.name("coord")
	var wg sync.WaitGroup
	epochs := make([]uint64, owners)
	errs := make([]error, owners)
	for i := range owners {
		wg.Go(func() {
			epochs[i], errs[i] = su.s.AcquireCoordinator(su.ctx, c, fmt.Sprintf("n%d#1", i), ttl)
		})
	}
	wg.Wait()
	winners := 0
	for i, err := range errs {
		switch {
		case err == nil:
			winners++
			su.ok("RenewCoordinator by the winner", su.s.RenewCoordinator(su.ctx, c, epochs[i], ttl))
		case !errors.Is(err, lease.ErrLeaseHeld):
			su.t.Errorf("owner %d: %v, want nil or ErrLeaseHeld", i, err)
		}
	}
	if winners != 1 {
		su.t.Fatalf("%d owners acquired one unexpired lease, want 1", winners)
	}
}

func testCoordinatorIsolated(su *suite) {
	x, y := su.name("x"), su.name("y")
	ex := su.acquire(x, "a#1")
	ey := su.acquire(y, "b#1")
	su.ok("ReleaseCoordinator x", su.s.ReleaseCoordinator(su.ctx, x, ex))
	_, err := su.s.AcquireCoordinator(su.ctx, y, "c#1", ttl)
	su.is("AcquireCoordinator y after x was released", err, lease.ErrLeaseHeld)
	su.ok("RenewCoordinator y", su.s.RenewCoordinator(su.ctx, y, ey, ttl))
}
