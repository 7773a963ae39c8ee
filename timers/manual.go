package timers

import (
	"slices"
	"sync"
	"time"
)

// ManualClock is a Clock that only its user moves: for tests that cannot
// run inside a testing/synctest bubble (they use the network, or real
// goroutines outside the bubble). Time stands still until Advance, which
// runs the AfterFunc callbacks that fall due, in due order (ties in the
// order they were scheduled), synchronously on the caller's goroutine, with
// Now at each callback's due time. A callback may schedule more; those
// that fall due within the same Advance run too. Safe for concurrent use.
type ManualClock struct {
	mu      sync.Mutex
	now     time.Time
	seq     uint64
	pending []*manualTimer
}

type manualTimer struct {
	c       *ManualClock
	at      time.Time
	seq     uint64
	f       func()
	stopped bool
	fired   bool
}

// NewManualClock returns a clock standing at start.
func NewManualClock(start time.Time) *ManualClock { return &ManualClock{now: start} }

// Now implements Clock.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc implements Clock: f runs in the Advance that reaches now+d.
func (c *ManualClock) AfterFunc(d time.Duration, f func()) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	t := &manualTimer{c: c, at: c.now.Add(d), seq: c.seq, f: f}
	c.pending = append(c.pending, t)
	return t
}

// Stop implements Timer.
func (t *manualTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	if t.stopped || t.fired {
		return false
	}
	t.stopped = true
	return true
}

// Advance moves time forward by d, running every callback due by then.
func (c *ManualClock) Advance(d time.Duration) {
	c.mu.Lock()
	target := c.now.Add(d)
	for {
		next := c.nextDue(target)
		if next == nil {
			break
		}
		if next.at.After(c.now) {
			c.now = next.at
		}
		next.fired = true
		c.mu.Unlock()
		next.f()
		c.mu.Lock()
	}
	if target.After(c.now) {
		c.now = target
	}
	c.mu.Unlock()
}

// nextDue is the earliest pending timer due by target, dropping the
// fired and stopped ones; nil if none.
func (c *ManualClock) nextDue(target time.Time) *manualTimer {
	c.pending = slices.DeleteFunc(c.pending, func(t *manualTimer) bool { return t.stopped || t.fired })
	var next *manualTimer
	for _, t := range c.pending {
		if t.at.After(target) {
			continue
		}
		if next == nil || t.at.Before(next.at) || (t.at.Equal(next.at) && t.seq < next.seq) {
			next = t
		}
	}
	return next
}

// Pending counts the callbacks neither run nor stopped.
func (c *ManualClock) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, t := range c.pending {
		if !t.stopped && !t.fired {
			n++
		}
	}
	return n
}
