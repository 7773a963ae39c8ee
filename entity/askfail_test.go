package entity_test

import (
	"context"
	"errors"
	"fmt"
	goruntime "runtime"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/internal/runtime"
)

// askInBackground runs Ask with ctx on its own goroutine.
func askInBackground(ctx context.Context, ref entity.Ref[cmd]) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := entity.Ask(ctx, ref, func(r entity.ReplyTo[int]) cmd { return get{ReplyTo: r} })
		done <- err
	}()
	return done
}

// An ended context sends nothing: the entity never sees the command.
func TestAskWithEndedContextSendsNothing(t *testing.T) {
	sys := newSystem(t)
	var seen recorder[cmd]
	c := entity.Spawn(sys, &entity.Props[cmd]{Key: counterKey, Create: func(entity.Context[cmd]) entity.Behavior[cmd] {
		return entity.Receive(func(_ entity.Context[cmd], m cmd) entity.Behavior[cmd] {
			seen.add(m)
			return entity.Same[cmd]()
		})
	}}, "c")
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Unix(1, 0))
	defer cancel2()
	built := 0
	build := func(r entity.ReplyTo[int]) cmd { built++; return get{ReplyTo: r} }
	if _, err := entity.Ask(cancelled, c, build); !errors.Is(err, context.Canceled) || errors.Is(err, entity.ErrAskTimeout) {
		t.Fatalf("cancelled context: err = %v, want Canceled", err)
	}
	if _, err := entity.Ask(expired, c, build); !errors.Is(err, entity.ErrAskTimeout) {
		t.Fatalf("expired context: err = %v, want ErrAskTimeout", err)
	}
	mustTell[cmd](t, c, add{N: 1}) // a marker after the asks
	c.StopNow()
	waitDone(t, c)
	if got := seen.get(); built != 0 || len(got) > 1 {
		t.Fatalf("built %d commands, entity saw %v; want nothing sent", built, got)
	}
}

// An Ask whose context has no deadline ends after the System's AskTimeout,
// on the System's clock.
func TestAskWithoutDeadlineUsesAskTimeout(t *testing.T) {
	for _, tc := range []struct {
		configured, want time.Duration
	}{{0, entity.DefaultAskTimeout}, {5 * time.Second, 5 * time.Second}} {
		t.Run(fmt.Sprint(tc.want), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				sys := newSystem(t, func(c *entity.Config) { c.AskTimeout = tc.configured })
				a := spawnAccount(sys, "a")
				start := time.Now()
				_, err := entity.Ask(context.Background(), a, func(r entity.ReplyTo[balance]) acct { return holdReply{ReplyTo: r} })
				if !errors.Is(err, entity.ErrAskTimeout) || !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("err = %v, want ErrAskTimeout", err)
				}
				if d := time.Since(start); d < tc.want || d > tc.want+tc.want/8 {
					t.Fatalf("Ask gave up after %v, want %v (+ at most an eighth)", d, tc.want)
				}
			})
		})
	}
}

// The default ask deadline runs on the System's clock, and asks answered
// before it are not failed by the sweep.
func TestAskTimeoutRunsOnSystemClock(t *testing.T) {
	clock := newFakeClock()
	sys := newSystem(t, func(c *entity.Config) { c.Clock = clock; c.AskTimeout = time.Minute })
	a := spawnAccount(sys, "a")
	answered := make(chan error, 1)
	go func() {
		_, err := entity.Ask(context.Background(), a, func(r entity.ReplyTo[balance]) acct { return getBalance{ReplyTo: r} })
		answered <- err
	}()
	if err := recv(t, answered); err != nil {
		t.Fatalf("answered ask: %v", err)
	}
	waiting := make(chan error, 1)
	go func() {
		_, err := entity.Ask(context.Background(), a, func(r entity.ReplyTo[balance]) acct { return holdReply{ReplyTo: r} })
		waiting <- err
	}()
	for i := 0; ; i++ { // until the ask is registered: its sweep is armed
		if sys.Stats().AsksWaiting == 1 {
			break
		}
		if i > 1e6 {
			t.Fatal("ask never registered")
		}
		goruntime.Gosched()
	}
	clock.Advance(time.Minute - time.Second)
	select {
	case err := <-waiting:
		t.Fatalf("Ask returned %v before its default deadline", err)
	default:
	}
	clock.Advance(time.Minute / 8)
	if err := recv(t, waiting); !errors.Is(err, entity.ErrAskTimeout) {
		t.Fatalf("err = %v, want ErrAskTimeout", err)
	}
}

