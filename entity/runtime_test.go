package entity_test

import (
	"context"
	"errors"
	"fmt"
	goruntime "runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/internal/runtime"
)

type seqMsg struct{ From, Seq int }

// Many goroutines flood a few entities; each entity's handler must never
// run concurrently with itself, and each sender's messages must arrive in
// send order. Control work posted from outside must not overlap either.
func TestOneMessageAtATimeAndPerSenderOrder(t *testing.T) {
	sys := newSystem(t, func(c *entity.Config) { c.Workers = 8; c.Throughput = 3 })
	const entities, senders, perSender = 4, 12, 300
	key := entity.NewTypeKey[seqMsg]("seq")
	type probe struct {
		inFlight atomic.Int32
		overlaps atomic.Int32
		disorder atomic.Int32
		handled  atomic.Int32
		done     chan struct{}
	}
	probes := make([]*probe, entities)
	cells := make([]*entity.Cell[seqMsg], entities)
	for i := range cells {
		p := &probe{done: make(chan struct{})}
		probes[i] = p
		last := make(map[int]int) // touched only by the handler: -race flags overlap too
		cells[i] = entity.Spawn(sys, &entity.Props[seqMsg]{Key: key, Create: func(entity.Context[seqMsg]) entity.Behavior[seqMsg] {
			return entity.Receive(func(_ entity.Context[seqMsg], m seqMsg) entity.Behavior[seqMsg] {
				if p.inFlight.Add(1) != 1 {
					p.overlaps.Add(1)
				}
				goruntime.Gosched()
				if prev, ok := last[m.From]; ok && m.Seq != prev+1 || !ok && m.Seq != 0 {
					p.disorder.Add(1)
				}
				last[m.From] = m.Seq
				p.inFlight.Add(-1)
				if p.handled.Add(1) == senders*perSender {
					close(p.done)
				}
				return entity.Same[seqMsg]()
			})
		}}, fmt.Sprint("e", i))
	}
	var wg sync.WaitGroup
	for s := range senders {
		wg.Go(func() {
			for seq := range perSender {
				for _, c := range cells {
					if err := c.Tell(seqMsg{From: s, Seq: seq}); err != nil {
						t.Error(err)
						return
					}
				}
				if seq%50 == 0 {
					for i, c := range cells {
						runtime.Post(c, func() {
							if probes[i].inFlight.Add(1) != 1 {
								probes[i].overlaps.Add(1)
							}
							probes[i].inFlight.Add(-1)
						})
					}
				}
			}
		})
	}
	wg.Wait()
	for i, p := range probes {
		recv(t, p.done)
		if n := p.overlaps.Load(); n != 0 {
			t.Errorf("entity %d: handler ran concurrently with itself %d times", i, n)
		}
		if n := p.disorder.Load(); n != 0 {
			t.Errorf("entity %d: %d messages out of per-sender order", i, n)
		}
	}
}

// Many entities receive concurrently from many goroutines; every message
// is counted exactly once.
func TestManyEntitiesConcurrently(t *testing.T) {
	sys := newSystem(t)
	props := &entity.Props[cmd]{Key: counterKey, Create: counter}
	cells := make([]*entity.Cell[cmd], 200)
	for i := range cells {
		cells[i] = entity.Spawn(sys, props, fmt.Sprint(i))
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for n := 1; n <= 10; n++ {
				for _, c := range cells {
					if err := c.Tell(add{N: n}); err != nil {
						t.Error(err)
					}
				}
			}
		})
	}
	wg.Wait()
	for _, c := range cells {
		if got := askGet(t, c); got != 8*55 {
			t.Fatalf("%s: sum %d, want %d", c.EntityID(), got, 8*55)
		}
	}
	if sys.DeadLetters() != 0 {
		t.Fatalf("dead letters: %d", sys.DeadLetters())
	}
}

