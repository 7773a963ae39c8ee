package timers_test

import (
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shoal-dev/shoal/timers"
)

// fakeClock is the manual clock the tests move.
type fakeClock = timers.ManualClock

func newFakeClock() *fakeClock {
	return timers.NewManualClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
}

// mailbox stands in for an entity's mailbox: ticks queue up until the test
// lets the "entity" take them.
type mailbox struct {
	mu    sync.Mutex
	ticks []timers.Tick
}

func (m *mailbox) post(t timers.Tick) {
	m.mu.Lock()
	m.ticks = append(m.ticks, t)
	m.mu.Unlock()
}

func (m *mailbox) take() []timers.Tick {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := m.ticks
	m.ticks = nil
	return out
}

func (m *mailbox) len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.ticks)
}

// handle accepts every queued tick in order, as the entity would.
func handle(s *timers.Scheduler[string], m *mailbox) []string {
	var out []string
	for _, t := range m.take() {
		if msg, ok := s.Accept(t); ok {
			out = append(out, msg)
		}
	}
	return out
}

func setup() (*fakeClock, *mailbox, *timers.Scheduler[string]) {
	c := newFakeClock()
	m := &mailbox{}
	return c, m, timers.New[string](c, m.post)
}

func TestSingleTimerFiresOnce(t *testing.T) {
	c, m, s := setup()
	s.StartSingleTimer("k", "hello", 100*time.Millisecond)
	if !s.IsActive("k") {
		t.Fatal("IsActive false right after start")
	}
	c.Advance(99 * time.Millisecond)
	if m.len() != 0 {
		t.Fatal("fired before its delay")
	}
	c.Advance(time.Millisecond)
	ticks := m.take()
	if len(ticks) != 1 {
		t.Fatalf("%d ticks at the delay, want 1", len(ticks))
	}
	if !s.IsActive("k") {
		t.Fatal("IsActive false while its tick waits in the mailbox")
	}
	msg, ok := s.Accept(ticks[0])
	if !ok || msg != "hello" {
		t.Fatalf("Accept = %q, %v", msg, ok)
	}
	if s.IsActive("k") {
		t.Fatal("IsActive true after the single timer was delivered")
	}
	if _, ok := s.Accept(ticks[0]); ok {
		t.Fatal("the same tick was accepted twice")
	}
	c.Advance(time.Hour)
	if m.len() != 0 || c.Pending() != 0 {
		t.Fatalf("single timer fired again: %d ticks, %d armed", m.len(), c.Pending())
	}
}

func TestSameKeyReplacesPendingTimer(t *testing.T) {
	c, m, s := setup()
	s.StartSingleTimer("k", "old", 100*time.Millisecond)
	c.Advance(50 * time.Millisecond)
	s.StartSingleTimer("k", "new", 100*time.Millisecond)
	if c.Pending() != 1 {
		t.Fatalf("%d timers armed after replace, want 1 (old one stopped)", c.Pending())
	}
	c.Advance(50 * time.Millisecond) // old due time
	if got := handle(s, m); len(got) != 0 {
		t.Fatalf("old timer delivered %v", got)
	}
	c.Advance(50 * time.Millisecond)
	if got := handle(s, m); !slices.Equal(got, []string{"new"}) {
		t.Fatalf("delivered %v, want [new]", got)
	}
}

func TestReplacedTimerTickAlreadyQueuedIsDiscarded(t *testing.T) {
	for _, mode := range []string{"single", "fixed-delay", "fixed-rate"} {
		t.Run(mode, func(t *testing.T) {
			c, m, s := setup()
			start := func(msg string) {
				switch mode {
				case "single":
					s.StartSingleTimer("k", msg, 10*time.Millisecond)
				case "fixed-delay":
					s.StartTimerWithFixedDelay("k", msg, 10*time.Millisecond, 10*time.Millisecond)
				case "fixed-rate":
					s.StartTimerAtFixedRate("k", msg, 10*time.Millisecond, 10*time.Millisecond)
				}
			}
			start("old")
			c.Advance(10 * time.Millisecond) // old tick queued, not yet handled
			if m.len() != 1 {
				t.Fatalf("%d ticks queued, want 1", m.len())
			}
			start("new")
			if got := handle(s, m); len(got) != 0 {
				t.Fatalf("queued tick of the replaced timer delivered %v", got)
			}
			c.Advance(10 * time.Millisecond)
			if got := handle(s, m); !slices.Equal(got, []string{"new"}) {
				t.Fatalf("delivered %v, want [new]", got)
			}
		})
	}
}