// An entity that crashes on the command fails the Ask at once, with the
// crash as the reason, even when the Ask has no deadline.
func TestAskFailsAtOnceWhenTargetCrashesOnIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sys := newSystem(t)
		c := entity.Spawn(sys, &entity.Props[cmd]{Key: counterKey, Create: func(entity.Context[cmd]) entity.Behavior[cmd] {
			return entity.Receive(func(entity.Context[cmd], cmd) entity.Behavior[cmd] { panic("no") })
		}}, "c")
		start := time.Now()
		err := <-askInBackground(context.Background(), c)
		var pe *entity.PanicError
		if !errors.Is(err, entity.ErrStopped) || !errors.As(err, &pe) || pe.Value != "no" {
			t.Fatalf("err = %v, want ErrStopped wrapping the PanicError", err)
		}
		if d := time.Since(start); d != 0 {
			t.Fatalf("Ask returned after %v, want at once", d)
		}
	})
}

// A handler that fails its entity (as an event-sourced entity does when it
// cannot persist) fails the Ask of the command it was handling.
func TestAskFailsWhenHandlerFailsTheEntity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sys := newSystem(t)
		broken := errors.New("disk on fire")
		c := entity.Spawn(sys, &entity.Props[cmd]{Key: counterKey, Create: func(entity.Context[cmd]) entity.Behavior[cmd] {
			return entity.Receive(func(ctx entity.Context[cmd], _ cmd) entity.Behavior[cmd] {
				runtime.Fail(ctx.(*entity.Cell[cmd]), broken)
				return entity.Same[cmd]()
			})
		}}, "c")
		err := <-askInBackground(context.Background(), c)
		if !errors.Is(err, entity.ErrStopped) || !errors.Is(err, broken) {
			t.Fatalf("err = %v, want ErrStopped wrapping the failure", err)
		}
	})
}

// Asks still in the mailbox, or stashed, when the entity stops fail at once.
func TestAskFailsWhenTargetStopsBeforeHandlingIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sys := newSystem(t)
		gate := make(chan struct{})
		c := entity.Spawn(sys, &entity.Props[cmd]{Key: counterKey, Create: func(entity.Context[cmd]) entity.Behavior[cmd] {
			return entity.Receive(func(ctx entity.Context[cmd], m cmd) entity.Behavior[cmd] {
				switch m.(type) {
				case add:
					<-gate
				case get:
					if err := ctx.Stash().Stash(m); err != nil {
						panic(err)
					}
				}
				return entity.Same[cmd]()
			})
		}}, "c")
		stashed := askInBackground(context.Background(), c)
		synctest.Wait() // handled and stashed
		mustTell[cmd](t, c, add{})
		synctest.Wait() // the entity is blocked in add
		queued := askInBackground(context.Background(), c)
		synctest.Wait()
		if len(stashed)+len(queued) != 0 {
			t.Fatal("an Ask returned before the entity stopped")
		}
		c.StopNow()
		close(gate)
		for name, ch := range map[string]<-chan error{"stashed": stashed, "queued": queued} {
			if err := <-ch; !errors.Is(err, entity.ErrStopped) {
				t.Fatalf("%s ask: err = %v, want ErrStopped", name, err)
			}
		}
	})
}