// With one worker, a flooded entity yields after Throughput messages, so an
// entity with one message is not starved.
func TestThroughputYieldsToOtherEntities(t *testing.T) {
	const throughput = 8
	sys := newSystem(t, func(c *entity.Config) { c.Workers = 1; c.Throughput = throughput })
	var order recorder[string]
	gate, entered := make(chan struct{}), make(chan struct{})
	flood := spawnFunc(sys, "flood", func(_ entity.Context[string], m string) entity.Behavior[string] {
		if m == "first" {
			close(entered)
			<-gate // holds the only worker
		}
		order.add("flood")
		return entity.Same[string]()
	})
	mustTell(t, flood, "first")
	recv(t, entered)
	for range 1000 {
		mustTell(t, flood, "more")
	}
	done := make(chan struct{})
	other := spawnFunc(sys, "other", func(_ entity.Context[string], m string) entity.Behavior[string] {
		order.add("other")
		close(done)
		return entity.Same[string]()
	})
	mustTell(t, other, "hello")
	close(gate)
	recv(t, done)
	got := order.get()
	idx := slices.Index(got, "other")
	if idx < 0 || idx > throughput {
		t.Fatalf("other entity handled after %d flood messages, want at most %d (Throughput)", idx, throughput)
	}
}

func TestIdleEntitiesOwnNoRuntimeGoroutine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sys := newSystem(t)
		cells := make([]*entity.Cell[string], 50)
		for i := range cells {
			cells[i] = spawnFunc(sys, fmt.Sprint(i), func(ctx entity.Context[string], m string) entity.Behavior[string] {
				if m == "timer" {
					ctx.Timers().StartSingleTimer("k", "fired", time.Hour)
					ctx.SetReceiveTimeout(time.Hour, "idle")
				}
				return entity.Same[string]()
			})
			for range 10 {
				mustTell(t, cells[i], "x")
			}
			mustTell(t, cells[i], "timer")
		}
		synctest.Wait()
		if gs := runtimeGoroutines(); len(gs) != 0 {
			t.Fatalf("%d runtime goroutines while every entity is idle:\n%s", len(gs), strings.Join(gs, "\n\n"))
		}
		// Still alive: they come back when mail arrives.
		got := make(chan string, 1)
		c := spawnFunc(sys, "late", func(_ entity.Context[string], m string) entity.Behavior[string] {
			got <- m
			return entity.Same[string]()
		})
		mustTell(t, c, "ping")
		if m := <-got; m != "ping" {
			t.Fatalf("got %q", m)
		}
		synctest.Wait()
		if gs := runtimeGoroutines(); len(gs) != 0 {
			t.Fatalf("%d runtime goroutines after a burst:\n%s", len(gs), strings.Join(gs, "\n\n"))
		}
		for _, c := range cells {
			c.StopNow()
			<-c.Done()
		}
	})
}

func TestMailboxCapacity(t *testing.T) {
	sys := newSystem(t)
	gate := make(chan struct{})
	got := make(chan string, 16)
	c := spawnFunc(sys, "bounded", func(_ entity.Context[string], m string) entity.Behavior[string] {
		got <- m
		if m == "block" {
			<-gate
		}
		return entity.Same[string]()
	}, func(p *entity.Props[string]) { p.MailboxCapacity = 3 })
	mustTell(t, c, "block")
	if m := recv(t, got); m != "block" { // "block" has left the mailbox
		t.Fatalf("got %q", m)
	}
	for _, m := range []string{"a", "b", "c"} {
		mustTell(t, c, m)
	}
	err := c.Tell("d")
	if !errors.Is(err, entity.ErrMailboxFull) {
		t.Fatalf("Tell beyond capacity = %v, want ErrMailboxFull", err)
	}
	close(gate)
	for _, want := range []string{"a", "b", "c"} {
		if m := recv(t, got); m != want {
			t.Fatalf("got %q, want %q (the rejected message must not be delivered)", m, want)
		}
	}
	mustTell(t, c, "e") // capacity frees as mail is handled
	if m := recv(t, got); m != "e" {
		t.Fatalf("got %q, want e", m)
	}
	c.StopNow()
	waitDone(t, c)
}

func TestStoppedBehaviorAndTellAfterStop(t *testing.T) {
	sys := newSystem(t)
	var handled recorder[string]
	c := spawnFunc(sys, "s", func(_ entity.Context[string], m string) entity.Behavior[string] {
		handled.add(m)
		if m == "stop" {
			return entity.Stopped[string]()
		}
		return entity.Same[string]()
	})
	mustTell(t, c, "a")
	mustTell(t, c, "stop")
	waitDone(t, c)
	if c.Err() != nil {
		t.Fatalf("normal stop Err = %v, want nil", c.Err())
	}
	before := sys.DeadLetters()
	err := c.Tell("late")
	if !errors.Is(err, entity.ErrStopped) {
		t.Fatalf("Tell after stop = %v, want ErrStopped", err)
	}
	if sys.DeadLetters() != before+1 {
		t.Fatalf("dead letters %d, want %d", sys.DeadLetters(), before+1)
	}
	if !slices.Equal(handled.get(), []string{"a", "stop"}) {
		t.Fatalf("handled %v", handled.get())
	}
	if runtime.Post(c, func() { t.Error("posted work ran on a stopped entity") }) {
		t.Fatal("Post on a stopped entity reported true")
	}
	if runtime.PostOrdered(c, func() { t.Error("ordered work ran on a stopped entity") }) {
		t.Fatal("PostOrdered on a stopped entity reported true")
	}
}