func TestCancelDiscardsQueuedTick(t *testing.T) {
	c, m, s := setup()
	s.StartTimerWithFixedDelay("k", "x", 10*time.Millisecond, 10*time.Millisecond)
	c.Advance(10 * time.Millisecond)
	if m.len() != 1 {
		t.Fatalf("%d ticks queued, want 1", m.len())
	}
	s.Cancel("k")
	if s.IsActive("k") {
		t.Fatal("IsActive after Cancel")
	}
	if got := handle(s, m); len(got) != 0 {
		t.Fatalf("cancelled timer delivered %v", got)
	}
	c.Advance(time.Second)
	if m.len() != 0 || c.Pending() != 0 {
		t.Fatalf("cancelled timer still running: %d ticks, %d armed", m.len(), c.Pending())
	}
	s.Cancel("k")       // again: no-op
	s.Cancel("missing") // unknown: no-op
}

func TestCancelPendingTimerStopsClockTimer(t *testing.T) {
	c, m, s := setup()
	s.StartSingleTimer("a", "a", time.Second)
	s.StartSingleTimer("b", "b", time.Second)
	s.Cancel("a")
	if c.Pending() != 1 {
		t.Fatalf("%d armed after cancelling one of two, want 1", c.Pending())
	}
	c.Advance(time.Second)
	if got := handle(s, m); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("delivered %v, want [b]", got)
	}
}

func TestCancelAll(t *testing.T) {
	c, m, s := setup()
	s.StartSingleTimer("single", "s", 10*time.Millisecond)
	s.StartTimerWithFixedDelay("delay", "d", 10*time.Millisecond, 10*time.Millisecond)
	s.StartTimerAtFixedRate("rate", "r", 10*time.Millisecond, 10*time.Millisecond)
	s.StartSingleTimer("later", "l", time.Hour)
	c.Advance(10 * time.Millisecond) // three ticks queued, one still armed
	if m.len() != 3 {
		t.Fatalf("%d ticks queued, want 3", m.len())
	}
	s.CancelAll()
	for _, k := range []string{"single", "delay", "rate", "later"} {
		if s.IsActive(k) {
			t.Fatalf("%s active after CancelAll", k)
		}
	}
	if got := handle(s, m); len(got) != 0 {
		t.Fatalf("delivered %v after CancelAll", got)
	}
	if c.Pending() != 0 {
		t.Fatalf("%d clock timers still armed after CancelAll", c.Pending())
	}
	c.Advance(2 * time.Hour)
	if m.len() != 0 {
		t.Fatal("ticks after CancelAll")
	}
	// Usable again afterwards.
	s.StartSingleTimer("single", "again", time.Millisecond)
	c.Advance(time.Millisecond)
	if got := handle(s, m); !slices.Equal(got, []string{"again"}) {
		t.Fatalf("after CancelAll, delivered %v", got)
	}
}

func TestKeysAreIndependent(t *testing.T) {
	c, m, s := setup()
	s.StartSingleTimer("a", "a", 20*time.Millisecond)
	s.StartSingleTimer("b", "b", 10*time.Millisecond)
	c.Advance(30 * time.Millisecond)
	if got := handle(s, m); !slices.Equal(got, []string{"b", "a"}) {
		t.Fatalf("delivered %v, want [b a]", got)
	}
}

func TestZeroAndNegativeDelayFireImmediately(t *testing.T) {
	c, m, s := setup()
	s.StartSingleTimer("zero", "z", 0)
	s.StartSingleTimer("neg", "n", -time.Second)
	c.Advance(0)
	if got := handle(s, m); !slices.Equal(got, []string{"z", "n"}) {
		t.Fatalf("delivered %v, want [z n]", got)
	}
}

