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
// goroutine tells 10 000 running entities through their shards' deliver,
// as the region does under its read lock.
//
//	go test -run '^$' -bench 'ShardDeliver$' -benchmem -count 3 ./sharding
func BenchmarkShardDeliver(b *testing.B) {
	const entities = 10_000
	var handled atomic.Int64
	r := fastRegion(b, Settings{}, func(entity.Context[string]) entity.Behavior[string] {
		return entity.Receive(func(entity.Context[string], string) entity.Behavior[string] {
			handled.Add(1)
			return entity.Same[string]()
		})
	})
	ids := make([]string, entities)
	shards := make([]*shard[string], entities)
	for i := range ids {
		ids[i] = strconv.Itoa(i)
		if err := r.EntityRefFor(ids[i]).Tell("start"); err != nil {
			b.Fatal(err)
		}
	}
	for handled.Load() < entities {
		goruntime.Gosched()
	}
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
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		k := i % entities
		if err := shards[k].deliver(ids[k], "m", false, false, false, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	for handled.Load() < int64(entities+b.N) {
		goruntime.Gosched()
	}
}
