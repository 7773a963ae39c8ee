// Package shardingtest holds the conformance suites every
// sharding.CoordinatorStore and sharding.RememberStore implementation passes.
//
//	func TestCoordinatorStoreConformance(t *testing.T) {
//		shardingtest.RunCoordinatorStore(t, func(t *testing.T, clock *leasetest.Clock) sharding.CoordinatorStore {
//			return sharding.NewMemoryCoordinatorStoreAt(clock.Now)
//		})
//	}
//
// The constructor is called once per subtest; it may return a fresh store or
// a shared one (every subtest uses type names of its own), and it registers
// any cleanup with t.Cleanup. A CoordinatorStore takes the time of its
// leases from clock, which only the suite moves, so that expiry is tested
// without waiting.
package shardingtest

import (
	"context"
	"errors"
	"fmt"
	"github.com/shoal-dev/shoal/cluster"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/cluster/lease/leasetest"
	"github.com/shoal-dev/shoal/sharding"
)

// names scopes type names to one subtest so that stores may be shared.
type names func(string) string

func run[S any](t *testing.T, newStore func(t *testing.T) S, tests []struct {
	name string
	fn   func(t *testing.T, s S, typ names)
}) {
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t)
			prefix := fmt.Sprintf("%s-%d", tc.name, time.Now().UnixNano())
			tc.fn(t, s, func(n string) string { return prefix + "|" + n })
		})
	}
}

func ctxFor(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// ttl is the coordinator lease length the suite acquires with.
const ttl = 10 * time.Second

// coordStore is a store under test with the clock of its leases.
type coordStore struct {
	sharding.CoordinatorStore
	clock *leasetest.Clock
}

// expire lets every lease the subtest handed out run out.
func (s coordStore) expire() { s.clock.Advance(ttl) }

// RunCoordinatorStore runs the CoordinatorStore suite as subtests of t.
func RunCoordinatorStore(t *testing.T, newStore func(t *testing.T, clock *leasetest.Clock) sharding.CoordinatorStore) {
	run(t, func(t *testing.T) coordStore {
		clock := leasetest.NewClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
		return coordStore{CoordinatorStore: newStore(t, clock), clock: clock}
	}, []struct {
		name string
		fn   func(t *testing.T, s coordStore, typ names)
	}{
		{"LeaseHeldUntilExpiry", testLeaseHeld},
		{"LeaseRenewal", testLeaseRenewal},
		{"LeaseRelease", testLeaseRelease},
		{"TwoWouldBeCoordinators", testTwoWouldBeCoordinators},
		{"FirstAcquire", testFirstAcquire},
		{"EpochsIncrease", testEpochsIncrease},
		{"WritesVisibleToNextAcquire", testWritesVisible},
		{"AcquiredMapIsACopy", testAcquiredMapIsACopy},
		{"StaleEpochChangesNothing", testStaleEpoch},
		{"UnknownEpochRejected", testUnknownEpoch},
		{"WriteWithoutLeaseRejected", testWriteWithoutLease},
		{"TypeIsolation", testCoordinatorIsolation},
		{"ConcurrentAcquire", testConcurrentAcquire},
		{"TakeoverDuringWrites", testTakeoverDuringWrites},
		{"CancelledContext", testCoordinatorCancelled},
		{"UpdateAppliesInOrder", testUpdateInOrder},
		{"UpdateStaleEpochWritesNothing", testUpdateStale},
		{"UpdateWithoutLeaseRejected", testUpdateWithoutLease},
		{"MailHolderStoredWithDeallocation", testMailHolder},
		{"MailHolderStaleEpochWritesNothing", testMailHolderStale},
	})
}

// acquire acquires typ's lease for owner and returns what is stored of
// each shard as described does.
func acquire(t *testing.T, s coordStore, typ, owner string) (uint64, map[string]string) {
	t.Helper()
	epoch, shards, err := s.Acquire(ctxFor(t), typ, node(owner), ttl)
	if err != nil {
		t.Fatalf("Acquire(%q, %q): %v", typ, owner, err)
	}
	return epoch, described(shards)
}

// described writes each stored shard as its home, followed by "mail@" and
// the region holding its mail if one does, so that suites compare plain
// maps.
func described(shards map[string]sharding.Allocation) map[string]string {
	out := make(map[string]string, len(shards))
	for shard, a := range shards {
		switch {
		case a.MailHeldBy.IsZero():
			out[shard] = name(a.Region)
		case a.Region.IsZero():
			out[shard] = "mail@" + name(a.MailHeldBy)
		default:
			out[shard] = name(a.Region) + " mail@" + name(a.MailHeldBy)
		}
	}
	return out
}

func allocate(t *testing.T, s coordStore, typ string, epoch uint64, shard, region string) {
	t.Helper()
	if err := s.Allocate(ctxFor(t), typ, epoch, shard, node(region)); err != nil {
		t.Fatalf("Allocate(%q, %d, %q, %q): %v", typ, epoch, shard, region, err)
	}
}

func deallocate(t *testing.T, s coordStore, typ string, epoch uint64, shard string) {
	t.Helper()
	if err := s.Deallocate(ctxFor(t), typ, epoch, shard); err != nil {
		t.Fatalf("Deallocate(%q, %d, %q): %v", typ, epoch, shard, err)
	}
}

// takeOver lets the current lease expire, then acquires it for owner.
func takeOver(t *testing.T, s coordStore, typ, owner string) (uint64, map[string]string) {
	t.Helper()
	s.expire()
	return acquire(t, s, typ, owner)
}

func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: err %v, want %v", what, err, want)
	}
}

