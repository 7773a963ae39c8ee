package entity_test

import (
	"context"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/entity"
)

type benchMsg struct{}

var benchKey = entity.NewTypeKey[benchMsg]("bench")

// sink counts handled messages and signals when the expected total arrives.
type sink struct {
	handled atomic.Int64
	want    int64
	done    chan struct{}
}

func (s *sink) create(entity.Context[benchMsg]) entity.Behavior[benchMsg] {
	return entity.Receive(func(entity.Context[benchMsg], benchMsg) entity.Behavior[benchMsg] {
		if s.handled.Add(1) == s.want {
			close(s.done)
		}
		return entity.Same[benchMsg]()
	})
}

func benchTell(b *testing.B, entities int) {
	sys := newSystem(b)
	s := &sink{want: int64(b.N), done: make(chan struct{})}
	props := &entity.Props[benchMsg]{Key: benchKey, Create: s.create}
	cells := make([]*entity.Cell[benchMsg], entities)
	for i := range cells {
		cells[i] = entity.Spawn(sys, props, strconv.Itoa(i))
	}
	// Senders: one per core, each with its own slice of the work, as
	// independent request handlers would be.
	senders := runtime.GOMAXPROCS(0)
	b.ResetTimer()
	var wg sync.WaitGroup
	for w := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < b.N; i += senders {
				_ = cells[i%entities].Tell(benchMsg{})
			}
		}()
	}
	wg.Wait()
	if b.N > 0 {
		<-s.done
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tells/s")
}

// BenchmarkTell measures messages told and handled per second.
func BenchmarkTell(b *testing.B) {
	b.Run("entities=1", func(b *testing.B) { benchTell(b, 1) })
	b.Run("entities=10000", func(b *testing.B) { benchTell(b, 10000) })
}

// BenchmarkAsk measures one Ask round trip to an idle entity.
func BenchmarkAsk(b *testing.B) {
	sys := newSystem(b)
	c := entity.Spawn(sys, &entity.Props[cmd]{Key: counterKey, Create: counter}, "a")
	ctx := context.Background()
	b.ResetTimer()
	for range b.N {
		if _, err := entity.Ask(ctx, c, func(r entity.ReplyTo[int]) cmd { return get{ReplyTo: r} }); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAskWithDeadline is BenchmarkAsk with a context that has a
// deadline, so the System's default ask timeout is not armed.
func BenchmarkAskWithDeadline(b *testing.B) {
	sys := newSystem(b)
	c := entity.Spawn(sys, &entity.Props[cmd]{Key: counterKey, Create: counter}, "a")
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	b.ResetTimer()
	for range b.N {
		if _, err := entity.Ask(ctx, c, func(r entity.ReplyTo[int]) cmd { return get{ReplyTo: r} }); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkIdleEntityMemory reports the heap bytes each resident, idle
// entity costs the runtime: its cell, mailbox and scheduling state, with a
// behavior that allocates nothing per entity, after it handled one message.
func BenchmarkIdleEntityMemory(b *testing.B) {
	const n = 1_000_000
	for range b.N {
		sys := newSystem(b)
		s := &sink{want: n, done: make(chan struct{})}
		props := &entity.Props[benchMsg]{Key: benchKey, Create: s.create}
		ids := make([]string, n)
		for i := range ids {
			ids[i] = strconv.Itoa(i)
		}
		cells := make([]*entity.Cell[benchMsg], n)
		before := heapInUse()
		for i := range cells {
			cells[i] = entity.Spawn(sys, props, ids[i])
			_ = cells[i].Tell(benchMsg{})
		}
		<-s.done
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