func TestContextStopAfterCurrentMessage(t *testing.T) {
	sys := newSystem(t)
	var handled recorder[string]
	gate, entered := make(chan struct{}), make(chan struct{})
	c := spawnFunc(sys, "s", func(ctx entity.Context[string], m string) entity.Behavior[string] {
		handled.add(m)
		if m == "stop" {
			close(entered)
			<-gate
			ctx.Stop()
			handled.add("after Stop, same message")
		}
		return entity.Same[string]()
	})
	mustTell(t, c, "stop")
	recv(t, entered)
	for range 5 {
		mustTell(t, c, "queued")
	}
	before := sys.DeadLetters()
	close(gate)
	waitDone(t, c)
	if got := handled.get(); !slices.Equal(got, []string{"stop", "after Stop, same message"}) {
		t.Fatalf("handled %v", got)
	}
	if got := sys.DeadLetters() - before; got != 5 {
		t.Fatalf("%d dead letters for the 5 queued messages", got)
	}
}

func TestStopNowSkipsQueuedMail(t *testing.T) {
	sys := newSystem(t)
	var handled recorder[string]
	gate, entered := make(chan struct{}), make(chan struct{})
	c := spawnFunc(sys, "s", func(_ entity.Context[string], m string) entity.Behavior[string] {
		handled.add(m)
		if m == "block" {
			close(entered)
			<-gate
		}
		return entity.Same[string]()
	})
	mustTell(t, c, "block")
	recv(t, entered)
	for range 4 {
		mustTell(t, c, "queued")
	}
	before := sys.DeadLetters()
	c.StopNow()
	close(gate)
	waitDone(t, c)
	if got := handled.get(); !slices.Equal(got, []string{"block"}) {
		t.Fatalf("handled %v; StopNow must preempt queued mail", got)
	}
	if got := sys.DeadLetters() - before; got != 4 {
		t.Fatalf("%d dead letters, want 4", got)
	}
	if c.Err() != nil {
		t.Fatalf("Err = %v", c.Err())
	}
	c.StopNow() // idempotent, no panic
}

func TestStopNowOnIdleEntity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sys := newSystem(t)
		c := spawnFunc(sys, "idle", func(entity.Context[string], string) entity.Behavior[string] { return entity.Same[string]() })
		synctest.Wait()
		c.StopNow()
		<-c.Done()
		if err := c.Tell("x"); !errors.Is(err, entity.ErrStopped) {
			t.Fatalf("Tell = %v", err)
		}
	})
}

func TestUnhandledIsDeadLetter(t *testing.T) {
	sys := newSystem(t)
	c := entity.Spawn(sys, &entity.Props[cmd]{Key: counterKey, Create: counter}, "u")
	mustTell[cmd](t, c, add{N: 1})
	mustTell[cmd](t, c, tick{Key: "unhandled by counter"})
	mustTell[cmd](t, c, add{N: 2})
	if got := askGet(t, c); got != 3 {
		t.Fatalf("sum %d: Unhandled must keep the behavior", got)
	}
	if sys.DeadLetters() != 1 {
		t.Fatalf("dead letters %d, want 1", sys.DeadLetters())
	}
}

type lifecycle struct {
	events *recorder[string]
	errs   chan error
	n      int
}

func (l *lifecycle) Receive(ctx entity.Context[string], m string) entity.Behavior[string] {
	switch m {
	case "boom":
		panic("kaboom")
	case "stop":
		return entity.Stopped[string]()
	case "fail":
		runtime.Fail(ctx.(*entity.Cell[string]), errFailed)
		return entity.Same[string]()
	case "next":
		// A new behavior value: PostStop goes to the behavior installed last.
		return &lifecycle{events: l.events, errs: l.errs, n: l.n + 1}
	}
	l.events.add(fmt.Sprintf("msg %s @%d", m, l.n))
	return entity.Same[string]()
}