// A command the entity does not handle fails its Ask with ErrUnhandled.
func TestAskFailsWhenTargetLeavesItUnhandled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sys := newSystem(t)
		c := entity.Spawn(sys, &entity.Props[cmd]{Key: counterKey, Create: func(entity.Context[cmd]) entity.Behavior[cmd] {
			return entity.Receive(func(entity.Context[cmd], cmd) entity.Behavior[cmd] { return entity.Unhandled[cmd]() })
		}}, "c")
		start := time.Now()
		err := <-askInBackground(context.Background(), c)
		if !errors.Is(err, entity.ErrUnhandled) || time.Since(start) != 0 {
			t.Fatalf("err = %v after %v, want ErrUnhandled at once", err, time.Since(start))
		}
		if st := sys.Stats(); st.Unhandled != 1 || st.DeadLetters != 1 {
			t.Fatalf("stats %+v, want one unhandled dead letter", st)
		}
	})
}

// A reply address nested in a pointer, a slice or an interface is found too.
type batchGet struct {
	Inner *struct{ Items []any }
}

func (batchGet) isCmd() {}

func TestAskFailsForReplyAddressesNestedInTheCommand(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sys := newSystem(t)
		c := entity.Spawn(sys, &entity.Props[cmd]{Key: counterKey, Create: counter}, "c") // batchGet is unhandled
		start := time.Now()
		_, err := entity.Ask(context.Background(), c, func(r entity.ReplyTo[int]) cmd {
			return batchGet{Inner: &struct{ Items []any }{Items: []any{"x", get{ReplyTo: r}}}}
		})
		if !errors.Is(err, entity.ErrUnhandled) || time.Since(start) != 0 {
			t.Fatalf("err = %v after %v, want ErrUnhandled at once", err, time.Since(start))
		}
	})
}

// A command that embeds its ReplyTo (promoting its methods) is searched
// field by field like any other struct: the lost ask fails, nothing panics.
type embeddedGet struct {
	entity.ReplyTo[int]
	Note string
}

func (embeddedGet) isCmd() {}

func TestAskFailsForAnEmbeddedReplyTo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sys := newSystem(t)
		c := entity.Spawn(sys, &entity.Props[cmd]{Key: counterKey, Create: counter}, "c") // embeddedGet is unhandled
		start := time.Now()
		_, err := entity.Ask(context.Background(), c, func(r entity.ReplyTo[int]) cmd {
			return embeddedGet{ReplyTo: r, Note: "n"}
		})
		if !errors.Is(err, entity.ErrUnhandled) || time.Since(start) != 0 {
			t.Fatalf("err = %v after %v, want ErrUnhandled at once", err, time.Since(start))
		}
	})
}

// An entity that handles the command and stops without replying may have
// handed the address on: its Ask waits for the deadline, and still gets a
// reply sent from elsewhere.
func TestAskOfNormallyHandledCommandSurvivesStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sys := newSystem(t)
		handOff := make(chan entity.ReplyTo[int], 1)
		c := entity.Spawn(sys, &entity.Props[cmd]{Key: counterKey, Create: func(entity.Context[cmd]) entity.Behavior[cmd] {
			return entity.Receive(func(_ entity.Context[cmd], m cmd) entity.Behavior[cmd] {
				handOff <- m.(get).ReplyTo
				return entity.Stopped[cmd]()
			})
		}}, "c")
		done := make(chan int, 1)
		go func() {
			n, err := entity.Ask(context.Background(), c, func(r entity.ReplyTo[int]) cmd { return get{ReplyTo: r} })
			if err != nil {
				t.Error(err)
			}
			done <- n
		}()
		to := <-handOff
		waitDone(t, c)
		time.Sleep(time.Second)
		entity.Reply(sys, to, 7)
		if n := <-done; n != 7 {
			t.Fatalf("reply %d, want 7", n)
		}
	})
}

// pinger asks a ponger from its handler with AskFrom and records outcomes.
type pingCmd interface{ isPing() }
type pingStart struct{}
type pingResult struct {
	N   int
	Err error
}

func (pingStart) isPing()  {}
func (pingResult) isPing() {}

