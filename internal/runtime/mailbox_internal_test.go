package runtime

import (
	goruntime "runtime"
	"sync/atomic"
	"testing"
)

// burstCells spawns n entities of one Props that count what they handle,
// and waits until they are idle.
func burstCells(tb testing.TB, n int, handled *atomic.Int64) []*Cell[int] {
	tb.Helper()
	sys, err := NewSystem(Config{NodeID: "n"})
	if err != nil {
		tb.Fatal(err)
	}
	props := &Props[int]{Key: NewTypeKey[int]("T"), Create: func(Context[int]) Behavior[int] {
		return Receive(func(Context[int], int) Behavior[int] { handled.Add(1); return Same[int]() })
	}}
	cells := make([]*Cell[int], n)
	for i := range cells {
		cells[i] = Spawn(sys, props, string(rune('a'+i)))
	}
	for _, c := range cells {
		waitIdle(c)
	}
	return cells
}

// waitIdle returns once c has run out of work: an unscheduled cell has an
// empty mailbox and has given up its run's buffer.
func waitIdle[C any](c *Cell[C]) {
	for {
		c.mu.Lock()
		idle := c.status&scheduled == 0
		c.mu.Unlock()
		if idle {
			return
		}
		goruntime.Gosched()
	}
}

// tellBurst tells the idle cell c n messages at once: they are held in the
// mailbox until the last is queued, so the buffer grows to n whatever the
// scheduling, then the cell runs them and goes idle.
func tellBurst(tb testing.TB, c *Cell[int], n int) {
	tb.Helper()
	c.mu.Lock()
	c.status |= suspended
	c.mu.Unlock()
	for i := range n {
		if err := c.Tell(i); err != nil {
			tb.Fatal(err)
		}
	}
	c.mu.Lock()
	c.status = c.status&^suspended | scheduled
	c.mu.Unlock()
	c.sys.dispatch.submit(c)
	waitIdle(c)
}

// BenchmarkBurstyTell tells several entities of one type a burst each, with
// idle in between, as a node spreading a stream of remote tells over its
// entities does: an op is one burst to every entity.
func BenchmarkBurstyTell(b *testing.B) {
	const entities, burst = 20, 64
	var handled atomic.Int64
	cells := burstCells(b, entities, &handled)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		for _, c := range cells {
			tellBurst(b, c, burst)
		}
	}
	b.StopTimer()
	if got, want := handled.Load(), int64(b.N*entities*burst); got != want {
		b.Fatalf("handled %d messages, want %d", got, want)
	}
}