func TestIsActiveForPeriodicTimers(t *testing.T) {
	c, m, s := setup()
	s.StartTimerWithFixedDelay("p", "p", 10*time.Millisecond, 10*time.Millisecond)
	for range 3 {
		c.Advance(10 * time.Millisecond)
		if got := handle(s, m); len(got) != 1 {
			t.Fatalf("delivered %v, want one tick", got)
		}
		if !s.IsActive("p") {
			t.Fatal("periodic timer inactive after a delivery")
		}
	}
	if s.IsActive("other") {
		t.Fatal("IsActive of a key never started")
	}
}

// Fixed delay: the next tick is armed only when the previous one is taken
// from the mailbox, so a stalled entity never accumulates ticks, and the
// period after a stall is measured from when the tick was handled.
func TestFixedDelayDoesNotAccumulateAndMeasuresFromHandling(t *testing.T) {
	c, m, s := setup()
	s.StartTimerWithFixedDelay("k", "tick", 100*time.Millisecond, 50*time.Millisecond)
	c.Advance(99 * time.Millisecond)
	if m.len() != 0 {
		t.Fatal("fired before the initial delay")
	}
	c.Advance(time.Millisecond) // t=100: first tick
	if m.len() != 1 {
		t.Fatalf("%d ticks at initial delay, want 1", m.len())
	}
	c.Advance(500 * time.Millisecond) // stalled until t=600
	if m.len() != 1 {
		t.Fatalf("%d ticks queued during a stall, want 1 (fixed delay never accumulates)", m.len())
	}
	if got := handle(s, m); len(got) != 1 { // handled at t=600
		t.Fatalf("delivered %v", got)
	}
	c.Advance(49 * time.Millisecond)
	if m.len() != 0 {
		t.Fatal("next tick earlier than delay after handling")
	}
	c.Advance(time.Millisecond) // t=650
	if got := handle(s, m); len(got) != 1 {
		t.Fatalf("no tick delay after handling: %v", got)
	}
}

// Fixed rate: ticks stay on the schedule initialDelay + n*interval, measured
// from the first due time; after a stall the missed ones follow one at a
// time, each armed when the previous one is handled.
func TestFixedRateCatchesUpOneAtATime(t *testing.T) {
	c, m, s := setup()
	s.StartTimerAtFixedRate("k", "tick", 100*time.Millisecond, 100*time.Millisecond)
	c.Advance(100 * time.Millisecond) // t=100, due #1
	if got := handle(s, m); len(got) != 1 {
		t.Fatalf("delivered %v at t=100", got)
	}
	c.Advance(100 * time.Millisecond) // t=200, due #2
	if m.len() != 1 {
		t.Fatalf("%d ticks at t=200, want 1", m.len())
	}
	c.Advance(250 * time.Millisecond) // stalled until t=450; due #3 (300) and #4 (400) missed
	if m.len() != 1 {
		t.Fatalf("%d ticks queued during the stall, want 1 (one at a time)", m.len())
	}
	delivered := 0
	for range 10 { // catch-up: each handled tick arms the next, due in the past
		got := handle(s, m)
		delivered += len(got)
		c.Advance(0)
		if m.len() == 0 {
			break
		}
		if m.len() != 1 {
			t.Fatalf("%d ticks queued at once during catch-up, want 1", m.len())
		}
	}
	if delivered != 3 {
		t.Fatalf("caught up %d ticks at t=450, want 3 (due 200, 300, 400)", delivered)
	}
	c.Advance(49 * time.Millisecond)
	if m.len() != 0 {
		t.Fatal("tick before the next scheduled due time t=500")
	}
	c.Advance(time.Millisecond) // t=500
	if got := handle(s, m); len(got) != 1 {
		t.Fatalf("no tick at t=500: %v", got)
	}
}

