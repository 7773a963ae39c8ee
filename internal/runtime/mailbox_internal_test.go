package runtime

import (
	goruntime "runtime"
	"sync"
	"sync/atomic"
	"testing"
)

// burstCells spawns n entities with one command type that count what they
// handle, each of a Props of its own as the shards of a type have, and
// waits until they are idle.
func burstCells(tb testing.TB, n int, handled *atomic.Int64) []*Cell[int] {
	tb.Helper()
	sys, err := NewSystem(Config{NodeID: "n"})
	if err != nil {
		tb.Fatal(err)
	}
	cells := make([]*Cell[int], n)
	for i := range cells {
		props := &Props[int]{Key: NewTypeKey[int]("T"), HeldCapacity: 1 << 20, Create: func(Context[int]) Behavior[int] {
			return Receive(func(Context[int], int) Behavior[int] { handled.Add(1); return Same[int]() })
		}}
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

// Entities with one command type told in bursts reuse the buffers earlier
// bursts grew, whatever their Props, instead of growing new ones each
// time, and still keep at most a small buffer while idle.
func TestBurstReusesASpareMailbox(t *testing.T) {
	if raceDetector {
		t.Skip("sync.Pool drops items at random under the race detector")
	}
	const burst = 64
	var handled atomic.Int64
	cells := burstCells(t, 2, &handled)
	tellBurst(t, cells[0], burst) // grows a buffer, then spares it
	// AllocsPerRun runs on one P, so the pools give back what they got.
	n := testing.AllocsPerRun(20, func() {
		tellBurst(t, cells[1], burst)
		tellBurst(t, cells[0], burst)
	})
	if n >= 1 { // growing 2, 4, ..., 64 is 6 allocations a burst
		t.Fatalf("two bursts after a first allocated %v times", n)
	}
	for i, c := range cells {
		c.mu.Lock()
		size := c.mailbox.Cap()
		c.mu.Unlock()
		if size > idleMailbox {
			t.Fatalf("idle cell %d keeps a mailbox buffer of %d, want at most %d", i, size, idleMailbox)
		}
	}
}

// Cells swapping buffers with the spares while others tell them keep every
// message, in order.
func TestBurstsSwappingSparesKeepOrder(t *testing.T) {
	const entities, senders, messages = 8, 4, 2000
	sys, err := NewSystem(Config{NodeID: "n"})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(entities)
	cells := make([]*Cell[int], entities)
	for i := range cells {
		next := 0
		props := &Props[int]{Key: NewTypeKey[int]("T"), Create: func(Context[int]) Behavior[int] {
			return Receive(func(_ Context[int], m int) Behavior[int] {
				if m != next {
					t.Errorf("entity %d: got %d, want %d", i, m, next)
				}
				if next = m + 1; next == messages {
					wg.Done()
				}
				return Same[int]()
			})
		}}
		cells[i] = Spawn(sys, props, string(rune('a'+i)))
	}
	for s := range senders { // each sender tells its own entities, in order
		go func() {
			for m := range messages {
				for i := s; i < entities; i += senders {
					if err := cells[i].Tell(m); err != nil {
						t.Error(err)
					}
				}
				if m%97 == 0 {
					goruntime.Gosched() // let some mailboxes drain and go idle
				}
			}
		}()
	}
	wg.Wait()
}

// A burst's buffer too big to be worth holding for whichever cell takes it
// next is not spared.
func TestHugeBurstBufferIsNotSpared(t *testing.T) {
	defer goruntime.GOMAXPROCS(goruntime.GOMAXPROCS(1)) // one P: the pool's Get sees every Put
	var handled atomic.Int64
	cells := burstCells(t, 1, &handled)
	tellBurst(t, cells[0], maxSpare+1)
	if h := sparesOf[int](cells[0].sys).burst.Get(); h != nil {
		t.Fatalf("a buffer of %d was spared", len(h.(*spare[int]).buf))
	}
	tellBurst(t, cells[0], maxSpare)
	h, _ := sparesOf[int](cells[0].sys).burst.Get().(*spare[int])
	if h == nil && !raceDetector {
		t.Fatalf("a buffer of %d was not spared", maxSpare)
	}
}

// A cell whose burst, begun in a spare, outgrew what is worth sparing
// goes idle with its own small buffer back, so that its next message
// allocates none.
func TestHugeBurstKeepsTheIdleBuffer(t *testing.T) {
	if raceDetector {
		t.Skip("sync.Pool drops items at random under the race detector")
	}
	defer goruntime.GOMAXPROCS(goruntime.GOMAXPROCS(1)) // one P: the pool's Get sees every Put
	var handled atomic.Int64
	cells := burstCells(t, 2, &handled)
	tellBurst(t, cells[0], 4) // spares a buffer of 4
	c := cells[1]
	tellBurst(t, c, 1) // its idle buffer
	tellBurst(t, c, maxSpare+1)
	c.mu.Lock()
	size := c.mailbox.Cap()
	c.mu.Unlock()
	if size != idleMailbox {
		t.Fatalf("idle after a huge burst: mailbox buffer of %d, want its own %d", size, idleMailbox)
	}
	if n := testing.AllocsPerRun(20, func() { tellBurst(t, c, 1) }); n != 0 {
		t.Fatalf("a message after a huge burst allocated %v times", n)
	}
}

// BenchmarkBurstyTell tells several entities of a type (a Props each, as
// in shards of their own) a burst each, with idle in between, as a node
// spreading a stream of remote tells over its entities does: an op is one
// burst to every entity.
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