// Another owner cannot take an unexpired lease; once it expired (in the
// store's time) it can, and the old holder's renewals, releases and
// writes are refused as stale.
func testLeaseHeld(t *testing.T, s coordStore, typ names) {
	ctx := ctxFor(t)
	e1, _ := acquire(t, s, typ("T"), "a#1")
	allocate(t, s, typ("T"), e1, "s1", "a")
	_, _, err := s.Acquire(ctx, typ("T"), node("b#1"), ttl)
	wantErr(t, "Acquire while held", err, sharding.ErrLeaseHeld)
	s.clock.Advance(ttl - time.Microsecond)
	_, _, err = s.Acquire(ctx, typ("T"), node("b#1"), ttl)
	wantErr(t, "Acquire 1µs before expiry", err, sharding.ErrLeaseHeld)
	// The refused acquisitions changed nothing: the holder still writes.
	allocate(t, s, typ("T"), e1, "s2", "a")
	s.clock.Advance(time.Microsecond)
	e2, shards := acquire(t, s, typ("T"), "b#1")
	if e2 <= e1 {
		t.Fatalf("takeover epoch %d, not above %d", e2, e1)
	}
	wantShards(t, "taken over", shards, map[string]string{"s1": "a", "s2": "a"})
	wantStale(t, "Renew by the old holder", s.Renew(ctx, typ("T"), e1, ttl))
	wantStale(t, "Release by the old holder", s.Release(ctx, typ("T"), e1))
	wantStale(t, "Allocate by the old holder", s.Allocate(ctx, typ("T"), e1, "s3", node("a")))
	wantStale(t, "Deallocate by the old holder", s.Deallocate(ctx, typ("T"), e1, "s1"))
	_, _, err = s.Acquire(ctx, typ("T"), node("a#1"), ttl)
	wantErr(t, "Acquire by the old holder", err, sharding.ErrLeaseHeld)
	allocate(t, s, typ("T"), e2, "s3", "b")
}

// A renewal extends the lease from the store's time; once it expired, a
// renewal is refused and the holder must acquire again.
func testLeaseRenewal(t *testing.T, s coordStore, typ names) {
	ctx := ctxFor(t)
	e, _ := acquire(t, s, typ("T"), "a#1")
	s.clock.Advance(6 * time.Second)
	if err := s.Renew(ctx, typ("T"), e, ttl); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	s.clock.Advance(ttl - time.Microsecond)
	_, _, err := s.Acquire(ctx, typ("T"), node("b#1"), ttl)
	wantErr(t, "Acquire within the renewed lease", err, sharding.ErrLeaseHeld)
	s.clock.Advance(time.Microsecond)
	wantErr(t, "Renew after expiry", s.Renew(ctx, typ("T"), e, ttl), sharding.ErrLeaseExpired)
	wantStale(t, "Renew under an epoch never issued", s.Renew(ctx, typ("T"), e+1, ttl))
	// The same owner may acquire again at once, under a new epoch that
	// fences its earlier self.
	e2, _ := acquire(t, s, typ("T"), "a#1")
	e3, _ := acquire(t, s, typ("T"), "a#1")
	if e2 <= e || e3 <= e2 {
		t.Fatalf("epochs %d, %d, %d do not increase", e, e2, e3)
	}
	wantStale(t, "Renew under the superseded epoch", s.Renew(ctx, typ("T"), e2, ttl))
	wantStale(t, "Allocate under the superseded epoch", s.Allocate(ctx, typ("T"), e2, "s1", node("a")))
	if err := s.Renew(ctx, typ("T"), e3, ttl); err != nil {
		t.Fatalf("Renew under the newest epoch: %v", err)
	}
}

// A released lease can be taken at once; a renewal of it is refused.
func testLeaseRelease(t *testing.T, s coordStore, typ names) {
	ctx := ctxFor(t)
	e, _ := acquire(t, s, typ("T"), "a#1")
	allocate(t, s, typ("T"), e, "s1", "a")
	if err := s.Release(ctx, typ("T"), e); err != nil {
		t.Fatalf("Release: %v", err)
	}
	wantErr(t, "Renew after Release", s.Renew(ctx, typ("T"), e, ttl), sharding.ErrLeaseExpired)
	e2, shards := acquire(t, s, typ("T"), "b#1")
	if e2 <= e {
		t.Fatalf("epoch %d after %d", e2, e)
	}
	wantShards(t, "after a release", shards, map[string]string{"s1": "a"})
}

