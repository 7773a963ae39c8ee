package entity_test

import (
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/internal/runtime"
)

// rtEntity sets a receive timeout of 100ms ("timeout") at setup and records
// every message with its time. Commands: "sleep <d>", "cancel",
// "set <msg> <d>", "cancel-set <msg> <d>", "stop".
func rtEntity(t *testing.T, sys *entity.System, start time.Time, got *recorder[at]) *entity.Cell[string] {
	props := &entity.Props[string]{Key: stringKey, Create: func(ctx entity.Context[string]) entity.Behavior[string] {
		ctx.SetReceiveTimeout(ms(100), "timeout")
		return entity.Receive(func(ctx entity.Context[string], m string) entity.Behavior[string] {
			op, msg, d := parseOp(t, m)
			switch op {
			case "sleep":
				time.Sleep(d)
			case "cancel":
				ctx.CancelReceiveTimeout()
			case "set":
				ctx.SetReceiveTimeout(d, msg)
			case "cancel-set":
				ctx.CancelReceiveTimeout()
				ctx.SetReceiveTimeout(d, msg)
			case "stop":
				return entity.Stopped[string]()
			default:
				got.add(at{m, time.Since(start)})
			}
			return entity.Same[string]()
		})
	}}
	return entity.Spawn(sys, props, "rt")
}

func TestReceiveTimeoutFiresAfterIdleAndRepeats(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sys := newSystem(t)
		var got recorder[at]
		c := rtEntity(t, sys, time.Now(), &got)
		time.Sleep(ms(350))
		mustTell(t, c, "stop")
		<-c.Done()
		want := []at{{"timeout", ms(100)}, {"timeout", ms(200)}, {"timeout", ms(300)}}
		if !slices.Equal(got.get(), want) {
			t.Fatalf("got %v, want %v", got.get(), want)
		}
	})
}

func TestReceiveTimeoutResetByMessages(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sys := newSystem(t)
		var got recorder[at]
		c := rtEntity(t, sys, time.Now(), &got)
		time.Sleep(ms(60))
		mustTell(t, c, "ping")
		time.Sleep(ms(60)) // t=120: 60ms idle, not 100
		mustTell(t, c, "ping")
		time.Sleep(ms(250)) // t=370
		mustTell(t, c, "stop")
		<-c.Done()
		want := []at{{"ping", ms(60)}, {"ping", ms(120)}, {"timeout", ms(220)}, {"timeout", ms(320)}}
		if !slices.Equal(got.get(), want) {
			t.Fatalf("got %v, want %v", got.get(), want)
		}
	})
}

// The timeout fired while the entity was busy, so its tick is queued; the
// busy handler is followed by a cancel posted ahead of the mailbox: the
// queued timeout must not be delivered. Without the cancel (control), the
// timeout comes one idle period after the busy handler returned.
func TestCancelReceiveTimeoutDiscardsQueuedTimeout(t *testing.T) {
	for _, cancel := range []bool{false, true} {
		name := map[bool]string{false: "control", true: "cancel"}[cancel]
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				sys := newSystem(t)
				var got recorder[at]
				c := rtEntity(t, sys, time.Now(), &got)
				mustTell(t, c, "sleep 150ms") // timeout fires at 100ms and queues
				time.Sleep(ms(120))
				if cancel {
					runtime.Post(c, c.CancelReceiveTimeout)
				}
				time.Sleep(ms(30)) // t=150: busy handler returns
				synctest.Wait()
				first := slices.Clone(got.get())
				time.Sleep(time.Second)
				mustTell(t, c, "stop")
				<-c.Done()
				if cancel {
					if n := got.len(); n != 0 {
						t.Fatalf("cancelled receive timeout delivered: %v", got.get())
					}
					return
				}
				// Idle time starts when the busy handler returns (t=150ms),
				// so the queued tick re-arms and the timeout comes at 250ms.
				if len(first) != 0 {
					t.Fatalf("control: timeout delivered although the entity was busy until now: %v", first)
				}
				if all := got.get(); len(all) == 0 || all[0] != (at{"timeout", ms(250)}) {
					t.Fatalf("control: want the timeout at 250ms, got %v", all)
				}
			})
		})
	}
}

func TestReceiveTimeoutReplaced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sys := newSystem(t)
		var got recorder[at]
		c := rtEntity(t, sys, time.Now(), &got)
		time.Sleep(ms(30))
		mustTell(t, c, "set other 200ms")
		time.Sleep(ms(500)) // t=530
		mustTell(t, c, "stop")
		<-c.Done()
		want := []at{{"other", ms(230)}, {"other", ms(430)}}
		if !slices.Equal(got.get(), want) {
			t.Fatalf("got %v, want %v (the replaced timeout must not fire)", got.get(), want)
		}
	})
}

