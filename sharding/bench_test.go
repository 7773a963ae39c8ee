package sharding_test

import (
	"context"
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/sharding"
	"github.com/shoal-dev/shoal/sharding/allocation"
)

// Run: go test -run '^$' -bench . -benchmem -count 3 ./sharding/

type benchMsg struct{ stop bool }

var benchKey = entity.NewTypeKey[benchMsg]("Bench")

// counter counts handled messages and closes done when the count reaches want.
type counter struct {
	handled atomic.Int64
	want    atomic.Int64
	mu      sync.Mutex
	done    chan struct{}
}

// expect resets the count and returns a channel closed after n more messages.
func (c *counter) expect(n int) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.done = make(chan struct{})
	c.handled.Store(0)
	c.want.Store(int64(n))
	if n == 0 {
		close(c.done)
	}
	return c.done
}

func (c *counter) create(entity.Context[benchMsg]) entity.Behavior[benchMsg] {
	return entity.Receive(func(_ entity.Context[benchMsg], m benchMsg) entity.Behavior[benchMsg] {
		if m.stop {
			return entity.Stopped[benchMsg]()
		}
		if c.handled.Add(1) == c.want.Load() {
			c.mu.Lock()
			close(c.done)
			c.mu.Unlock()
		}
		return entity.Same[benchMsg]()
	})
}

func benchNode(b *testing.B, settings sharding.Settings, create func(entity.Context[benchMsg]) entity.Behavior[benchMsg]) (*entity.System, *sharding.Sharding, *sharding.Region[benchMsg]) {
	b.Helper()
	sys, err := entity.NewSystem(entity.Config{Logger: quiet()})
	if err != nil {
		b.Fatal(err)
	}
	sh, err := sharding.New(sys, sharding.Config{})
	if err != nil {
		b.Fatal(err)
	}
	r, err := sharding.Init(sh, sharding.Entity[benchMsg]{Key: benchKey, Create: create, StopMessage: benchMsg{stop: true}, Settings: settings})
	if err != nil {
		b.Fatal(err)
	}
	return sys, sh, r
}

// tellAll sends n messages over refs from one goroutine per core, each
// with its own share of the work, and waits until all are handled.
func tellAll[R entity.Ref[benchMsg]](refs []R, n int, done <-chan struct{}) {
	senders := runtime.GOMAXPROCS(0)
	var wg sync.WaitGroup
	for w := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += senders {
				_ = refs[i%len(refs)].Tell(benchMsg{})
			}
		}()
	}
	wg.Wait()
	<-done
}

// BenchmarkTellThroughSharding compares Tell through sharding with direct
// Tell under the same conditions: 10 000 resident entities on one node
// (every shard allocated) and, in the same process, 10 000 entities of the
// same behavior spawned directly. It runs rounds of both in turn (sharding
// first, then direct first, and so on), b.N messages of each in all, from
// one goroutine per core, each round waiting until all are handled, so
// that load coming and going on a shared machine falls on both alike.
// ns/op is per pair of messages; it reports tells/s (through sharding),
// direct-tells/s and their ratio sharding/direct:
//
//	go test -run '^$' -bench 'TellThroughSharding$' -benchtime 2000000x -count 5 ./sharding
func BenchmarkTellThroughSharding(b *testing.B) { benchTellRatio(b, false) }

// BenchmarkTellThroughShardingShuffled is BenchmarkTellThroughSharding
// with both sides sending to their entities in one random order, the same
// for both (entity i of one side when entity i of the other), reported
// alongside it, not instead. In BenchmarkTellThroughSharding both send in
// id order, which is the order the direct cells were spawned in, one after
// the other: their cells lie in memory in the order they are read, and the
// hardware prefetcher hides the cache misses of the direct side. The
// sharded cells were spawned as their shards got homes, shard by shard,
// so the same order reads them out of memory order. Traffic does not
// arrive in spawn order; here neither side gains from its allocation order:
//
//	go test -run '^$' -bench 'TellThroughShardingShuffled$' -benchtime 2000000x -count 5 ./sharding
func BenchmarkTellThroughShardingShuffled(b *testing.B) { benchTellRatio(b, true) }

