// Package shardingtest holds the conformance suites every
// sharding.CoordinatorStore and sharding.RememberStore implementation passes.
//
//	func TestCoordinatorStoreConformance(t *testing.T) {
//		shardingtest.RunCoordinatorStore(t, func(t *testing.T) sharding.CoordinatorStore {
//			return sharding.NewMemoryCoordinatorStore()
//		})
//	}
//
// The constructor is called once per subtest; it may return a fresh store or
// a shared one (every subtest uses type names of its own), and it registers
// any cleanup with t.Cleanup.
package shardingtest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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

// RunCoordinatorStore runs the CoordinatorStore suite as subtests of t.
func RunCoordinatorStore(t *testing.T, newStore func(t *testing.T) sharding.CoordinatorStore) {
	run(t, newStore, []struct {
		name string
		fn   func(t *testing.T, s sharding.CoordinatorStore, typ names)
	}{
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
	})
}

func acquire(t *testing.T, s sharding.CoordinatorStore, typ, owner string) (uint64, map[string]string) {
	t.Helper()
	epoch, shards, err := s.Acquire(ctxFor(t), typ, owner)
	if err != nil {
		t.Fatalf("Acquire(%q, %q): %v", typ, owner, err)
	}
	return epoch, shards
}

func allocate(t *testing.T, s sharding.CoordinatorStore, typ string, epoch uint64, shard, region string) {
	t.Helper()
	if err := s.Allocate(ctxFor(t), typ, epoch, shard, region); err != nil {
		t.Fatalf("Allocate(%q, %d, %q, %q): %v", typ, epoch, shard, region, err)
	}
}

