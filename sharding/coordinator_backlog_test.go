package sharding

import (
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shoal-dev/shoal/sharding/internal/protocol"
)

// A step with nothing to write and nothing to send holds nothing, even
// behind a batch in flight: only steps with messages wait, and count
// towards maxHeldSteps.
func TestPipelineHoldsNoEmptyStep(t *testing.T) {
	var p coordinatorPipeline
	p.take(protocol.GetShardHome{Shard: "s1", Region: addr("b")}, []change{{shard: "s1", region: addr("a")}}, []outbound{home("b", "s1", "a")})
	p.next()
	for range 10 {
		p.take(protocol.StopShards{Shards: []string{"s1"}}, nil, nil)
	}
	if n := p.heldSteps(); n != 1 {
		t.Fatalf("%d steps held, want 1: the empty ones hold nothing", n)
	}
}

// A burst of steps larger than maxHeldSteps, held behind one slow commit
// that then succeeds, is load: the coordinator takes it and answers each.
// (It stopped as if the store were down: "store down too long".)
func TestCoordinatorTakesABurstBehindASlowCommit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &gateStore{MemoryCoordinatorStore: NewMemoryCoordinatorStore()}
		s, r, b, _, _ := pipelineNode(t, store, Settings{StoreTimeout: time.Hour})
		defer s.Terminate()
		store.close()
		const burst = maxHeldSteps + 100
		for range burst {
			b.send(t, protocol.GetShardHome{Shard: "s2", Region: addr("b")}) // held behind s2's allocation
		}
		synctest.Wait()
		if !coordinatorRunning(r) {
			t.Fatal("the coordinator stopped while a commit was slow")
		}
		store.open()
		synctest.Wait()
		answers := 0
		for _, h := range b.homes() {
			if strings.HasSuffix(h, "ShardHome s2@a") {
				answers++
			}
		}
		if answers < burst {
			t.Fatalf("%d answers for s2, want %d", answers, burst)
		}
	})
}

// While the store fails, the steps held grow with every retry; past
// maxHeldSteps the coordinator stops, and its successor rebuilds from the
// store.
func TestCoordinatorStopsWhenTheStoreFailsTooLong(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &gateStore{MemoryCoordinatorStore: NewMemoryCoordinatorStore(), fails: 1 << 30}
		s, r, b, _, _ := pipelineNode(t, store, Settings{StoreTimeout: time.Second})
		defer s.Terminate()
		b.send(t, protocol.GetShardHome{Shard: "s2", Region: addr("b")}) // its write fails, and is retried
		synctest.Wait()
		time.Sleep(time.Second)
		synctest.Wait()
		if !coordinatorRunning(r) {
			t.Fatal("the coordinator stopped at the first failed write")
		}
		for range maxHeldSteps + 1 {
			b.send(t, protocol.GetShardHome{Shard: "s2", Region: addr("b")})
		}
		synctest.Wait()
		if coordinatorRunning(r) {
			attempts, _ := store.batches()
			t.Fatalf("the coordinator runs on after %d failed writes with %d steps held", len(attempts), maxHeldSteps+2)
		}
		if attempts, committed := store.batches(); len(committed) != 0 || !slices.ContainsFunc(attempts, func(c []AllocationChange) bool { return len(c) > 0 }) {
			t.Fatalf("attempts %v, committed %v", attempts, committed)
		}
	})
}

// coordinatorRunning reports whether r's coordinator runs.
func coordinatorRunning(r *Region[string]) bool {
	hostOf(r).mu.Lock()
	defer hostOf(r).mu.Unlock()
	if hostOf(r).coord == nil {
		return false
	}
	select {
	case <-hostOf(r).coord.Done():
		return false
	default:
		return true
	}
}

// A coordinator that stopped by itself is started again by its host's
// upkeep tick, once the back-off has passed, with no membership change to
// prompt it; once the node's sharding is terminated, none is.
func TestCoordinatorHostRestartsAStoppedCoordinator(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &gateStore{MemoryCoordinatorStore: NewMemoryCoordinatorStore(), fails: 1 << 30}
		s, r, b, _, _ := pipelineNode(t, store, Settings{StoreTimeout: time.Second})
		b.send(t, protocol.GetShardHome{Shard: "s2", Region: addr("b")}) // its write fails, and is retried
		synctest.Wait()
		time.Sleep(time.Second)
		synctest.Wait()
		for range maxHeldSteps + 1 {
			b.send(t, protocol.GetShardHome{Shard: "s2", Region: addr("b")})
		}
		synctest.Wait()
		if coordinatorRunning(r) {
			t.Fatal("the coordinator runs on while its store fails")
		}
		store.mu.Lock()
		store.fails = 0
		store.mu.Unlock()
		time.Sleep(time.Minute) // past any back-off
		synctest.Wait()
		if !coordinatorRunning(r) {
			t.Fatal("the coordinator was not started again")
		}
		s.Terminate()
		time.Sleep(time.Minute)
		synctest.Wait()
		if hostOf(r).coord != nil {
			t.Fatal("a coordinator runs after Terminate")
		}
	})
}
