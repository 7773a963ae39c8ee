package entity_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/internal/runtime"
)

// at records a message and the bubble time since start.
type at struct {
	Msg string
	At  time.Duration
}

func (a at) String() string { return fmt.Sprintf("%s@%v", a.Msg, a.At) }

// timerEntity interprets string commands:
//
//	single <msg> <d>            StartSingleTimer("k", msg, d)
//	delay <msg> <d>             StartTimerWithFixedDelay("k", msg, d, d)
//	rate <msg> <d>              StartTimerAtFixedRate("k", msg, d, d)
//	sleep <d>                   busy (handler sleeps d of bubble time)
//	cancel                      Cancel("k")
//	cancelall                   CancelAll()
//	stop                        Stopped
//
// Everything else is recorded with its arrival time.
func timerEntity(t *testing.T, sys *entity.System, id string, start time.Time, got *recorder[at], active *recorder[bool]) *entity.Cell[string] {
	return spawnFunc(sys, id, func(ctx entity.Context[string], m string) entity.Behavior[string] {
		op, msg, d := parseOp(t, m)
		switch op {
		case "single":
			ctx.Timers().StartSingleTimer("k", msg, d)
		case "delay":
			ctx.Timers().StartTimerWithFixedDelay("k", msg, d, d)
		case "rate":
			ctx.Timers().StartTimerAtFixedRate("k", msg, d, d)
		case "sleep":
			time.Sleep(d)
		case "cancel":
			ctx.Timers().Cancel("k")
		case "cancelall":
			ctx.Timers().CancelAll()
		case "active":
			active.add(ctx.Timers().IsActive("k"))
		case "stop":
			return entity.Stopped[string]()
		default:
			got.add(at{m, time.Since(start)})
		}
		return entity.Same[string]()
	})
}

// parseOp splits "op [msg] [duration]".
func parseOp(t *testing.T, s string) (op, msg string, d time.Duration) {
	f := strings.Fields(s)
	op = f[0]
	rest := f[1:]
	if op == "sleep" && len(rest) == 1 {
		rest = []string{"", rest[0]}
	}
	if len(rest) > 0 {
		msg = rest[0]
	}
	if len(rest) > 1 {
		var err error
		if d, err = time.ParseDuration(rest[1]); err != nil {
			t.Error(err)
		}
	}
	return op, msg, d
}

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

func TestEntitySingleTimerFiresOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sys := newSystem(t)
		var got recorder[at]
		var active recorder[bool]
		start := time.Now()
		c := timerEntity(t, sys, "t", start, &got, &active)
		mustTell(t, c, "single fire 100ms")
		mustTell(t, c, "active")
		time.Sleep(time.Second)
		mustTell(t, c, "active")
		synctest.Wait()
		if want := []at{{"fire", ms(100)}}; !slices.Equal(got.get(), want) {
			t.Fatalf("got %v, want %v", got.get(), want)
		}
		if want := []bool{true, false}; !slices.Equal(active.get(), want) {
			t.Fatalf("IsActive %v, want %v (false after a single timer fired)", active.get(), want)
		}
	})
}

func TestEntityTimerSameKeyReplaces(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sys := newSystem(t)
		var got recorder[at]
		start := time.Now()
		c := timerEntity(t, sys, "t", start, &got, nil)
		mustTell(t, c, "single old 100ms")
		time.Sleep(ms(50))
		mustTell(t, c, "single new 100ms")
		time.Sleep(time.Second)
		if want := []at{{"new", ms(150)}}; !slices.Equal(got.get(), want) {
			t.Fatalf("got %v, want %v", got.get(), want)
		}
	})
}

// The old timer's tick is already in the mailbox (it fired while the entity
// was busy) when the timer is replaced or cancelled: it must be discarded.
func TestEntityQueuedTickOfReplacedOrCancelledTimerDiscarded(t *testing.T) {
	for _, tc := range []struct {
		name   string
		action string
		want   []at
	}{
		// control: nothing replaces the timer, so its queued tick is delivered when the entity is free.
		{name: "control", action: "", want: []at{{"old", ms(50)}}},
		{name: "replace", action: "single new 100ms", want: []at{{"new", ms(150)}}},
		{name: "cancel", action: "cancel", want: nil},
		{name: "cancelall", action: "cancelall", want: nil},
		{name: "replace-periodic", action: "delay new 100ms", want: []at{{"new", ms(150)}, {"new", ms(250)}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				sys := newSystem(t)
				var got recorder[at]
				start := time.Now()
				c := timerEntity(t, sys, "t", start, &got, nil)
				// The action is posted ahead of the mailbox, so it runs
				// after the busy message and before the queued tick.
				mustTell(t, c, "single old 10ms")
				mustTell(t, c, "sleep 50ms") // the tick fires at 10ms and queues behind
				time.Sleep(ms(20))           // tick is in the mailbox now; the entity still sleeps
				if tc.action != "" {
					action := tc.action
					runtime.Post(c, func() {
						op, msg, d := parseOp(t, action)
						switch op {
						case "single":
							c.Timers().StartSingleTimer("k", msg, d)
						case "delay":
							c.Timers().StartTimerWithFixedDelay("k", msg, d, d)
						case "cancel":
							c.Timers().Cancel("k")
						case "cancelall":
							c.Timers().CancelAll()
						}
					})
				}
				time.Sleep(ms(260))
				mustTell(t, c, "stop")
				<-c.Done()
				if got := got.get(); !slices.Equal(got, tc.want) {
					t.Fatalf("got %v, want %v", got, tc.want)
				}
			})
		})
	}
}

