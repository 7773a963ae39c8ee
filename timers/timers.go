// Package timers schedules keyed messages to an entity: single, fixed-delay
// and fixed-rate timers, each replaced by a later timer of the same key.
//
// A Scheduler never hands its owner a message of a timer that was cancelled
// or replaced, even when that message was already queued: every start gets a
// new generation, and Accept discards ticks of older generations or of
// another Scheduler (a previous incarnation of the entity).
//
// Timer messages do not count as activity for an entity's receive timeout
// unless the timer is started with ResetsReceiveTimeout: an idle entity with
// a periodic timer still passivates.
package timers

import "time"

// Clock is the time source. Production code uses Real; tests use
// testing/synctest (whose bubble fakes the real clock) or a ManualClock.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f in its own goroutine after d.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending AfterFunc call.
type Timer interface {
	// Stop prevents the call if it has not started; it reports whether it did.
	Stop() bool
}

// Real is the wall clock.
type Real struct{}

// Now implements Clock with time.Now.
func (Real) Now() time.Time { return time.Now() }

// AfterFunc implements Clock with time.AfterFunc.
func (Real) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// Tick is what a firing timer posts to its owner's mailbox. The owner passes
// it back to Accept when the tick reaches the head of the mailbox.
type Tick struct {
	key    string
	gen    uint64
	owner  any
	resets bool
}

// ResetsReceiveTimeout reports whether the tick's message counts as
// activity for the receive timeout (the timer was started with the
// ResetsReceiveTimeout option).
func (t Tick) ResetsReceiveTimeout() bool { return t.resets }

// Option adjusts one timer.
type Option func(*options)

type options struct{ resetsReceiveTimeout bool }

// ResetsReceiveTimeout makes the timer's messages restart the entity's
// receive timeout, like any other message. By default they do not, so that
// a timer (a periodic one above all) never keeps an idle entity alive.
func ResetsReceiveTimeout() Option {
	return func(o *options) { o.resetsReceiveTimeout = true }
}

type mode uint8

const (
	single mode = iota
	fixedDelay
	fixedRate
)

type timer[C any] struct {
	msg      C
	gen      uint64
	mode     mode
	interval time.Duration
	next     time.Time // fixed rate: when the pending tick was due
	pending  Timer
	resets   bool
}

// Scheduler holds one entity incarnation's timers. Its methods are called
// from that entity's handler only; post may be called from any goroutine.
type Scheduler[C any] struct {
	clock  Clock
	post   func(Tick)
	timers map[string]*timer[C]
	gen    uint64
}

// New returns a Scheduler that reads time from clock and delivers ticks with
// post, which must be safe to call from any goroutine.
func New[C any](clock Clock, post func(Tick)) *Scheduler[C] {
	return &Scheduler[C]{clock: clock, post: post, timers: make(map[string]*timer[C])}
}

// StartSingleTimer delivers msg once after delay.
func (s *Scheduler[C]) StartSingleTimer(key string, msg C, delay time.Duration, opts ...Option) {
	s.start(key, &timer[C]{msg: msg, mode: single}, delay, opts)
}

// StartSingleTimerAt delivers msg once at deadline, or at once when the
// deadline has passed: an event handler that re-arms a timer during
// recovery gets the timeout that fell due while the entity was down. Name
// the timer with DeadlineKey when each deadline needs its own timer.
func (s *Scheduler[C]) StartSingleTimerAt(key string, msg C, deadline time.Time, opts ...Option) {
	s.start(key, &timer[C]{msg: msg, mode: single}, deadline.Sub(s.clock.Now()), opts)
}

// DeadlineKey is the key of a timer for one deadline: name and the instant
// in UTC. Equal instants give equal keys, whatever the location or the
// monotonic reading (which a trip through a journal drops), so an event
// handler that re-arms the timer during replay replaces the same timer,
// and the timers of two deadlines never replace each other.
func DeadlineKey(name string, deadline time.Time) string {
	return name + "@" + deadline.UTC().Format(time.RFC3339Nano)
}

// StartTimerWithFixedDelay delivers msg after initialDelay, then again
// delay after each tick is taken from the mailbox, so a busy entity never
// accumulates ticks.
func (s *Scheduler[C]) StartTimerWithFixedDelay(key string, msg C, initialDelay, delay time.Duration, opts ...Option) {
	s.start(key, &timer[C]{msg: msg, mode: fixedDelay, interval: delay}, initialDelay, opts)
}

// StartTimerAtFixedRate delivers msg after initialDelay and then every
// interval, measured from the first due time; after a stall the missed ticks
// follow in quick succession, one at a time.
func (s *Scheduler[C]) StartTimerAtFixedRate(key string, msg C, initialDelay, interval time.Duration, opts ...Option) {
	t := &timer[C]{msg: msg, mode: fixedRate, interval: interval}
	t.next = s.clock.Now().Add(initialDelay)
	s.start(key, t, initialDelay, opts)
}

func (s *Scheduler[C]) start(key string, t *timer[C], delay time.Duration, opts []Option) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	t.resets = o.resetsReceiveTimeout
	s.Cancel(key)
	s.gen++
	t.gen = s.gen
	s.timers[key] = t
	s.arm(key, t, delay)
}

func (s *Scheduler[C]) arm(key string, t *timer[C], delay time.Duration) {
	tick := Tick{key: key, gen: t.gen, owner: s, resets: t.resets}
	t.pending = s.clock.AfterFunc(max(delay, 0), func() { s.post(tick) })
}

// IsActive reports whether a timer with key is running.
func (s *Scheduler[C]) IsActive(key string) bool {
	_, ok := s.timers[key]
	return ok
}

// Cancel stops the timer with key; a tick of it already queued is discarded.
func (s *Scheduler[C]) Cancel(key string) {
	if t, ok := s.timers[key]; ok {
		t.pending.Stop()
		delete(s.timers, key)
	}
}

// CancelAll stops every timer. The runtime calls it when the entity stops.
func (s *Scheduler[C]) CancelAll() {
	for key := range s.timers {
		s.Cancel(key)
	}
}

// Accept turns a tick into its message, or reports false for a stale tick
// (cancelled, replaced, or from another incarnation). A periodic timer is
// rearmed here.
func (s *Scheduler[C]) Accept(tick Tick) (C, bool) {
	var zero C
	if tick.owner != any(s) {
		return zero, false
	}
	t, ok := s.timers[tick.key]
	if !ok || t.gen != tick.gen {
		return zero, false
	}
	switch t.mode {
	case single:
		delete(s.timers, tick.key)
	case fixedDelay:
		s.arm(tick.key, t, t.interval)
	case fixedRate:
		t.next = t.next.Add(t.interval)
		s.arm(tick.key, t, t.next.Sub(s.clock.Now()))
	}
	return t.msg, true
}