func deallocate(t *testing.T, s sharding.CoordinatorStore, typ string, epoch uint64, shard string) {
	t.Helper()
	if err := s.Deallocate(ctxFor(t), typ, epoch, shard); err != nil {
		t.Fatalf("Deallocate(%q, %d, %q): %v", typ, epoch, shard, err)
	}
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

func testFirstAcquire(t *testing.T, s sharding.CoordinatorStore, typ names) {
	epoch, shards := acquire(t, s, typ("T"), "node-a")
	// Zero is the epoch of no coordinator at all.
	if epoch == 0 {
		t.Fatal("first Acquire returned epoch 0")
	}
	wantShards(t, "first Acquire", shards, nil)
}

func testEpochsIncrease(t *testing.T, s sharding.CoordinatorStore, typ names) {
	var last uint64
	// The same owner acquiring again (a restarted coordinator) gets a new
	// epoch too: its previous incarnation must be fenced off.
	for i, owner := range []string{"node-a", "node-a", "node-b", "node-a", "node-c"} {
		epoch, _ := acquire(t, s, typ("T"), owner)
		if epoch <= last {
			t.Fatalf("Acquire %d by %s: epoch %d, not above %d", i, owner, epoch, last)
		}
		last = epoch
	}
}

func testWritesVisible(t *testing.T, s sharding.CoordinatorStore, typ names) {
	e1, _ := acquire(t, s, typ("T"), "node-a")
	allocate(t, s, typ("T"), e1, "s1", "region-a")
	allocate(t, s, typ("T"), e1, "s2", "region-a")
	allocate(t, s, typ("T"), e1, "s3", "region-b")
	allocate(t, s, typ("T"), e1, "s2", "region-c") // a move overwrites
	deallocate(t, s, typ("T"), e1, "s3")
	deallocate(t, s, typ("T"), e1, "never-allocated") // not an error
	deallocate(t, s, typ("T"), e1, "s3")              // idempotent

	e2, shards := acquire(t, s, typ("T"), "node-b")
	wantShards(t, "after writes", shards, map[string]string{"s1": "region-a", "s2": "region-c"})

	// The new coordinator's writes build on the old ones.
	allocate(t, s, typ("T"), e2, "s3", "region-b")
	deallocate(t, s, typ("T"), e2, "s1")
	_, shards = acquire(t, s, typ("T"), "node-a")
	wantShards(t, "after the successor's writes", shards, map[string]string{"s2": "region-c", "s3": "region-b"})
}

func testAcquiredMapIsACopy(t *testing.T, s sharding.CoordinatorStore, typ names) {
	e, _ := acquire(t, s, typ("T"), "node-a")
	allocate(t, s, typ("T"), e, "s1", "region-a")
	_, shards := acquire(t, s, typ("T"), "node-a")
	shards["s1"] = "mutated"
	shards["s9"] = "mutated"
	_, shards = acquire(t, s, typ("T"), "node-a")
	wantShards(t, "after mutating a returned map", shards, map[string]string{"s1": "region-a"})
}

func testStaleEpoch(t *testing.T, s sharding.CoordinatorStore, typ names) {
	ctx := ctxFor(t)
	old, _ := acquire(t, s, typ("T"), "node-a")
	allocate(t, s, typ("T"), old, "s1", "region-a")
	allocate(t, s, typ("T"), old, "s2", "region-a")
	cur, _ := acquire(t, s, typ("T"), "node-b")

	wantStale(t, "Allocate new shard with the old epoch", s.Allocate(ctx, typ("T"), old, "s3", "region-a"))
	wantStale(t, "Allocate moving a shard with the old epoch", s.Allocate(ctx, typ("T"), old, "s1", "region-x"))
	wantStale(t, "Deallocate with the old epoch", s.Deallocate(ctx, typ("T"), old, "s2"))

	// The current coordinator still writes; the deposed one still cannot.
	allocate(t, s, typ("T"), cur, "s4", "region-b")
	wantStale(t, "Allocate with the old epoch after the new one wrote", s.Allocate(ctx, typ("T"), old, "s4", "region-a"))

	_, shards := acquire(t, s, typ("T"), "node-c")
	wantShards(t, "after stale writes", shards, map[string]string{"s1": "region-a", "s2": "region-a", "s4": "region-b"})
}

func testUnknownEpoch(t *testing.T, s sharding.CoordinatorStore, typ names) {
	ctx := ctxFor(t)
	e, _ := acquire(t, s, typ("T"), "node-a")
	allocate(t, s, typ("T"), e, "s1", "region-a")
	// An epoch no Acquire handed out is not the current one either.
	for _, bad := range []uint64{e + 1, e + 1000, math.MaxInt64, math.MaxUint64} {
		wantStale(t, fmt.Sprintf("Allocate with epoch %d", bad), s.Allocate(ctx, typ("T"), bad, "s2", "region-x"))
		wantStale(t, fmt.Sprintf("Deallocate with epoch %d", bad), s.Deallocate(ctx, typ("T"), bad, "s1"))
	}
	_, shards := acquire(t, s, typ("T"), "node-a")
	wantShards(t, "after writes with unknown epochs", shards, map[string]string{"s1": "region-a"})
}

// Nobody holds the lease of a type never acquired: no epoch may write it,
// not even the zero value of an uninitialised coordinator.
func testWriteWithoutLease(t *testing.T, s sharding.CoordinatorStore, typ names) {
	ctx := ctxFor(t)
	for _, epoch := range []uint64{0, 1} {
		wantStale(t, fmt.Sprintf("Allocate with epoch %d before any Acquire", epoch), s.Allocate(ctx, typ("T"), epoch, "s1", "region-x"))
		wantStale(t, fmt.Sprintf("Deallocate with epoch %d before any Acquire", epoch), s.Deallocate(ctx, typ("T"), epoch, "s1"))
	}
	_, shards := acquire(t, s, typ("T"), "node-a")
	wantShards(t, "after writes without a lease", shards, nil)
}

func testCoordinatorIsolation(t *testing.T, s sharding.CoordinatorStore, typ names) {
	ea, _ := acquire(t, s, typ("A"), "node-a")
	eb, _ := acquire(t, s, typ("B"), "node-b")
	allocate(t, s, typ("A"), ea, "s1", "region-a")
	allocate(t, s, typ("B"), eb, "s1", "region-b")
	allocate(t, s, typ("B"), eb, "s2", "region-b")

	// A takeover of B leaves A's coordinator in office.
	eb2, _ := acquire(t, s, typ("B"), "node-c")
	allocate(t, s, typ("A"), ea, "s3", "region-a")
	wantStale(t, "B's old epoch", s.Allocate(ctxFor(t), typ("B"), eb, "s3", "region-b"))
	deallocate(t, s, typ("B"), eb2, "s1")

	_, a := acquire(t, s, typ("A"), "node-a")
	wantShards(t, "type A", a, map[string]string{"s1": "region-a", "s3": "region-a"})
	_, b := acquire(t, s, typ("B"), "node-b")
	wantShards(t, "type B", b, map[string]string{"s2": "region-b"})
	_, c := acquire(t, s, typ("C"), "node-c")
	wantShards(t, "type C", c, nil)
}

// testConcurrentAcquire races several would-be coordinators: each gets its
// own epoch, and of their writes only the newest epoch's lands.
func testConcurrentAcquire(t *testing.T, s sharding.CoordinatorStore, typ names) {
	const owners = 8
	ctx := ctxFor(t)
	epochs := make([]uint64, owners)
	errs := make([]error, owners)
	var wg sync.WaitGroup
	for i := range owners {
		wg.Go(func() { epochs[i], _, errs[i] = s.Acquire(ctx, typ("T"), fmt.Sprintf("node-%d", i)) })
	}
	wg.Wait()
	newest := 0
	seen := map[uint64]int{}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Acquire by node-%d: %v", i, err)
		}
		if j, dup := seen[epochs[i]]; dup {
			t.Fatalf("node-%d and node-%d both got epoch %d", j, i, epochs[i])
		}
		seen[epochs[i]] = i
		if epochs[i] > epochs[newest] {
			newest = i
		}
	}

	// Everyone now writes the same shard at once: exactly the newest wins.
	for i := range owners {
		wg.Go(func() { errs[i] = s.Allocate(ctx, typ("T"), epochs[i], "s1", fmt.Sprintf("node-%d", i)) })
	}
	wg.Wait()
	for i, err := range errs {
		switch {
		case i == newest && err != nil:
			t.Fatalf("newest coordinator node-%d (epoch %d): %v", i, epochs[i], err)
		case i != newest:
			wantStale(t, fmt.Sprintf("node-%d (epoch %d, newest %d)", i, epochs[i], epochs[newest]), err)
		}
	}
	_, shards := acquire(t, s, typ("T"), "observer")
	wantShards(t, "after the race", shards, map[string]string{"s1": fmt.Sprintf("node-%d", newest)})
}