func (l *lifecycle) OnSignal(ctx entity.Context[string], sig entity.Signal) {
	if ps, ok := sig.(entity.PostStop); ok {
		l.events.add(fmt.Sprintf("PostStop @%d", l.n))
		l.errs <- ps.Err
	}
}

var errFailed = errors.New("failed on purpose")

func TestPostStopSignal(t *testing.T) {
	for _, tc := range []struct {
		name    string
		msgs    []string
		wantErr func(error) bool
	}{
		{"stopped", []string{"a", "stop", "b"}, func(err error) bool { return err == nil }},
		{"panic", []string{"a", "boom", "b"}, func(err error) bool {
			var pe *entity.PanicError
			return errors.As(err, &pe) && pe.Value == "kaboom"
		}},
		{"fail", []string{"a", "fail", "b"}, func(err error) bool { return errors.Is(err, errFailed) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sys := newSystem(t, func(c *entity.Config) { c.Logger = discardLogger() })
			events := &recorder[string]{}
			errs := make(chan error, 2)
			c := entity.Spawn(sys, &entity.Props[string]{Key: stringKey, Create: func(entity.Context[string]) entity.Behavior[string] {
				return &lifecycle{events: events, errs: errs}
			}}, tc.name)
			mustTell(t, c, "next")
			for _, m := range tc.msgs {
				_ = c.Tell(m)
			}
			waitDone(t, c)
			if err := recv(t, errs); !tc.wantErr(err) {
				t.Fatalf("PostStop.Err = %v", err)
			}
			if !tc.wantErr(c.Err()) {
				t.Fatalf("Err() = %v", c.Err())
			}
			if got, want := events.get(), []string{"msg a @1", "PostStop @1"}; !slices.Equal(got, want) {
				t.Fatalf("events %v, want %v", got, want)
			}
			if len(errs) != 0 {
				t.Fatal("PostStop signalled twice")
			}
		})
	}
}

type recordingOwner struct {
	passivated chan string
	stopped    chan error
	onPassiv   func(c *entity.Cell[string])
}

func (o *recordingOwner) Passivate(c *entity.Cell[string]) {
	o.passivated <- c.EntityID()
	if o.onPassiv != nil {
		o.onPassiv(c)
	}
}

func (o *recordingOwner) Stopped(c *entity.Cell[string], err error) { o.stopped <- err }

func newOwner() *recordingOwner {
	return &recordingOwner{passivated: make(chan string, 4), stopped: make(chan error, 4)}
}

func TestPanicStopsOnlyThatEntityAndTellsOwner(t *testing.T) {
	sys := newSystem(t, func(c *entity.Config) { c.Logger = discardLogger() })
	o := newOwner()
	props := &entity.Props[string]{Key: stringKey, Owner: o, Create: func(entity.Context[string]) entity.Behavior[string] {
		return entity.Receive(func(_ entity.Context[string], m string) entity.Behavior[string] {
			if m == "boom" {
				panic(fmt.Sprintf("boom in %s", m))
			}
			return entity.Same[string]()
		})
	}}
	a := entity.Spawn(sys, props, "a")
	b := entity.Spawn(sys, props, "b")
	mustTell(t, a, "ok")
	mustTell(t, a, "boom")
	_ = a.Tell("after")
	waitDone(t, a)
	err := recv(t, o.stopped)
	var pe *entity.PanicError
	if !errors.As(err, &pe) {
		t.Fatalf("Owner.Stopped err = %v, want *PanicError", err)
	}
	if pe.Value != "boom in boom" || len(pe.Stack) == 0 || !strings.Contains(pe.Error(), "boom in boom") {
		t.Fatalf("PanicError = %+v", pe)
	}
	if !errors.As(a.Err(), &pe) {
		t.Fatalf("a.Err() = %v", a.Err())
	}
	// b is unaffected.
	mustTell(t, b, "ok")
	select {
	case <-b.Done():
		t.Fatal("b stopped")
	default:
	}
	if b.Err() != nil {
		t.Fatal(b.Err())
	}
	select {
	case err := <-o.stopped:
		t.Fatalf("second Stopped call: %v", err)
	default:
	}
}