// Two would-be coordinators (two nodes whose views both say they are the
// oldest) race for the lease: exactly one acts; the other is refused
// until the lease expires, and a write with the epoch it had before is
// refused as stale.
func testTwoWouldBeCoordinators(t *testing.T, s coordStore, typ names) {
	ctx := ctxFor(t)
	// b coordinated before; its lease expired (a long pause).
	stale, _ := acquire(t, s, typ("T"), "b#1")
	s.expire()
	owners := []string{"a#1", "b#1"}
	epochs := make([]uint64, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i, o := range owners {
		wg.Go(func() { epochs[i], _, errs[i] = s.Acquire(ctx, typ("T"), node(o), ttl) })
	}
	wg.Wait()
	winner, loser := 0, 1
	if errs[0] != nil {
		winner, loser = 1, 0
	}
	if errs[winner] != nil {
		t.Fatalf("neither acquired: %v", errs)
	}
	wantErr(t, owners[loser]+"'s Acquire", errs[loser], sharding.ErrLeaseHeld)
	allocate(t, s, typ("T"), epochs[winner], "s1", owners[winner])
	wantStale(t, "a write under b's expired epoch", s.Allocate(ctx, typ("T"), stale, "s1", node("b#1")))
	wantStale(t, "a renewal of b's expired epoch", s.Renew(ctx, typ("T"), stale, ttl))
}

// wantShards compares allocations; an empty result may be nil.
func wantShards(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	if len(got) == 0 && len(want) == 0 {
		return
	}
	if maps.Equal(got, want) {
		return
	}
	// Takeover rounds compare hundreds of shards: report only the difference.
	var diff []string
	for _, k := range slices.Sorted(maps.Keys(got)) {
		if w, ok := want[k]; !ok || w != got[k] {
			diff = append(diff, fmt.Sprintf("%s: got %q, want %q (present %v)", k, got[k], w, ok))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if _, ok := got[k]; !ok {
			diff = append(diff, fmt.Sprintf("%s: missing, want %q", k, want[k]))
		}
	}
	t.Fatalf("%s: %d allocations, want %d; differences:\n%s", what, len(got), len(want), strings.Join(diff, "\n"))
}

func wantStale(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, sharding.ErrStaleEpoch) {
		t.Fatalf("%s: err %v, want ErrStaleEpoch", what, err)
	}
}

func testFirstAcquire(t *testing.T, s coordStore, typ names) {
	epoch, shards := acquire(t, s, typ("T"), "node-a")
	// Zero is the epoch of no coordinator at all.
	if epoch == 0 {
		t.Fatal("first Acquire returned epoch 0")
	}
	wantShards(t, "first Acquire", shards, nil)
}

func testEpochsIncrease(t *testing.T, s coordStore, typ names) {
	var last uint64
	// The same owner acquiring again (a restarted coordinator) gets a new
	// epoch too: its previous incarnation must be fenced off.
	for i, owner := range []string{"node-a", "node-a", "node-b", "node-a", "node-c"} {
		if i > 1 {
			s.expire() // another owner held it
		}
		epoch, _ := acquire(t, s, typ("T"), owner)
		if epoch <= last {
			t.Fatalf("Acquire %d by %s: epoch %d, not above %d", i, owner, epoch, last)
		}
		last = epoch
	}
}

func testWritesVisible(t *testing.T, s coordStore, typ names) {
	e1, _ := acquire(t, s, typ("T"), "node-a")
	allocate(t, s, typ("T"), e1, "s1", "region-a")
	allocate(t, s, typ("T"), e1, "s2", "region-a")
	allocate(t, s, typ("T"), e1, "s3", "region-b")
	allocate(t, s, typ("T"), e1, "s2", "region-c") // a move overwrites
	deallocate(t, s, typ("T"), e1, "s3")
	deallocate(t, s, typ("T"), e1, "never-allocated") // not an error
	deallocate(t, s, typ("T"), e1, "s3")              // idempotent

	e2, shards := takeOver(t, s, typ("T"), "node-b")
	wantShards(t, "after writes", shards, map[string]string{"s1": "region-a", "s2": "region-c"})

	// The new coordinator's writes build on the old ones.
	allocate(t, s, typ("T"), e2, "s3", "region-b")
	deallocate(t, s, typ("T"), e2, "s1")
	_, shards = takeOver(t, s, typ("T"), "node-a")
	wantShards(t, "after the successor's writes", shards, map[string]string{"s2": "region-c", "s3": "region-b"})
}

func testAcquiredMapIsACopy(t *testing.T, s coordStore, typ names) {
	e, _ := acquire(t, s, typ("T"), "node-a")
	allocate(t, s, typ("T"), e, "s1", "region-a")
	_, shards := acquire(t, s, typ("T"), "node-a")
	shards["s1"] = "mutated"
	shards["s9"] = "mutated"
	_, shards = acquire(t, s, typ("T"), "node-a")
	wantShards(t, "after mutating a returned map", shards, map[string]string{"s1": "region-a"})
}

func testStaleEpoch(t *testing.T, s coordStore, typ names) {
	ctx := ctxFor(t)
	old, _ := acquire(t, s, typ("T"), "node-a")
	allocate(t, s, typ("T"), old, "s1", "region-a")
	allocate(t, s, typ("T"), old, "s2", "region-a")
	cur, _ := takeOver(t, s, typ("T"), "node-b")

	wantStale(t, "Allocate new shard with the old epoch", s.Allocate(ctx, typ("T"), old, "s3", node("region-a")))
	wantStale(t, "Allocate moving a shard with the old epoch", s.Allocate(ctx, typ("T"), old, "s1", node("region-x")))
	wantStale(t, "Deallocate with the old epoch", s.Deallocate(ctx, typ("T"), old, "s2"))

	// The current coordinator still writes; the deposed one still cannot.
	allocate(t, s, typ("T"), cur, "s4", "region-b")
	wantStale(t, "Allocate with the old epoch after the new one wrote", s.Allocate(ctx, typ("T"), old, "s4", node("region-a")))

	_, shards := takeOver(t, s, typ("T"), "node-c")
	wantShards(t, "after stale writes", shards, map[string]string{"s1": "region-a", "s2": "region-a", "s4": "region-b"})
}

func update(t *testing.T, s coordStore, typ string, epoch uint64, changes ...sharding.AllocationChange) {
	t.Helper()
	if err := s.Update(ctxFor(t), typ, epoch, changes); err != nil {
		t.Fatalf("Update(%q, %d, %v): %v", typ, epoch, changes, err)
	}
}

// A batch applies its changes in order: a shard deallocated then
// allocated ends allocated, one allocated then deallocated ends gone, the
// last of two moves wins.
func testUpdateInOrder(t *testing.T, s coordStore, typ names) {
	e, _ := acquire(t, s, typ("T"), "node-a")
	allocate(t, s, typ("T"), e, "s1", "region-a")
	allocate(t, s, typ("T"), e, "s2", "region-a")
	update(t, s, typ("T"), e,
		sharding.AllocationChange{Shard: "s1"},
		sharding.AllocationChange{Shard: "s1", Region: node("region-b")},
		sharding.AllocationChange{Shard: "s2", Region: node("region-b")},
		sharding.AllocationChange{Shard: "s2"},
		sharding.AllocationChange{Shard: "s3", Region: node("region-a")},
		sharding.AllocationChange{Shard: "s3", Region: node("region-c")},
	)
	update(t, s, typ("T"), e) // an empty batch is no error
	_, shards := takeOver(t, s, typ("T"), "node-b")
	wantShards(t, "after a batch", shards, map[string]string{"s1": "region-b", "s3": "region-c"})
}

// A change may name the region holding the shard's mail, with or without
// a home: the next Acquire returns it, and a change naming none forgets
// it (Allocate and Deallocate name none). A shard with neither a home nor
// a holder is forgotten. In a batch the last change of a shard wins.
func testMailHolder(t *testing.T, s coordStore, typ names) {
	ctx := ctxFor(t)
	e, _ := acquire(t, s, typ("T"), "node-a")
	for _, shard := range []string{"s1", "s2", "s3", "s4", "s5"} {
		allocate(t, s, typ("T"), e, shard, "region-a")
	}
	update(t, s, typ("T"), e,
		sharding.AllocationChange{Shard: "s1", MailHeldBy: node("region-a")},
		sharding.AllocationChange{Shard: "s2", MailHeldBy: node("region-a")},
		sharding.AllocationChange{Shard: "s2", Region: node("region-b"), MailHeldBy: node("region-a")},
		sharding.AllocationChange{Shard: "s3", MailHeldBy: node("region-a")},
		sharding.AllocationChange{Shard: "s4", Region: node("region-b"), MailHeldBy: node("region-a")},
		sharding.AllocationChange{Shard: "s5", MailHeldBy: node("region-a")},
		sharding.AllocationChange{Shard: "s6", MailHeldBy: node("region-c")}, // never placed
		sharding.AllocationChange{Shard: "s6", MailHeldBy: node("region-d")},
		sharding.AllocationChange{Shard: "s7", Region: node("region-c"), MailHeldBy: node("region-d")},
	)
	_, shards := acquire(t, s, typ("T"), "node-a")
	wantShards(t, "after changes naming who holds the mail", shards, map[string]string{
		"s1": "mail@region-a", "s2": "region-b mail@region-a", "s3": "mail@region-a", "s4": "region-b mail@region-a",
		"s5": "mail@region-a", "s6": "mail@region-d", "s7": "region-c mail@region-d",
	})
	e, _ = acquire(t, s, typ("T"), "node-a")
	update(t, s, typ("T"), e,
		sharding.AllocationChange{Shard: "s2", Region: node("region-b")}, // started: the mail is in
		sharding.AllocationChange{Shard: "s3"},
		sharding.AllocationChange{Shard: "s4", MailHeldBy: node("region-a")}, // its home died first
		sharding.AllocationChange{Shard: "s5", Region: node("region-c"), MailHeldBy: node("region-a")},
	)
	if err := s.Allocate(ctx, typ("T"), e, "s5", node("region-c")); err != nil {
		t.Fatalf("Allocate: %v", err)
	}
	if err := s.Deallocate(ctx, typ("T"), e, "s6"); err != nil {
		t.Fatalf("Deallocate: %v", err)
	}
	if err := s.Deallocate(ctx, typ("T"), e, "s7"); err != nil {
		t.Fatalf("Deallocate: %v", err)
	}
	_, shards = takeOver(t, s, typ("T"), "node-b")
	wantShards(t, "after placing or deallocating them", shards, map[string]string{
		"s1": "mail@region-a", "s2": "region-b", "s4": "mail@region-a", "s5": "region-c",
	})
}

// A deposed coordinator's deallocation names no holder of mail.
func testMailHolderStale(t *testing.T, s coordStore, typ names) {
	old, _ := acquire(t, s, typ("T"), "node-a")
	allocate(t, s, typ("T"), old, "s1", "region-a")
	update(t, s, typ("T"), old, sharding.AllocationChange{Shard: "s2", MailHeldBy: node("region-a")})
	cur, _ := takeOver(t, s, typ("T"), "node-b")
	wantStale(t, "a deallocation naming a holder, with the old epoch",
		s.Update(ctxFor(t), typ("T"), old, []sharding.AllocationChange{{Shard: "s1", MailHeldBy: node("region-a")}, {Shard: "s2", MailHeldBy: node("region-x")}}))
	update(t, s, typ("T"), cur, sharding.AllocationChange{Shard: "s3", MailHeldBy: node("region-b")})
	_, shards := takeOver(t, s, typ("T"), "node-c")
	wantShards(t, "after the stale batch", shards, map[string]string{"s1": "region-a", "s2": "mail@region-a", "s3": "mail@region-b"})
}

// A deposed or never-issued epoch writes none of its batch.
func testUpdateStale(t *testing.T, s coordStore, typ names) {
	ctx := ctxFor(t)
	old, _ := acquire(t, s, typ("T"), "node-a")
	allocate(t, s, typ("T"), old, "s1", "region-a")
	cur, _ := takeOver(t, s, typ("T"), "node-b")
	batch := []sharding.AllocationChange{{Shard: "s2", Region: node("region-x")}, {Shard: "s1"}, {Shard: "s3", Region: node("region-x")}}
	wantStale(t, "Update with the old epoch", s.Update(ctx, typ("T"), old, batch))
	wantStale(t, "empty Update with the old epoch", s.Update(ctx, typ("T"), old, nil))
	for _, bad := range []uint64{cur + 1, math.MaxInt64, math.MaxUint64} {
		wantStale(t, fmt.Sprintf("Update with epoch %d", bad), s.Update(ctx, typ("T"), bad, batch))
	}
	_, shards := takeOver(t, s, typ("T"), "node-c")
	wantShards(t, "after stale batches", shards, map[string]string{"s1": "region-a"})
}

func testUpdateWithoutLease(t *testing.T, s coordStore, typ names) {
	ctx := ctxFor(t)
	for _, epoch := range []uint64{0, 1} {
		wantStale(t, fmt.Sprintf("Update with epoch %d before any Acquire", epoch),
			s.Update(ctx, typ("T"), epoch, []sharding.AllocationChange{{Shard: "s1", Region: node("region-x")}}))
	}
	_, shards := acquire(t, s, typ("T"), "node-a")
	wantShards(t, "after a batch without a lease", shards, nil)
}

func testUnknownEpoch(t *testing.T, s coordStore, typ names) {
	ctx := ctxFor(t)
	e, _ := acquire(t, s, typ("T"), "node-a")
	allocate(t, s, typ("T"), e, "s1", "region-a")
	// An epoch no Acquire handed out is not the current one either.
	for _, bad := range []uint64{e + 1, e + 1000, math.MaxInt64, math.MaxUint64} {
		wantStale(t, fmt.Sprintf("Allocate with epoch %d", bad), s.Allocate(ctx, typ("T"), bad, "s2", node("region-x")))
		wantStale(t, fmt.Sprintf("Deallocate with epoch %d", bad), s.Deallocate(ctx, typ("T"), bad, "s1"))
	}
	_, shards := acquire(t, s, typ("T"), "node-a")
	wantShards(t, "after writes with unknown epochs", shards, map[string]string{"s1": "region-a"})
}

// Nobody holds the lease of a type never acquired: no epoch may write it,
// not even the zero value of an uninitialised coordinator.
func testWriteWithoutLease(t *testing.T, s coordStore, typ names) {
	ctx := ctxFor(t)
	for _, epoch := range []uint64{0, 1} {
		wantStale(t, fmt.Sprintf("Allocate with epoch %d before any Acquire", epoch), s.Allocate(ctx, typ("T"), epoch, "s1", node("region-x")))
		wantStale(t, fmt.Sprintf("Deallocate with epoch %d before any Acquire", epoch), s.Deallocate(ctx, typ("T"), epoch, "s1"))
	}
	_, shards := acquire(t, s, typ("T"), "node-a")
	wantShards(t, "after writes without a lease", shards, nil)
}

func testCoordinatorIsolation(t *testing.T, s coordStore, typ names) {
	ea, _ := acquire(t, s, typ("A"), "node-a")
	eb, _ := acquire(t, s, typ("B"), "node-b")
	allocate(t, s, typ("A"), ea, "s1", "region-a")
	allocate(t, s, typ("B"), eb, "s1", "region-b")
	allocate(t, s, typ("B"), eb, "s2", "region-b")

	// A takeover of B leaves A's coordinator in office (its lease expired
	// too, but nobody took it over: its epoch is still the newest).
	eb2, _ := takeOver(t, s, typ("B"), "node-c")
	allocate(t, s, typ("A"), ea, "s3", "region-a")
	wantStale(t, "B's old epoch", s.Allocate(ctxFor(t), typ("B"), eb, "s3", node("region-b")))
	deallocate(t, s, typ("B"), eb2, "s1")

	_, a := acquire(t, s, typ("A"), "node-a")
	wantShards(t, "type A", a, map[string]string{"s1": "region-a", "s3": "region-a"})
	_, b := takeOver(t, s, typ("B"), "node-b")
	wantShards(t, "type B", b, map[string]string{"s2": "region-b"})
	_, c := acquire(t, s, typ("C"), "node-c")
	wantShards(t, "type C", c, nil)
}

// testConcurrentAcquire races several would-be coordinators, twice: each
// time exactly one gets the lease, and once the second winner holds it, of
// everyone's writes only the newest epoch's lands.
func testConcurrentAcquire(t *testing.T, s coordStore, typ names) {
	const owners = 8
	ctx := ctxFor(t)
	race := func(round int) (winner int, epoch uint64) {
		t.Helper()
		epochs := make([]uint64, owners)
		errs := make([]error, owners)
		var wg sync.WaitGroup
		for i := range owners {
			wg.Go(func() {
				epochs[i], _, errs[i] = s.Acquire(ctx, typ("T"), node(fmt.Sprintf("r%d-node-%d", round, i)), ttl)
			})
		}
		wg.Wait()
		winner = -1
		for i, err := range errs {
			switch {
			case err == nil && winner >= 0:
				t.Fatalf("round %d: node-%d and node-%d both acquired (epochs %d, %d)", round, winner, i, epochs[winner], epochs[i])
			case err == nil:
				winner = i
			case !errors.Is(err, sharding.ErrLeaseHeld):
				t.Fatalf("round %d: Acquire by node-%d: %v, want nil or ErrLeaseHeld", round, i, err)
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: nobody acquired a free lease", round)
		}
		return winner, epochs[winner]
	}
	_, first := race(1)
	s.expire()
	second, newest := race(2)
	if newest <= first {
		t.Fatalf("second winner's epoch %d, not above the first's %d", newest, first)
	}
	// Both winners, and a coordinator that never got an epoch, write the
	// same shard at once: exactly the newest lands.
	var errFirst, errNewest, errNone error
	var wg sync.WaitGroup
	wg.Go(func() { errFirst = s.Allocate(ctx, typ("T"), first, "s1", node("first")) })
	wg.Go(func() { errNewest = s.Allocate(ctx, typ("T"), newest, "s1", node("newest")) })
	wg.Go(func() { errNone = s.Allocate(ctx, typ("T"), 0, "s1", node("none")) })
	wg.Wait()
	if errNewest != nil {
		t.Fatalf("the holder's write: %v", errNewest)
	}
	wantStale(t, "the first winner's write after the second won", errFirst)
	wantStale(t, "a write with epoch 0", errNone)
	_, shards := takeOver(t, s, typ("T"), "observer")
	wantShards(t, fmt.Sprintf("after the race won by r2-node-%d", second), shards, map[string]string{"s1": "newest"})
}

// testTakeoverDuringWrites deposes a coordinator while it writes. Each of
// its writes either happened before the takeover — then the successor's
// Acquire returns it — or is refused; nothing written by the deposed
// coordinator may appear later.
func testTakeoverDuringWrites(t *testing.T, s coordStore, typ names) {
	const (
		rounds  = 10
		writers = 4
	)
	ctx := ctxFor(t)
	for round := range rounds {
		tn := typ(fmt.Sprintf("T%d", round))
		old, _ := acquire(t, s, tn, "old")
		var (
			mu      sync.Mutex
			written = map[string]string{}
			wg      sync.WaitGroup
			started = make(chan struct{}, writers)
			stop    atomic.Bool // only if Acquire fails: writers end on ErrStaleEpoch
		)
		for w := range writers {
			wg.Go(func() {
				for i := 0; !stop.Load(); i++ {
					shard := fmt.Sprintf("w%d-s%d", w, i)
					err := s.Allocate(ctx, tn, old, shard, node("old"))
					if i == 0 {
						started <- struct{}{}
					}
					if err != nil {
						if !errors.Is(err, sharding.ErrStaleEpoch) {
							t.Errorf("writer %d: %v", w, err)
						}
						return
					}
					mu.Lock()
					written[shard] = "old"
					mu.Unlock()
				}
			})
		}
		for range writers {
			<-started
		}
		s.expire()
		_, took, err := s.Acquire(ctx, tn, node("new"), ttl)
		if err != nil {
			stop.Store(true)
		}
		wg.Wait()
		if err != nil {
			t.Fatalf("round %d: Acquire: %v", round, err)
		}
		wantShards(t, fmt.Sprintf("round %d: successor's view vs the deposed coordinator's successful writes", round), described(took), written)
		_, later := takeOver(t, s, tn, "observer")
		wantShards(t, fmt.Sprintf("round %d: stored after the takeover", round), later, written)
	}
}

func testCoordinatorCancelled(t *testing.T, s coordStore, typ names) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := s.Acquire(ctx, typ("T"), node("node-a"), ttl); err == nil {
		t.Fatal("Acquire with a cancelled context succeeded")
	}
	// A cancelled Acquire leaves the type usable and its allocations empty.
	e, shards := acquire(t, s, typ("T"), "node-a")
	if e == 0 {
		t.Fatal("Acquire returned epoch 0")
	}
	wantShards(t, "after a cancelled Acquire", shards, nil)
	// Cancelled writes fail and change nothing.
	if err := s.Allocate(ctx, typ("T"), e, "s1", node("region-a")); err == nil {
		t.Fatal("Allocate with a cancelled context succeeded")
	}
	allocate(t, s, typ("T"), e, "s2", "region-a")
	if err := s.Deallocate(ctx, typ("T"), e, "s2"); err == nil {
		t.Fatal("Deallocate with a cancelled context succeeded")
	}
	_, shards = acquire(t, s, typ("T"), "node-a")
	wantShards(t, "after cancelled writes", shards, map[string]string{"s2": "region-a"})
}

// RunRememberStore runs the RememberStore suite as subtests of t.
func RunRememberStore(t *testing.T, newStore func(t *testing.T) sharding.RememberStore) {
	run(t, newStore, []struct {
		name string
		fn   func(t *testing.T, s sharding.RememberStore, typ names)
	}{
		{"Empty", testRememberEmpty},
		{"AddRemove", testRememberAddRemove},
		{"Idempotent", testRememberIdempotent},
		{"SortedBytewise", testRememberSorted},
		{"Isolation", testRememberIsolation},
		{"ShardsWithEntities", testRememberShards},
		{"ResultIsACopy", testRememberCopy},
		{"ConcurrentAdds", testRememberConcurrent},
		{"CancelledContext", testRememberCancelled},
	})
}

func add(t *testing.T, s sharding.RememberStore, typ, shard string, ids ...string) {
	t.Helper()
	for _, id := range ids {
		if err := s.Add(ctxFor(t), typ, shard, id); err != nil {
			t.Fatalf("Add(%q, %q, %q): %v", typ, shard, id, err)
		}
	}
}

func remove(t *testing.T, s sharding.RememberStore, typ, shard string, ids ...string) {
	t.Helper()
	for _, id := range ids {
		if err := s.Remove(ctxFor(t), typ, shard, id); err != nil {
			t.Fatalf("Remove(%q, %q, %q): %v", typ, shard, id, err)
		}
	}
}

// wantEntities checks Entities against want, which it sorts: the contract
// is ascending byte order (the memory store's), nil or empty when none.
func wantEntities(t *testing.T, s sharding.RememberStore, typ, shard string, want ...string) {
	t.Helper()
	got, err := s.Entities(ctxFor(t), typ, shard)
	if err != nil {
		t.Fatalf("Entities(%q, %q): %v", typ, shard, err)
	}
	want = slices.Clone(want)
	sort.Strings(want)
	if len(got) == 0 && len(want) == 0 {
		return
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Entities(%q, %q) = %q, want %q", typ, shard, got, want)
	}
}

func testRememberEmpty(t *testing.T, s sharding.RememberStore, typ names) {
	wantEntities(t, s, typ("T"), "s1")
	remove(t, s, typ("T"), "s1", "never-added")
	wantEntities(t, s, typ("T"), "s1")
}

func testRememberAddRemove(t *testing.T, s sharding.RememberStore, typ names) {
	add(t, s, typ("T"), "s1", "e1", "e2", "e3")
	wantEntities(t, s, typ("T"), "s1", "e1", "e2", "e3")
	remove(t, s, typ("T"), "s1", "e2")
	wantEntities(t, s, typ("T"), "s1", "e1", "e3")
	add(t, s, typ("T"), "s1", "e2")
	wantEntities(t, s, typ("T"), "s1", "e1", "e2", "e3")
	remove(t, s, typ("T"), "s1", "e1", "e2", "e3")
	wantEntities(t, s, typ("T"), "s1")
}

func testRememberIdempotent(t *testing.T, s sharding.RememberStore, typ names) {
	add(t, s, typ("T"), "s1", "e1", "e1", "e2", "e1")
	wantEntities(t, s, typ("T"), "s1", "e1", "e2")
	remove(t, s, typ("T"), "s1", "e1", "e1", "never-added")
	wantEntities(t, s, typ("T"), "s1", "e2")
}

func testRememberSorted(t *testing.T, s sharding.RememberStore, typ names) {
	// Mixed case, digits, punctuation and non-ASCII: a collation-aware
	// order (say a database's locale) differs from byte order on these.
	ids := []string{"b", "B", "a", "Z10", "Z9", "é", "e", "_x", "-y", "", "a b", "ab"}
	add(t, s, typ("T"), "s1", ids...)
	wantEntities(t, s, typ("T"), "s1", ids...)
}

func testRememberIsolation(t *testing.T, s sharding.RememberStore, typ names) {
	add(t, s, typ("A"), "s1", "e1", "e2")
	add(t, s, typ("A"), "s2", "e1")
	add(t, s, typ("B"), "s1", "e1", "e3")
	// Keys that collide if type and shard were joined naively.
	add(t, s, typ("A")+"|x", "y", "j1")
	add(t, s, typ("A"), "x|y", "j2")

	remove(t, s, typ("A"), "s1", "e1")
	wantEntities(t, s, typ("A"), "s1", "e2")
	wantEntities(t, s, typ("A"), "s2", "e1")
	wantEntities(t, s, typ("B"), "s1", "e1", "e3")
	wantEntities(t, s, typ("B"), "s2")
	wantEntities(t, s, typ("A")+"|x", "y", "j1")
	wantEntities(t, s, typ("A"), "x|y", "j2")
}

// Shards lists exactly the shards that hold remembered entities, per type,
// in byte order.
func testRememberShards(t *testing.T, s sharding.RememberStore, typ names) {
	wantShardList := func(typeName string, want ...string) {
		t.Helper()
		got, err := s.Shards(ctxFor(t), typeName)
		if err != nil {
			t.Fatalf("Shards(%q): %v", typeName, err)
		}
		if len(got) != 0 || len(want) != 0 {
			if !slices.Equal(got, want) {
				t.Fatalf("Shards(%q) = %q, want %q", typeName, got, want)
			}
		}
	}
	wantShardList(typ("A"))
	add(t, s, typ("A"), "s2", "e1", "e2")
	add(t, s, typ("A"), "S1", "e1")
	add(t, s, typ("A"), "s10", "e1")
	add(t, s, typ("B"), "s3", "e1")
	wantShardList(typ("A"), "S1", "s10", "s2")
	remove(t, s, typ("A"), "s10", "e1") // its last entity: the shard is no longer listed
	remove(t, s, typ("A"), "s2", "e1")
	wantShardList(typ("A"), "S1", "s2")
	wantShardList(typ("B"), "s3")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Shards(ctx, typ("A")); err == nil {
		t.Fatal("Shards with a cancelled context succeeded")
	}
}

func testRememberCopy(t *testing.T, s sharding.RememberStore, typ names) {
	add(t, s, typ("T"), "s1", "e1", "e2")
	got, err := s.Entities(ctxFor(t), typ("T"), "s1")
	if err != nil {
		t.Fatal(err)
	}
	for i := range got {
		got[i] = "mutated"
	}
	wantEntities(t, s, typ("T"), "s1", "e1", "e2")
}

func testRememberConcurrent(t *testing.T, s sharding.RememberStore, typ names) {
	const (
		workers = 8
		each    = 25
	)
	ctx := ctxFor(t)
	// Workers alternate between two shards, and all add "common" to race
	// on idempotence.
	want := map[string][]string{"s1": {"common"}, "s2": {"common"}}
	var wg sync.WaitGroup
	errs := make(chan error, 2*workers*each)
	for w := range workers {
		shard := fmt.Sprintf("s%d", 1+w%2)
		ids := make([]string, each)
		for i := range ids {
			ids[i] = fmt.Sprintf("w%d-e%02d", w, i)
		}
		want[shard] = append(want[shard], ids...)
		wg.Go(func() {
			for _, id := range ids {
				for _, id := range []string{id, "common"} {
					if err := s.Add(ctx, typ("T"), shard, id); err != nil {
						errs <- fmt.Errorf("Add(%q, %q): %w", shard, id, err)
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for shard, ids := range want {
		wantEntities(t, s, typ("T"), shard, ids...)
	}
}

func testRememberCancelled(t *testing.T, s sharding.RememberStore, typ names) {
	add(t, s, typ("T"), "s1", "e1")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Entities(ctx, typ("T"), "s1"); err == nil {
		t.Fatal("Entities with a cancelled context succeeded")
	}
	if err := s.Add(ctx, typ("T"), "s1", "e2"); err == nil {
		t.Fatal("Add with a cancelled context succeeded")
	}
	if err := s.Remove(ctx, typ("T"), "s1", "e1"); err == nil {
		t.Fatal("Remove with a cancelled context succeeded")
	}
	got, err := s.Entities(ctxFor(t), typ("T"), "s1")
	if err != nil || !slices.Equal(got, []string{"e1"}) {
		t.Fatalf("after cancelled writes: %v, %v; want [e1]", got, err)
	}
}

// node reads the suites' notation for a node incarnation: "a#1", or "a"
// alone for incarnation 0; name writes it.
func node(s string) cluster.UniqueAddress {
	if a, err := cluster.ParseUniqueAddress(s); err == nil {
		return a
	}
	return cluster.UniqueAddress{Node: s}
}

func name(a cluster.UniqueAddress) string {
	if a.Incarnation == 0 {
		return a.Node
	}
	return a.String()
}
