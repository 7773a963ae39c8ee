package eventsourced_test

import (
	"context"
	"strconv"
	"sync"
	"testing"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/journal/memory"
)

// BenchmarkPersistRoundTrip measures command → persist → event applied →
// reply on the memory journal, one Ask at a time to one entity.
func BenchmarkPersistRoundTrip(b *testing.B) {
	sys, _ := entity.NewSystem(entity.Config{Codec: newRegistry(), Journal: memory.New(), Logger: quietLogger()})
	cell := entity.Spawn(sys, &entity.Props[cmd]{Key: listKey, Create: counterEntity}, "bench")
	ctx := context.Background()
	b.ResetTimer()
	for range b.N {
		if _, err := entity.Ask(ctx, cell, func(r entity.ReplyTo[int]) cmd { return addAndReply{Item: "x", ReplyTo: r} }); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPersistParallel measures persisted commands per second with 1000
// entities persisting concurrently on the memory journal.
func BenchmarkPersistParallel(b *testing.B) {
	sys, _ := entity.NewSystem(entity.Config{Codec: newRegistry(), Journal: memory.New(), Logger: quietLogger()})
	props := &entity.Props[cmd]{Key: listKey, Create: counterEntity}
	const n = 1000
	cells := make([]*entity.Cell[cmd], n)
	for i := range cells {
		cells[i] = entity.Spawn(sys, props, strconv.Itoa(i))
	}
	ctx := context.Background()
	b.ResetTimer()
	var wg sync.WaitGroup
	per := b.N / n
	for _, c := range cells {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range per {
				if _, err := entity.Ask(ctx, c, func(r entity.ReplyTo[int]) cmd { return addAndReply{Item: "x", ReplyTo: r} }); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(float64(per*n)/b.Elapsed().Seconds(), "persists/s")
}