var pingKey = entity.NewTypeKey[pingCmd]("pinger")

func spawnPinger(sys *entity.System, target entity.Ref[cmd], timeout time.Duration, results *recorder[pingResult]) *entity.Cell[pingCmd] {
	return entity.Spawn(sys, &entity.Props[pingCmd]{Key: pingKey, Create: func(entity.Context[pingCmd]) entity.Behavior[pingCmd] {
		return entity.Receive(func(ctx entity.Context[pingCmd], m pingCmd) entity.Behavior[pingCmd] {
			switch m := m.(type) {
			case pingStart:
				entity.AskFrom(ctx, target, timeout,
					func(r entity.ReplyTo[int]) cmd { return get{ReplyTo: r} },
					func(n int, err error) pingCmd { return pingResult{N: n, Err: err} })
			case pingResult:
				results.add(m)
			}
			return entity.Same[pingCmd]()
		})
	}}, "p")
}

// With one worker, an entity that asked another from its handler must not
// hold the worker: the target needs it to reply. (A blocking Ask here would
// never get its reply.)
func TestAskFromDoesNotHoldTheWorker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sys := newSystem(t, func(c *entity.Config) { c.Workers = 1 })
		target := entity.Spawn(sys, &entity.Props[cmd]{Key: counterKey, Create: counter}, "t")
		mustTell[cmd](t, target, add{N: 41})
		var results recorder[pingResult]
		p := spawnPinger(sys, target, time.Second, &results)
		mustTell[pingCmd](t, p, pingStart{})
		synctest.Wait()
		if got := results.get(); len(got) != 1 || got[0] != (pingResult{N: 41}) {
			t.Fatalf("results %+v, want the reply 41 as a message", got)
		}
		time.Sleep(2 * time.Second) // past the timeout: nothing more arrives
		if got := results.len(); got != 1 {
			t.Fatalf("%d results, want 1", got)
		}
	})
}

// AskFrom's failures come back as messages too: a timeout on the System's
// clock, and a target that stops.
func TestAskFromDeliversFailures(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sys := newSystem(t)
		silent := entity.Spawn(sys, &entity.Props[cmd]{Key: counterKey, Create: func(entity.Context[cmd]) entity.Behavior[cmd] {
			return entity.Receive(func(entity.Context[cmd], cmd) entity.Behavior[cmd] { return entity.Same[cmd]() })
		}}, "silent")
		var results recorder[pingResult]
		p := spawnPinger(sys, silent, 3*time.Second, &results)
		mustTell[pingCmd](t, p, pingStart{})
		time.Sleep(3*time.Second - time.Nanosecond)
		synctest.Wait()
		if results.len() != 0 {
			t.Fatal("result before the timeout")
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if got := results.get(); len(got) != 1 || !errors.Is(got[0].Err, entity.ErrAskTimeout) {
			t.Fatalf("results %+v, want ErrAskTimeout", got)
		}

		silent.StopNow()
		waitDone(t, silent)
		mustTell[pingCmd](t, p, pingStart{})
		synctest.Wait()
		if got := results.get(); len(got) != 2 || !errors.Is(got[1].Err, entity.ErrStopped) {
			t.Fatalf("results %+v, want ErrStopped second", got)
		}
	})
}

type getAny struct{ ReplyTo entity.ReplyTo[any] }

func (getAny) isCmd() {}

// An Ask whose reply type is an interface (even any) still gets its
// failure as an error, not as a reply.
func TestAskOfInterfaceReplyGetsFailureAsError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sys := newSystem(t)
		c := entity.Spawn(sys, &entity.Props[cmd]{Key: counterKey, Create: counter}, "c") // getAny is unhandled
		v, err := entity.Ask(context.Background(), c, func(r entity.ReplyTo[any]) cmd { return getAny{ReplyTo: r} })
		if !errors.Is(err, entity.ErrUnhandled) || v != nil {
			t.Fatalf("Ask = %v, %v; want nil, ErrUnhandled", v, err)
		}
	})
}
