package sharding

import (
	goruntime "runtime"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/shoal-dev/shoal/entity"
)

// BenchmarkShardDeliver is shard.deliver alone, the shard's part of the
// locked path and of an inbound Deliver that misses the fast path: one
// goroutine tells 1 000 running entities through their shards' deliver,
// as the region does under its read lock. The entities are busy
// meanwhile (each blocked in its handler, or waiting for a worker), so
// that a tell only queues the message, without waking a worker: the time
// is the shard's and the mailbox's, not the scheduler's.
//
//	go test -run '^$' -bench 'ShardDeliver$' -benchmem -count 3 ./sharding
func BenchmarkShardDeliver(b *testing.B) {
	const entities = 1_000
	var handled atomic.Int64
	gate := make(chan struct{})
	r := fastRegion(b, Settings{}, func(entity.Context[string]) entity.Behavior[string] {
		return entity.Receive(func(_ entity.Context[string], m string) entity.Behavior[string] {
			if m == "block" {
				<-gate
			}
			handled.Add(1)
			return entity.Same[string]()
		})
	})
	ids := make([]string, entities)
	shards := make([]*shard[string], entities)
	tellAll := func(m string) {
		for _, id := range ids {
			if err := r.EntityRefFor(id).Tell(m); err != nil {
				b.Fatal(err)
			}
		}
	}
	waitFor := func(n int) {
		for handled.Load() < int64(n) {
			goruntime.Gosched()
		}
	}
	for i := range ids {
		ids[i] = strconv.Itoa(i)
	}
	tellAll("start")
	waitFor(entities)
	r.mu.Lock()
	for i, id := range ids {
		sh, ok := r.core.local(r.ShardID(id))
		if !ok {
			r.mu.Unlock()
			b.Fatalf("shard of %s not hosted", id)
		}
		shards[i] = sh
	}
	r.mu.Unlock()
	tellAll("block")
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		k := i % entities
		if err := shards[k].deliver(ids[k], "m", false, false, false, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	close(gate)
	waitFor(2*entities + b.N)
}