// The old timeout's tick is queued when it is replaced: it must not deliver
// the new message early nor the old one at all.
func TestReceiveTimeoutReplacedWhileTickQueued(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sys := newSystem(t)
		var got recorder[at]
		c := rtEntity(t, sys, time.Now(), &got)
		mustTell(t, c, "sleep 150ms") // "timeout" tick queued at 100ms
		time.Sleep(ms(120))
		runtime.Post(c, func() { c.SetReceiveTimeout(ms(300), "other") }) // runs at 150ms
		time.Sleep(ms(400))                                               // t=520
		mustTell(t, c, "stop")
		<-c.Done()
		want := []at{{"other", ms(450)}}
		if !slices.Equal(got.get(), want) {
			t.Fatalf("got %v, want %v", got.get(), want)
		}
	})
}

// An idle entity passivates itself through its receive timeout.
func TestReceiveTimeoutPassivates(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sys := newSystem(t)
		start := time.Now()
		c := entity.Spawn(sys, &entity.Props[string]{Key: stringKey, Create: func(ctx entity.Context[string]) entity.Behavior[string] {
			ctx.SetReceiveTimeout(time.Minute, "idle")
			return entity.Receive(func(ctx entity.Context[string], m string) entity.Behavior[string] {
				if m == "idle" {
					ctx.Passivate()
				}
				return entity.Same[string]()
			})
		}}, "p")
		time.Sleep(30 * time.Second)
		mustTell(t, c, "work")
		<-c.Done()
		if d := time.Since(start); d != 90*time.Second {
			t.Fatalf("passivated after %v, want 90s (60s idle after the last message)", d)
		}
	})
}

// CancelReceiveTimeout followed by SetReceiveTimeout, while a tick of the
// cancelled timeout waits in the mailbox: the stale tick must be discarded.
// With an injected clock the armed timers can be counted.
func TestCancelThenSetReceiveTimeoutWithQueuedTick(t *testing.T) {
	clock := newFakeClock()
	sys := newSystem(t, func(c *entity.Config) { c.Clock = clock })
	gate, entered := make(chan struct{}), make(chan struct{})
	handled := make(chan string, 16)
	c := entity.Spawn(sys, &entity.Props[string]{Key: stringKey, Create: func(ctx entity.Context[string]) entity.Behavior[string] {
		ctx.SetReceiveTimeout(100*time.Millisecond, "A")
		return entity.Receive(func(ctx entity.Context[string], m string) entity.Behavior[string] {
			switch m {
			case "block":
				close(entered)
				<-gate
				ctx.CancelReceiveTimeout()
				ctx.SetReceiveTimeout(100*time.Millisecond, "B")
			case "cancel":
				ctx.CancelReceiveTimeout()
			}
			handled <- m
			return entity.Same[string]()
		})
	}}, "rt")
	mustTell(t, c, "block")
	recv(t, entered)
	clock.Advance(100 * time.Millisecond) // "A" tick queued behind the blocked handler
	close(gate)
	if m := recv(t, handled); m != "block" {
		t.Fatalf("handled %q", m)
	}
	synced := make(chan struct{})
	runtime.PostOrdered(c, func() { close(synced) }) // after the stale tick
	recv(t, synced)
	if n := clock.Pending(); n != 1 {
		t.Fatalf("%d receive-timeout timers armed, want 1", n)
	}
	mustTell(t, c, "cancel")
	recv(t, handled)
	if n := clock.Pending(); n != 0 {
		t.Fatalf("%d timers armed after CancelReceiveTimeout, want 0", n)
	}
}

// Stopping ends the receive timeout: no goroutine or delivery survives.
func TestReceiveTimeoutEndsWithEntity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sys := newSystem(t)
		var got recorder[at]
		c := rtEntity(t, sys, time.Now(), &got)
		time.Sleep(ms(150))
		mustTell(t, c, "stop")
		<-c.Done()
		time.Sleep(time.Second)
		if want := []at{{"timeout", ms(100)}}; !slices.Equal(got.get(), want) {
			t.Fatalf("got %v, want %v", got.get(), want)
		}
		before := sys.DeadLetters()
		time.Sleep(time.Second)
		if sys.DeadLetters() != before {
			t.Fatal("a receive timeout fired after stop")
		}
	})
}
