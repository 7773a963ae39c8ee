package entity_test

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/shoal-dev/shoal/internal/ring"
)

// The baseline is the bare prototype the typed runtime is measured against:
// a mutex-guarded mailbox per entity, a scheduled flag, and one mutex-guarded
// run queue served by GOMAXPROCS long-lived workers. It has no generics over
// the command type, no control messages, no suspension, no stash, no stop,
// no panic recovery. BenchmarkTell and BenchmarkBaselineTell run the same
// load (same senders, same entity counts, same handler), so their ratio in
// one run is the cost of everything the real runtime adds.

type baseMailbox struct {
	mu        sync.Mutex
	q         ring.Queue[benchMsg]
	scheduled bool
	handle    func(benchMsg)
	rq        *baseRunQueue
}

type baseRunQueue struct {
	mu      sync.Mutex
	cond    sync.Cond
	q       ring.Queue[*baseMailbox]
	closed  bool
	waiting int
}

const baseThroughput = 64 // as entity.Config's default

func (m *baseMailbox) tell(msg benchMsg) {
	m.mu.Lock()
	m.q.Push(msg)
	start := !m.scheduled
	m.scheduled = true
	m.mu.Unlock()
	if start {
		m.rq.push(m)
	}
}

func (m *baseMailbox) run() {
	for range baseThroughput {
		m.mu.Lock()
		msg, ok := m.q.Pop()
		if !ok {
			m.scheduled = false
			m.mu.Unlock()
			return
		}
		m.mu.Unlock()
		m.handle(msg)
	}
	m.rq.push(m)
}

func (r *baseRunQueue) push(m *baseMailbox) {
	r.mu.Lock()
	r.q.Push(m)
	wake := r.waiting > 0
	r.mu.Unlock()
	if wake {
		r.cond.Signal()
	}
}

func (r *baseRunQueue) work() {
	for {
		r.mu.Lock()
		m, ok := r.q.Pop()
		for !ok && !r.closed {
			r.waiting++
			r.cond.Wait()
			r.waiting--
			m, ok = r.q.Pop()
		}
		r.mu.Unlock()
		if !ok {
			return
		}
		m.run()
	}
}

func benchBaselineTell(b *testing.B, entities int) {
	rq := &baseRunQueue{}
	rq.cond.L = &rq.mu
	workers := runtime.GOMAXPROCS(0)
	var wwg sync.WaitGroup
	for range workers {
		wwg.Go(rq.work)
	}
	defer func() {
		rq.mu.Lock()
		rq.closed = true
		rq.mu.Unlock()
		rq.cond.Broadcast()
		wwg.Wait()
	}()
	var handled atomic.Int64
	want := int64(b.N)
	done := make(chan struct{})
	handle := func(benchMsg) {
		if handled.Add(1) == want {
			close(done)
		}
	}
	boxes := make([]*baseMailbox, entities)
	for i := range boxes {
		boxes[i] = &baseMailbox{handle: handle, rq: rq}
	}
	senders := runtime.GOMAXPROCS(0)
	b.ResetTimer()
	var wg sync.WaitGroup
	for w := range senders {
		wg.Go(func() {
			for i := w; i < b.N; i += senders {
				boxes[i%entities].tell(benchMsg{})
			}
		})
	}
	wg.Wait()
	if b.N > 0 {
		<-done
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tells/s")
}

// BenchmarkBaselineTell is BenchmarkTell on the bare mutex-and-run-queue
// prototype; compare the two from the same run.
func BenchmarkBaselineTell(b *testing.B) {
	b.Run("entities=1", func(b *testing.B) { benchBaselineTell(b, 1) })
	b.Run("entities=10000", func(b *testing.B) { benchBaselineTell(b, 10000) })
}

// The baseline must deliver every message exactly once, in per-sender
// order, or its figures mean nothing.
func TestBaselineDeliversEverything(t *testing.T) {
	rq := &baseRunQueue{}
	rq.cond.L = &rq.mu
	var wwg sync.WaitGroup
	for range 2 {
		wwg.Go(rq.work)
	}
	const entities, perEntity = 50, 200
	var handled atomic.Int64
	done := make(chan struct{})
	boxes := make([]*baseMailbox, entities)
	for i := range boxes {
		boxes[i] = &baseMailbox{rq: rq, handle: func(benchMsg) {
			if handled.Add(1) == entities*perEntity {
				close(done)
			}
		}}
	}
	for range perEntity {
		for _, m := range boxes {
			m.tell(benchMsg{})
		}
	}
	recv(t, done)
	rq.mu.Lock()
	rq.closed = true
	rq.mu.Unlock()
	rq.cond.Broadcast()
	wwg.Wait()
	if n := handled.Load(); n != entities*perEntity {
		t.Fatalf("handled %d, want %d", n, entities*perEntity)
	}
}