// testTakeoverDuringWrites deposes a coordinator while it writes. Each of
// its writes either happened before the takeover — then the successor's
// Acquire returns it — or is refused; nothing written by the deposed
// coordinator may appear later.
func testTakeoverDuringWrites(t *testing.T, s sharding.CoordinatorStore, typ names) {
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
					err := s.Allocate(ctx, tn, old, shard, "old")
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
		_, took, err := s.Acquire(ctx, tn, "new")
		if err != nil {
			stop.Store(true)
		}
		wg.Wait()
		if err != nil {
			t.Fatalf("round %d: Acquire: %v", round, err)
		}
		wantShards(t, fmt.Sprintf("round %d: successor's view vs the deposed coordinator's successful writes", round), took, written)
		_, later := acquire(t, s, tn, "observer")
		wantShards(t, fmt.Sprintf("round %d: stored after the takeover", round), later, written)
	}
}

func testCoordinatorCancelled(t *testing.T, s sharding.CoordinatorStore, typ names) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := s.Acquire(ctx, typ("T"), "node-a"); err == nil {
		t.Fatal("Acquire with a cancelled context succeeded")
	}
	// A cancelled Acquire leaves the type usable and its allocations empty.
	e, shards := acquire(t, s, typ("T"), "node-a")
	if e == 0 {
		t.Fatal("Acquire returned epoch 0")
	}
	wantShards(t, "after a cancelled Acquire", shards, nil)
	// Cancelled writes fail and change nothing.
	if err := s.Allocate(ctx, typ("T"), e, "s1", "region-a"); err == nil {
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