// benchTellRatio is BenchmarkTellThroughSharding, in a random order of
// the entities with shuffled.
func benchTellRatio(b *testing.B, shuffled bool) {
	const entities = 10_000
	c := &counter{}
	sys, sh, r := benchNode(b, sharding.Settings{}, c.create)
	defer sh.Terminate()
	refs := residentRefs(b, r, c, entities)
	direct := directRefs(b, sys, c, entities)
	if shuffled {
		refs, direct = permuted(refs), permuted(direct)
	}

	const rounds = 6
	var elapsed [2]time.Duration // [0] through sharding, [1] direct
	b.ResetTimer()
	for round := range rounds {
		n := b.N / rounds
		if round < b.N%rounds {
			n++
		}
		for k := range 2 {
			k ^= round % 2 // sharding first in even rounds, direct first in odd ones
			done := c.expect(n)
			start := time.Now()
			if k == 0 {
				tellAll(refs, n, done)
			} else {
				tellAll(direct, n, done)
			}
			elapsed[k] += time.Since(start)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed[0].Seconds(), "tells/s")
	b.ReportMetric(float64(b.N)/elapsed[1].Seconds(), "direct-tells/s")
	b.ReportMetric(elapsed[1].Seconds()/elapsed[0].Seconds(), "sharding/direct")
}

// BenchmarkTellPath runs one side of BenchmarkTellThroughSharding alone,
// with the same set-up (both sets of 10 000 entities), for a CPU profile of
// one path or an instruction count. Under callgrind (which needs
// GODEBUG=asyncpreemptoff=1,cpu.rdtscp=off) the count per message, the
// difference of two runs' totals over that of their b.N, was not
// repeatable (the runtime's spinning and GC vary by up to 15 %):
//
//	go test -run '^$' -bench 'TellPath/sharding$' -benchtime 1000000x -cpuprofile cpu.prof ./sharding
func BenchmarkTellPath(b *testing.B) {
	const entities = 10_000
	for _, side := range []string{"sharding", "direct"} {
		b.Run(side, func(b *testing.B) {
			c := &counter{}
			sys, sh, r := benchNode(b, sharding.Settings{}, c.create)
			defer sh.Terminate()
			refs := residentRefs(b, r, c, entities)
			direct := directRefs(b, sys, c, entities)
			done := c.expect(b.N)
			b.ResetTimer()
			if side == "sharding" {
				tellAll(refs, b.N, done)
			} else {
				tellAll(direct, b.N, done)
			}
		})
	}
}

// permuted returns refs in a random order, the same for every slice of
// that length: entity i of one slice goes where entity i of another does.
func permuted[R any](refs []R) []R {
	out := make([]R, len(refs))
	for i, j := range rand.New(rand.NewPCG(1, 2)).Perm(len(refs)) {
		out[i] = refs[j]
	}
	return out
}

// directRefs spawns n entities of c's behavior outside sharding, each with
// one message, and returns their refs once all handled it.
func directRefs(b *testing.B, sys *entity.System, c *counter, n int) []*entity.Cell[benchMsg] {
	b.Helper()
	props := &entity.Props[benchMsg]{Key: entity.NewTypeKey[benchMsg]("BenchDirect"), Create: c.create}
	refs := make([]*entity.Cell[benchMsg], n)
	warm := c.expect(n)
	for i := range refs {
		refs[i] = entity.Spawn(sys, props, strconv.Itoa(i))
		if err := refs[i].Tell(benchMsg{}); err != nil {
			b.Fatal(err)
		}
	}
	<-warm
	return refs
}

// BenchmarkIdleEntityMemoryWithSharding reports heap bytes per resident
// idle entity, counting its cell, its id, and its shard's bookkeeping,
// over 200 000 entities in 1 000 shards.
func BenchmarkIdleEntityMemoryWithSharding(b *testing.B) {
	const n = 200_000
	for range b.N {
		c := &counter{}
		_, sh, r := benchNode(b, sharding.Settings{}, c.create)
		// Allocate every shard first, so the figure is per entity.
		done := c.expect(1000)
		homed := map[string]bool{}
		for i := 0; len(homed) < 1000; i++ {
			id := "warm-" + strconv.Itoa(i)
			if !homed[r.ShardID(id)] {
				homed[r.ShardID(id)] = true
				_ = r.EntityRefFor(id).Tell(benchMsg{})
			}
		}
		<-done
		if got := len(r.Stats()); got != 1000 {
			b.Fatalf("%d shards allocated, want 1000", got)
		}
		done = c.expect(n)
		before := heapInUse()
		for i := range n {
			_ = r.EntityRefFor(strconv.Itoa(i)).Tell(benchMsg{})
		}
		<-done
		after := heapInUse()
		b.ReportMetric(float64(after-before)/float64(n), "bytes/entity")
		total := 0
		for _, count := range r.Stats() {
			total += count
		}
		if total != n+1000 {
			b.Fatalf("%d entities resident, want %d", total, n+1000)
		}
		sh.Terminate()
	}
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkFirstMessageToUnallocatedShard measures Tell → handled for a
// message whose shard has no home yet: the round trip to the coordinator,
// the allocation (written to the store), the push of the new home to the
// regions, and the start of the shard and of the entity.
func BenchmarkFirstMessageToUnallocatedShard(b *testing.B) {
	c := &counter{}
	// One shard per entity, so every message meets an unallocated shard;
	// a fresh node every 1000 shards keeps the coordinator at a realistic size.
	const perNode = 1000
	var sh *sharding.Sharding
	var r *sharding.Region[benchMsg]
	defer func() {
		if sh != nil {
			sh.Terminate()
		}
	}()
	settings := sharding.Settings{ShardID: func(id string) string { return id }}
	var first, started time.Duration
	b.ResetTimer()
	for i := range b.N {
		if i%perNode == 0 {
			b.StopTimer()
			if sh != nil {
				sh.Terminate()
			}
			_, sh, r = benchNode(b, settings, c.create)
			// Registered: a shard of the warm-up message is homed.
			done := c.expect(1)
			_ = r.EntityRefFor("warm").Tell(benchMsg{})
			<-done
			b.StartTimer()
		}
		done := c.expect(1)
		start := time.Now()
		if err := r.EntityRefFor(strconv.Itoa(i)).Tell(benchMsg{}); err != nil {
			b.Fatal(err)
		}
		<-done
		first += time.Since(start)
		// The same-run baseline: Tell → handled to the started warm entity.
		done = c.expect(1)
		start = time.Now()
		if err := r.EntityRefFor("warm").Tell(benchMsg{}); err != nil {
			b.Fatal(err)
		}
		<-done
		started += time.Since(start)
	}
	b.StopTimer()
	b.ReportMetric(first.Seconds()*1e6/float64(b.N), "first-us")
	b.ReportMetric(started.Seconds()*1e6/float64(b.N), "started-us")
	b.ReportMetric(first.Seconds()/started.Seconds(), "first/started")
}

// BenchmarkHandOffOf1000Entities measures the graceful leave of a node
// whose one shard holds 1000 entities: the coordinator (on the other,
// older node, which the coordinator-avoidance strategy keeps free of
// shards) begins the hand-off, every entity gets its stop message and
// stops, and the shard is started on the remaining node (an ask through it
// is answered there). Each iteration also times an ask to a started
// entity (the baseline): it reports handoff-ms, ask-us and handoff/ask.
func BenchmarkHandOffOf1000Entities(b *testing.B) {
	settings := sharding.Settings{
		NumberOfShards: 1,
		Strategy:       allocation.NewCoordinatorAvoidance(allocation.DefaultCoordinatorAvoidanceConfig()),
	}
	ids := entityIDs(1000)
	var handOff, ask time.Duration
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		s := newSim(b, settings)
		a := s.join("a", "host") // oldest: the coordinator
		leaver := s.join("b", "host")
		for _, id := range ids {
			leaver.tell(b, id, note{Text: "x"})
		}
		for len(leaver.region.State().Shards["0"]) < len(ids) || sharding.HomesOf(a.region)["0"] != addr("b") {
			runtime.Gosched()
		}
		// The same-run baseline: an ask to a started entity.
		start := time.Now()
		_ = leaver.ask(b, ids[0])
		ask += time.Since(start)
		b.StartTimer()
		start = time.Now()
		if err := leaver.sh.Shutdown(context.Background()); err != nil {
			b.Fatal(err)
		}
		// The shard is started on the remaining node once an ask through it is answered.
		_ = a.ask(b, ids[0])
		handOff += time.Since(start)
		b.StopTimer()
		s.log.mu.Lock()
		stops := s.log.stopsByNode["b"]
		s.log.mu.Unlock()
		if stops != len(ids) {
			b.Fatalf("%d entities got their stop message, want %d", stops, len(ids))
		}
		a.sh.Terminate()
	}
	b.ReportMetric(handOff.Seconds()*1e3/float64(b.N), "handoff-ms")
	b.ReportMetric(ask.Seconds()*1e6/float64(b.N), "ask-us")
	b.ReportMetric(handOff.Seconds()/ask.Seconds(), "handoff/ask")
}

// BenchmarkTellLocalKnownShard is the data path alone: one goroutine tells
// 10 000 resident entities whose shards are local and known; the time is
// that of the Tell calls (the entities handle the messages meanwhile).
func BenchmarkTellLocalKnownShard(b *testing.B) {
	const entities = 10_000
	c := &counter{}
	_, sh, r := benchNode(b, sharding.Settings{}, c.create)
	defer sh.Terminate()
	refs := residentRefs(b, r, c, entities)
	done := c.expect(b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if err := refs[i%entities].Tell(benchMsg{}); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	<-done
}

// residentRefs starts n entities through r, each with one message, and
// returns their refs once all handled it.
func residentRefs(b *testing.B, r *sharding.Region[benchMsg], c *counter, n int) []sharding.EntityRef[benchMsg] {
	b.Helper()
	refs := make([]sharding.EntityRef[benchMsg], n)
	warm := c.expect(n)
	for i := range refs {
		refs[i] = r.EntityRefFor(strconv.Itoa(i))
		if err := refs[i].Tell(benchMsg{}); err != nil {
			b.Fatal(err)
		}
	}
	<-warm
	return refs
}
