package eventsourced_test

import (
	"context"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/eventsourced"
	"github.com/shoal-dev/shoal/journal"
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

type idleCmd struct{}

var idleKey = entity.NewTypeKey[idleCmd]("Idle")

// BenchmarkIdleEntityMemory reports the heap bytes each resident, idle,
// recovered event-sourced entity costs the runtime, over 1,000,000
// entities: its cell, behavior and recovery leftovers, with an empty state
// (user state excluded) and ids allocated beforehand, as entity's
// BenchmarkIdleEntityMemory does for a plain entity. Each entity recovers
// from an empty memory journal and handles one command.
func BenchmarkIdleEntityMemory(b *testing.B) {
	const n = 1_000_000
	for range b.N {
		var handled atomic.Int64
		done := make(chan struct{})
		create := func(ec entity.Context[idleCmd]) entity.Behavior[idleCmd] {
			return eventsourced.New(eventsourced.Config[idleCmd, event, struct{}]{
				PersistenceID: eventsourced.PersistenceIDOf(idleKey, ec.EntityID()),
				OnCommand: func(ctx eventsourced.CommandContext[idleCmd, event, struct{}], _ struct{}, _ idleCmd) eventsourced.Effect[event, struct{}] {
					if handled.Add(1) == n {
						close(done)
					}
					return ctx.None()
				},
				OnEvent: func(_ eventsourced.Context[idleCmd], s struct{}, _ event) struct{} { return s },
			})
		}
		sys, _ := entity.NewSystem(entity.Config{Codec: newRegistry(), Journal: memory.New(), Logger: quietLogger()})
		props := &entity.Props[idleCmd]{Key: idleKey, Create: create}
		ids := make([]string, n)
		for i := range ids {
			ids[i] = strconv.Itoa(i)
		}
		cells := make([]*entity.Cell[idleCmd], n)
		before := heapInUse()
		for i := range cells {
			cells[i] = entity.Spawn(sys, props, ids[i])
			_ = cells[i].Tell(idleCmd{})
		}
		<-done
		after := heapInUse()
		b.ReportMetric(float64(after-before)/n, "bytes/entity")
		runtime.KeepAlive(cells)
		runtime.KeepAlive(ids)
	}
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkRecoverShortHistory measures an incarnation's start over a
// history of two events, as a passivated entity's next message causes:
// spawn, recover, answer one command, stop.
func BenchmarkRecoverShortHistory(b *testing.B) {
	j := memory.New()
	reg := newRegistry()
	for seq, item := range []string{"a", "b"} {
		m, p, err := reg.Encode(added{Item: item})
		if err != nil {
			b.Fatal(err)
		}
		if err := j.Write(context.Background(), []journal.Event{{PersistenceID: "List|short", SeqNr: uint64(seq) + 1, Manifest: m, Payload: p}}); err != nil {
			b.Fatal(err)
		}
	}
	sys, _ := entity.NewSystem(entity.Config{Codec: reg, Journal: j, Logger: quietLogger()})
	props := &entity.Props[cmd]{Key: listKey, Create: listEntity(listOptions{})}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		cell := entity.Spawn(sys, props, "short")
		items, err := entity.Ask(ctx, cell, func(r entity.ReplyTo[[]string]) cmd { return getItems{ReplyTo: r} })
		if err != nil || len(items) != 2 {
			b.Fatalf("items %q, err %v", items, err)
		}
		cell.StopNow()
		<-cell.Done()
	}
}

// BenchmarkRecoverLongHistory measures recovery's decode and apply over a
// history of 2000 events, read in pages on a reader goroutine.
func BenchmarkRecoverLongHistory(b *testing.B) {
	const n = 2000
	j := memory.New()
	reg := newRegistry()
	for seq := range n {
		m, p, err := reg.Encode(added{Item: "x"})
		if err != nil {
			b.Fatal(err)
		}
		if err := j.Write(context.Background(), []journal.Event{{PersistenceID: "List|long", SeqNr: uint64(seq) + 1, Manifest: m, Payload: p}}); err != nil {
			b.Fatal(err)
		}
	}
	sys, _ := entity.NewSystem(entity.Config{Codec: reg, Journal: j, Logger: quietLogger()})
	count := func(ec entity.Context[cmd]) entity.Behavior[cmd] {
		return eventsourced.New(eventsourced.Config[cmd, event, int]{
			PersistenceID: eventsourced.PersistenceIDOf(listKey, ec.EntityID()),
			OnCommand: func(ctx eventsourced.CommandContext[cmd, event, int], n int, c cmd) eventsourced.Effect[event, int] {
				if c, ok := c.(addAndReply); ok {
					return ctx.Reply(eventsourced.To(c.ReplyTo, n))
				}
				return ctx.Unhandled()
			},
			OnEvent: func(_ eventsourced.Context[cmd], n int, _ event) int { return n + 1 },
		})
	}
	props := &entity.Props[cmd]{Key: listKey, Create: count}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		cell := entity.Spawn(sys, props, "long")
		if got, err := entity.Ask(ctx, cell, func(r entity.ReplyTo[int]) cmd { return addAndReply{ReplyTo: r} }); err != nil || got != n {
			b.Fatalf("recovered %d events, %v; want %d", got, err, n)
		}
		cell.StopNow()
		<-cell.Done()
	}
}