// The same, with the mailbox held by Suspend (as an event-sourced entity
// does while persisting): ticks queue up, the timer is replaced from posted
// runtime work, and only the new timer's message is handled after Resume.
func TestEntityTickQueuedWhileSuspendedThenReplaced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sys := newSystem(t)
		var got recorder[at]
		start := time.Now()
		c := timerEntity(t, sys, "t", start, &got, nil)
		mustTell(t, c, "delay old 10ms")
		synctest.Wait()
		runtime.Post(c, func() { runtime.Suspend(c) })
		time.Sleep(ms(35)) // the old timer fired at 10ms; its tick waits in the held mailbox
		mustTell(t, c, "queued-command")
		runtime.Post(c, func() {
			c.Timers().StartSingleTimer("k", "new", ms(5))
			runtime.Resume(c)
		})
		time.Sleep(time.Second)
		want := []at{{"queued-command", ms(35)}, {"new", ms(40)}}
		if got := got.get(); !slices.Equal(got, want) {
			t.Fatalf("got %v, want %v", got, want)
		}
		c.StopNow()
		<-c.Done()
	})
}

// Fixed delay waits delay after each tick is handled; fixed rate keeps its
// schedule and catches up missed ticks after the entity was busy.
func TestEntityFixedDelayVersusFixedRate(t *testing.T) {
	for _, tc := range []struct {
		mode string
		want []time.Duration
	}{
		// ticks due at 100, 200 while busy until 250
		{"delay", []time.Duration{ms(250), ms(350), ms(450)}},
		{"rate", []time.Duration{ms(250), ms(250), ms(300), ms(400)}},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				sys := newSystem(t)
				var got recorder[at]
				start := time.Now()
				c := timerEntity(t, sys, "t", start, &got, nil)
				mustTell(t, c, tc.mode+" tick 100ms")
				mustTell(t, c, "sleep 250ms")
				time.Sleep(ms(460))
				mustTell(t, c, "cancel")
				time.Sleep(time.Second)
				var times []time.Duration
				for _, a := range got.get() {
					times = append(times, a.At)
				}
				if !slices.Equal(times, tc.want) {
					t.Fatalf("ticks at %v, want %v", times, tc.want)
				}
				c.StopNow()
				<-c.Done()
			})
		})
	}
}

// A new incarnation of the same entity id starts with fresh timers: ticks
// scheduled by the stopped incarnation never reach it.
func TestEntityTimersEndWithIncarnation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sys := newSystem(t)
		var old, cur recorder[at]
		start := time.Now()
		c1 := timerEntity(t, sys, "same-id", start, &old, nil)
		mustTell(t, c1, "delay old 10ms")
		time.Sleep(ms(25)) // two ticks handled
		mustTell(t, c1, "stop")
		<-c1.Done()
		c2 := timerEntity(t, sys, "same-id", start, &cur, nil)
		mustTell(t, c2, "single new 100ms")
		time.Sleep(time.Second)
		if n := old.len(); n != 2 {
			t.Fatalf("old incarnation handled %d ticks, want 2: %v", n, old.get())
		}
		if want := []at{{"new", ms(125)}}; !slices.Equal(cur.get(), want) {
			t.Fatalf("new incarnation got %v, want %v", cur.get(), want)
		}
		c2.StopNow()
		<-c2.Done()
		// synctest.Test fails if a timer callback or worker goroutine survives.
	})
}

// With an injected clock the runtime's timers can be counted: stopping an
// entity stops every timer it armed, including its receive timeout.
func TestEntityStopStopsClockTimers(t *testing.T) {
	clock := newFakeClock()
	sys := newSystem(t, func(c *entity.Config) { c.Clock = clock })
	got := make(chan string, 16)
	c := spawnFunc(sys, "t", func(ctx entity.Context[string], m string) entity.Behavior[string] {
		switch m {
		case "arm":
			ctx.Timers().StartSingleTimer("a", "a", time.Hour)
			ctx.Timers().StartTimerWithFixedDelay("b", "b", time.Second, time.Second)
			ctx.Timers().StartTimerAtFixedRate("c", "c", time.Second, time.Second)
			ctx.SetReceiveTimeout(time.Minute, "idle")
		case "stop":
			return entity.Stopped[string]()
		}
		got <- m
		return entity.Same[string]()
	})
	mustTell(t, c, "arm")
	recv(t, got)
	if n := clock.Pending(); n != 4 {
		t.Fatalf("%d clock timers armed, want 4", n)
	}
	clock.Advance(time.Second) // b and c fire and re-arm when handled
	for range 2 {
		if m := recv(t, got); m != "b" && m != "c" {
			t.Fatalf("got %q", m)
		}
	}
	mustTell(t, c, "stop")
	waitDone(t, c)
	if n := clock.Pending(); n != 0 {
		t.Fatalf("%d clock timers still armed after the entity stopped", n)
	}
	clock.Advance(2 * time.Hour) // nothing left to fire; a stray tick would be a dead letter or panic
	select {
	case m := <-got:
		t.Fatalf("delivered %q after stop", m)
	default:
	}
}