func TestPanicInSetupStopsEntity(t *testing.T) {
	sys := newSystem(t, func(c *entity.Config) { c.Logger = discardLogger() })
	for name, create := range map[string]func(entity.Context[string]) entity.Behavior[string]{
		"panic":     func(entity.Context[string]) entity.Behavior[string] { panic("no setup") },
		"same":      func(entity.Context[string]) entity.Behavior[string] { return entity.Same[string]() },
		"nil":       func(entity.Context[string]) entity.Behavior[string] { return nil },
		"unhandled": func(entity.Context[string]) entity.Behavior[string] { return entity.Unhandled[string]() },
	} {
		c := entity.Spawn(sys, &entity.Props[string]{Key: stringKey, Create: create}, name)
		waitDone(t, c)
		var pe *entity.PanicError
		if !errors.As(c.Err(), &pe) {
			t.Fatalf("%s: Err = %v, want *PanicError", name, c.Err())
		}
	}
}

func TestHandlerReturningNilStopsWithPanicError(t *testing.T) {
	sys := newSystem(t, func(c *entity.Config) { c.Logger = discardLogger() })
	c := spawnFunc(sys, "nil", func(entity.Context[string], string) entity.Behavior[string] { return nil })
	mustTell(t, c, "x")
	waitDone(t, c)
	var pe *entity.PanicError
	if !errors.As(c.Err(), &pe) {
		t.Fatalf("Err = %v", c.Err())
	}
}

func TestPassivateWithOwnerAsksOwner(t *testing.T) {
	sys := newSystem(t)
	o := newOwner()
	o.onPassiv = func(c *entity.Cell[string]) { _ = c.Tell("stop") } // the shard sends the stop message
	var handled recorder[string]
	c := spawnFunc(sys, "p", func(ctx entity.Context[string], m string) entity.Behavior[string] {
		handled.add(m)
		switch m {
		case "passivate":
			ctx.Passivate()
		case "stop":
			return entity.Stopped[string]()
		}
		return entity.Same[string]()
	}, func(p *entity.Props[string]) { p.Owner = o })
	mustTell(t, c, "passivate")
	if id := recv(t, o.passivated); id != "p" {
		t.Fatalf("Owner.Passivate for %q", id)
	}
	waitDone(t, c)
	if err := recv(t, o.stopped); err != nil {
		t.Fatalf("Owner.Stopped err = %v, want nil", err)
	}
	if got := handled.get(); !slices.Equal(got, []string{"passivate", "stop"}) {
		t.Fatalf("handled %v", got)
	}
}

// Passivation is the owner's decision: an owner that does nothing leaves the
// entity running.
func TestPassivateWithOwnerDoesNotStopByItself(t *testing.T) {
	sys := newSystem(t)
	o := newOwner()
	got := make(chan string, 4)
	c := spawnFunc(sys, "p", func(ctx entity.Context[string], m string) entity.Behavior[string] {
		if m == "passivate" {
			ctx.Passivate()
		}
		got <- m
		return entity.Same[string]()
	}, func(p *entity.Props[string]) { p.Owner = o })
	mustTell(t, c, "passivate")
	recv(t, o.passivated)
	mustTell(t, c, "still alive")
	recv(t, got)
	if m := recv(t, got); m != "still alive" {
		t.Fatalf("got %q", m)
	}
	select {
	case <-c.Done():
		t.Fatal("entity stopped although its owner did not stop it")
	default:
	}
	c.StopNow()
	waitDone(t, c)
}

func TestPassivateWithoutOwnerStops(t *testing.T) {
	sys := newSystem(t)
	var handled recorder[string]
	gate, entered := make(chan struct{}), make(chan struct{})
	c := spawnFunc(sys, "p", func(ctx entity.Context[string], m string) entity.Behavior[string] {
		handled.add(m)
		if m == "passivate" {
			close(entered)
			<-gate
			ctx.Passivate()
		}
		return entity.Same[string]()
	})
	mustTell(t, c, "passivate")
	recv(t, entered)
	mustTell(t, c, "queued")
	close(gate)
	waitDone(t, c)
	if c.Err() != nil {
		t.Fatal(c.Err())
	}
	if got := handled.get(); !slices.Equal(got, []string{"passivate"}) {
		t.Fatalf("handled %v", got)
	}
}

