package timers_test

import (
	"slices"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/timers"
)

func TestSingleTimerAtFiresAtTheDeadline(t *testing.T) {
	c, m, s := setup()
	s.StartSingleTimerAt("k", "due", c.Now().Add(3*time.Second))
	c.Advance(3*time.Second - time.Nanosecond)
	if got := handle(s, m); len(got) != 0 {
		t.Fatalf("fired before the deadline: %v", got)
	}
	c.Advance(time.Nanosecond)
	if got := handle(s, m); !slices.Equal(got, []string{"due"}) {
		t.Fatalf("at the deadline got %v, want [due]", got)
	}
	if s.IsActive("k") {
		t.Fatal("a deadline timer is single: still active after firing")
	}
}

// After recovery the deadline may be long gone: the timer fires at once.
func TestSingleTimerAtPastDeadlineFiresAtOnce(t *testing.T) {
	c, m, s := setup()
	s.StartSingleTimerAt("k", "late", c.Now().Add(-time.Hour))
	c.Advance(0)
	if got := handle(s, m); !slices.Equal(got, []string{"late"}) {
		t.Fatalf("got %v, want [late] at once", got)
	}
}

func TestDeadlineKeyIsTheInstant(t *testing.T) {
	d := time.Date(2030, 1, 1, 12, 0, 0, 5, time.UTC)
	// As a journal gives it back: another location, no monotonic reading.
	same := d.In(time.FixedZone("JST", 9*3600))
	withMonotonic := time.Now()
	if timers.DeadlineKey("pt", d) != timers.DeadlineKey("pt", same) {
		t.Fatalf("equal instants, different keys: %q %q", timers.DeadlineKey("pt", d), timers.DeadlineKey("pt", same))
	}
	if timers.DeadlineKey("pt", withMonotonic) != timers.DeadlineKey("pt", withMonotonic.Round(0)) {
		t.Fatal("the monotonic reading changes the key")
	}
	if timers.DeadlineKey("pt", d) == timers.DeadlineKey("pt", d.Add(time.Nanosecond)) {
		t.Fatal("different deadlines share a key")
	}
	if timers.DeadlineKey("a", d) == timers.DeadlineKey("b", d) {
		t.Fatal("different names share a key")
	}
}

// Two phases' deadline timers are independent; re-arming the same deadline
// (as replay does) replaces the timer instead of adding one.
func TestDeadlineKeysKeepPhasesApart(t *testing.T) {
	c, m, s := setup()
	first, second := c.Now().Add(time.Second), c.Now().Add(2*time.Second)
	s.StartSingleTimerAt(timers.DeadlineKey("pt", first), "first", first)
	s.StartSingleTimerAt(timers.DeadlineKey("pt", first), "first", first) // re-armed
	s.StartSingleTimerAt(timers.DeadlineKey("pt", second), "second", second)
	c.Advance(time.Minute)
	if got := handle(s, m); !slices.Equal(got, []string{"first", "second"}) {
		t.Fatalf("got %v, want [first second]", got)
	}
}

func TestTicksCarryTheReceiveTimeoutOption(t *testing.T) {
	c, m, s := setup()
	s.StartSingleTimer("plain", "p", time.Second)
	s.StartTimerWithFixedDelay("keep", "k", time.Second, time.Second, timers.ResetsReceiveTimeout())
	c.Advance(time.Second)
	got := map[string]bool{}
	for _, tick := range m.take() {
		msg, ok := s.Accept(tick)
		if !ok {
			t.Fatalf("tick %v not accepted", tick)
		}
		got[msg] = tick.ResetsReceiveTimeout()
	}
	if want := map[string]bool{"p": false, "k": true}; len(got) != 2 || got["p"] != want["p"] || got["k"] != want["k"] {
		t.Fatalf("ResetsReceiveTimeout by message = %v, want %v", got, want)
	}
	c.Advance(time.Second) // the periodic timer's next tick keeps the option
	ticks := m.take()
	if len(ticks) != 1 || !ticks[0].ResetsReceiveTimeout() {
		t.Fatalf("rearmed periodic ticks %v, want one that resets the receive timeout", ticks)
	}
}