// Handling each tick late does not shift a fixed-rate schedule but does
// shift a fixed-delay one.
func TestFixedRateDoesNotDriftFixedDelayDoes(t *testing.T) {
	const late = 30 * time.Millisecond
	for _, tc := range []struct {
		name  string
		start func(*timers.Scheduler[string])
		// due times of ticks 2..4, relative to the start
		want []time.Duration
	}{
		{"fixed-rate", func(s *timers.Scheduler[string]) {
			s.StartTimerAtFixedRate("k", "t", 100*time.Millisecond, 100*time.Millisecond)
		}, []time.Duration{200, 300, 400}},
		{"fixed-delay", func(s *timers.Scheduler[string]) {
			s.StartTimerWithFixedDelay("k", "t", 100*time.Millisecond, 100*time.Millisecond)
		}, []time.Duration{230, 360, 490}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, m, s := setup()
			t0 := c.Now()
			tc.start(s)
			var due []time.Duration
			for len(due) < 4 {
				c.Advance(time.Millisecond)
				if m.len() == 0 {
					continue
				}
				due = append(due, c.Now().Sub(t0)/time.Millisecond)
				c.Advance(late) // the entity is busy for 30ms before it takes the tick
				if got := handle(s, m); len(got) != 1 {
					t.Fatalf("delivered %v", got)
				}
			}
			if due[0] != 100 || !slices.Equal(due[1:], tc.want) {
				t.Fatalf("ticks posted at %v ms, want [100 %v]", due, tc.want)
			}
		})
	}
}

// A new incarnation gets a new Scheduler whose generations start over; a
// tick of the old incarnation's Scheduler must not be mistaken for its own.
func TestTickOfPreviousIncarnationDiscarded(t *testing.T) {
	c := newFakeClock()
	m := &mailbox{}
	old := timers.New[string](c, m.post)
	old.StartSingleTimer("k", "old", 10*time.Millisecond)
	c.Advance(10 * time.Millisecond)
	stale := m.take()
	if len(stale) != 1 {
		t.Fatalf("%d ticks, want 1", len(stale))
	}
	cur := timers.New[string](c, m.post)
	cur.StartSingleTimer("k", "new", 10*time.Millisecond) // same key, same generation number
	if msg, ok := cur.Accept(stale[0]); ok {
		t.Fatalf("new incarnation accepted the old one's tick: %q", msg)
	}
	if !cur.IsActive("k") {
		t.Fatal("stale tick cancelled the new timer")
	}
	c.Advance(10 * time.Millisecond)
	fresh := m.take()
	if len(fresh) != 1 {
		t.Fatalf("%d ticks, want 1", len(fresh))
	}
	if _, ok := old.Accept(fresh[0]); ok {
		t.Fatal("old scheduler accepted the new one's tick")
	}
	if msg, ok := cur.Accept(fresh[0]); !ok || msg != "new" {
		t.Fatalf("Accept = %q, %v", msg, ok)
	}
	if _, ok := cur.Accept(timers.Tick{}); ok {
		t.Fatal("zero Tick accepted")
	}
}

// The same semantics with the real clock inside a synctest bubble, where
// time is fake and AfterFunc runs its callback on its own goroutine.
func TestSchedulerWithRealClockInSynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ch := make(chan timers.Tick, 16)
		s := timers.New[string](timers.Real{}, func(tk timers.Tick) { ch <- tk })
		start := time.Now()
		s.StartTimerWithFixedDelay("p", "p", 100*time.Millisecond, 50*time.Millisecond)
		s.StartSingleTimer("once", "once", 120*time.Millisecond)
		var got []string
		var at []time.Duration
		for len(got) < 4 {
			tk := <-ch
			if msg, ok := s.Accept(tk); ok {
				got = append(got, msg)
				at = append(at, time.Since(start))
			}
		}
		if !slices.Equal(got, []string{"p", "once", "p", "p"}) {
			t.Fatalf("delivered %v", got)
		}
		want := []time.Duration{100 * time.Millisecond, 120 * time.Millisecond, 150 * time.Millisecond, 200 * time.Millisecond}
		if !slices.Equal(at, want) {
			t.Fatalf("delivered at %v, want %v", at, want)
		}
		s.CancelAll()
		time.Sleep(time.Second)
		synctest.Wait()
		if len(ch) != 0 {
			t.Fatalf("%d ticks after CancelAll", len(ch))
		}
	})
}