func TestOwnerStoppedOnNormalStop(t *testing.T) {
	sys := newSystem(t)
	o := newOwner()
	c := spawnFunc(sys, "n", func(entity.Context[string], string) entity.Behavior[string] { return entity.Stopped[string]() },
		func(p *entity.Props[string]) { p.Owner = o })
	mustTell(t, c, "x")
	if err := recv(t, o.stopped); err != nil {
		t.Fatalf("Stopped(%v), want nil", err)
	}
	waitDone(t, c)
}

func TestSetupBehavior(t *testing.T) {
	sys := newSystem(t)
	var events recorder[string]
	props := &entity.Props[string]{Key: stringKey, Create: func(ctx entity.Context[string]) entity.Behavior[string] {
		events.add("create " + ctx.EntityID())
		return entity.Setup(func(ctx entity.Context[string]) entity.Behavior[string] {
			events.add("setup " + ctx.EntityID()) // nested Setup runs at install time too
			prefix := "v1"
			var handler func(entity.Context[string], string) entity.Behavior[string]
			handler = func(ctx entity.Context[string], m string) entity.Behavior[string] {
				events.add(prefix + ":" + m)
				if m == "upgrade" {
					return entity.Setup(func(entity.Context[string]) entity.Behavior[string] {
						events.add("setup v2") // runs when installed, before the next message
						prefix = "v2"
						return entity.Receive(handler)
					})
				}
				return entity.Same[string]()
			}
			return entity.Receive(handler)
		})
	}}
	c := entity.Spawn(sys, props, "s1")
	mustTell(t, c, "a")
	mustTell(t, c, "upgrade")
	done := make(chan struct{})
	runtime.PostOrdered(c, func() { close(done) })
	recv(t, done)
	mustTell(t, c, "b")
	done2 := make(chan struct{})
	runtime.PostOrdered(c, func() { close(done2) })
	recv(t, done2)
	want := []string{"create s1", "setup s1", "v1:a", "v1:upgrade", "setup v2", "v2:b"}
	if got := events.get(); !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
}

func TestSetupCanStop(t *testing.T) {
	sys := newSystem(t)
	c := entity.Spawn(sys, &entity.Props[string]{Key: stringKey, Create: func(entity.Context[string]) entity.Behavior[string] {
		return entity.Stopped[string]()
	}}, "x")
	waitDone(t, c)
	if c.Err() != nil {
		t.Fatal(c.Err())
	}
}

func TestPostOrderedRunsInMailboxOrder(t *testing.T) {
	sys := newSystem(t)
	var events recorder[string]
	gate, entered := make(chan struct{}), make(chan struct{})
	c := spawnFunc(sys, "o", func(_ entity.Context[string], m string) entity.Behavior[string] {
		if m == "block" {
			close(entered)
			<-gate
		}
		events.add(m)
		return entity.Same[string]()
	})
	mustTell(t, c, "block")
	recv(t, entered)
	mustTell(t, c, "a")
	runtime.PostOrdered(c, func() { events.add("ordered") })
	runtime.Post(c, func() { events.add("post") })
	mustTell(t, c, "b")
	done := make(chan struct{})
	runtime.PostOrdered(c, func() { close(done) })
	close(gate)
	recv(t, done)
	if got, want := events.get(), []string{"block", "post", "a", "ordered", "b"}; !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
}

func TestPipeToSelfDeliversResult(t *testing.T) {
	sys := newSystem(t)
	c := entity.Spawn(sys, &entity.Props[cmd]{Key: counterKey, Create: func(ctx entity.Context[cmd]) entity.Behavior[cmd] {
		inner := counter(ctx)
		return entity.Receive(func(ctx entity.Context[cmd], m cmd) entity.Behavior[cmd] {
			if s, ok := m.(tick); ok && s.Key == "pipe" {
				ctx.PipeToSelf(func(context.Context) cmd { return add{N: 41} })
				return entity.Same[cmd]()
			}
			return inner.Receive(ctx, m)
		})
	}}, "pipe")
	mustTell[cmd](t, c, add{N: 1})
	mustTell[cmd](t, c, tick{Key: "pipe"})
	deadline := time.Now().Add(30 * time.Second)
	for askGet(t, c) != 42 {
		if time.Now().After(deadline) {
			t.Fatal("piped result never arrived")
		}
		goruntime.Gosched()
	}
}

func TestPipeToSelfContextCancelledOnStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sys := newSystem(t)
		workErr := make(chan error, 1)
		started := make(chan struct{})
		c := spawnFunc(sys, "p", func(ctx entity.Context[string], m string) entity.Behavior[string] {
			switch m {
			case "work":
				ctx.PipeToSelf(func(wctx context.Context) string {
					close(started)
					<-wctx.Done()
					workErr <- wctx.Err()
					return "result"
				})
			case "stop":
				return entity.Stopped[string]()
			case "result":
				t.Error("result delivered to a stopped entity")
			}
			return entity.Same[string]()
		})
		mustTell(t, c, "work")
		<-started
		synctest.Wait()
		if len(workErr) != 0 {
			t.Fatal("work context ended while the entity runs")
		}
		before := sys.DeadLetters()
		mustTell(t, c, "stop")
		<-c.Done()
		if err := <-workErr; !errors.Is(err, context.Canceled) {
			t.Fatalf("work context err = %v, want Canceled", err)
		}
		synctest.Wait() // the work goroutine has exited (Test fails otherwise)
		if got := sys.DeadLetters() - before; got != 1 {
			t.Fatalf("late pipe result: %d dead letters, want 1", got)
		}
	})
}

func TestPipeToSelfPanicStopsEntity(t *testing.T) {
	sys := newSystem(t, func(c *entity.Config) { c.Logger = discardLogger() })
	c := spawnFunc(sys, "p", func(ctx entity.Context[string], m string) entity.Behavior[string] {
		ctx.PipeToSelf(func(context.Context) string { panic("work failed") })
		return entity.Same[string]()
	})
	mustTell(t, c, "go")
	waitDone(t, c)
	var pe *entity.PanicError
	if !errors.As(c.Err(), &pe) || pe.Value != "work failed" {
		t.Fatalf("Err = %v", c.Err())
	}
}

func TestContextAccessors(t *testing.T) {
	clock := newFakeClock()
	sys := newSystem(t, func(c *entity.Config) { c.NodeID = "node-1"; c.Clock = clock })
	if sys.NodeID() != "node-1" || sys.Clock() != clock {
		t.Fatal("System accessors do not reflect Config")
	}
	type seen struct {
		id        string
		selfIsRef bool
		sysOK     bool
		clockOK   bool
		logOK     bool
		stashCap  int
	}
	out := make(chan seen, 1)
	c := spawnFunc(sys, "acc", func(ctx entity.Context[string], m string) entity.Behavior[string] {
		out <- seen{
			id:        ctx.EntityID(),
			selfIsRef: ctx.Self().(*entity.Cell[string]).EntityID() == ctx.EntityID(),
			sysOK:     ctx.System() == sys && ctx.Self().System() == sys,
			clockOK:   ctx.Clock() == clock,
			logOK:     ctx.Log() != nil && ctx.Log() == ctx.Log(),
			stashCap:  ctx.Stash().Capacity(),
		}
		return entity.Same[string]()
	}, func(p *entity.Props[string]) { p.StashCapacity = 7 })
	mustTell(t, c, "x")
	s := recv(t, out)
	if s != (seen{"acc", true, true, true, true, 7}) {
		t.Fatalf("context saw %+v", s)
	}
	if entity.NewTypeKey[int]("k").Name() != "k" || entity.NewTypeKey[int]("k").String() != "k" {
		t.Fatal("TypeKey name")
	}
}

func TestNewSystemValidation(t *testing.T) {
	if _, err := entity.NewSystem(entity.Config{ForceSerialization: true}); err == nil {
		t.Fatal("ForceSerialization without Codec accepted")
	}
	a, b := newSystem(t), newSystem(t)
	if a.NodeID() == "" || a.NodeID() == b.NodeID() {
		t.Fatalf("default node ids %q %q: want random and distinct", a.NodeID(), b.NodeID())
	}
	// A process that restarts under the same node id is a newer incarnation.
	first := newSystem(t, func(c *entity.Config) { c.NodeID = "n" })
	restarted := newSystem(t, func(c *entity.Config) { c.NodeID = "n" })
	if first.Incarnation() == 0 || restarted.Incarnation() <= first.Incarnation() {
		t.Fatalf("default incarnations %d then %d: want growing", first.Incarnation(), restarted.Incarnation())
	}
	if got := newSystem(t, func(c *entity.Config) { c.Incarnation = 42 }).Incarnation(); got != 42 {
		t.Fatalf("configured incarnation %d, want 42", got)
	}
}
