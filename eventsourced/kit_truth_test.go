package eventsourced_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/eventsourced"
	"github.com/shoal-dev/shoal/eventsourced/eventsourcedtest"
	"github.com/shoal-dev/shoal/stash"
	"github.com/shoal-dev/shoal/timers"
)

// The testkit tells the truth: each write is reported for the message that
// caused it, stops must be expected, and the kit can stop, start, delay, fail
// snapshots and wait for late replies.

// The fetcher fetches a value off the entity (PipeToSelf, one second of
// work) and persists it when the result comes back, replying then.
type fetchCmd interface{ isFetchCmd() }

type (
	fetch   struct{ ReplyTo entity.ReplyTo[string] }
	fetched struct {
		V       string
		ReplyTo entity.ReplyTo[string]
	}
	ping struct{}
)

func (fetch) isFetchCmd()   {}
func (fetched) isFetchCmd() {}
func (ping) isFetchCmd()    {}

var fetchKey = entity.NewTypeKey[fetchCmd]("Fetcher")

func newFetcher(ec entity.Context[fetchCmd]) entity.Behavior[fetchCmd] {
	return eventsourced.New(eventsourced.Config[fetchCmd, event, state]{
		PersistenceID: eventsourced.PersistenceIDOf(fetchKey, ec.EntityID()),
		OnCommand: func(ctx eventsourced.CommandContext[fetchCmd, event, state], _ state, c fetchCmd) eventsourced.Effect[event, state] {
			switch c := c.(type) {
			case fetch:
				return ctx.None().ThenRun(func(state) {
					ctx.PipeToSelf(func(context.Context) fetchCmd {
						time.Sleep(time.Second)
						return fetched{V: "v", ReplyTo: c.ReplyTo}
					})
				})
			case fetched:
				return ctx.Persist(added{Item: c.V}).ThenReply(eventsourced.To(c.ReplyTo, c.V))
			}
			return ctx.None()
		},
		OnEvent: func(_ eventsourced.Context[fetchCmd], s state, e event) state {
			s.Items = append(append([]string(nil), s.Items...), e.(added).Item)
			return s
		},
	})
}

func fetchRegistry() *codec.Registry {
	r := newRegistry()
	codec.MustRegister[fetch](r, "fetch")
	codec.MustRegister[fetched](r, "fetched")
	codec.MustRegister[ping](r, "ping")
	return r
}

func newFetchKit(t testing.TB) *eventsourcedtest.Kit[fetchCmd, event, state] {
	return eventsourcedtest.New[fetchCmd, event, state](t, fetchKey, newFetcher, eventsourcedtest.Options{Codec: fetchRegistry()})
}

func TestKitReportsUnstashedCommandsEventsForThem(t *testing.T) {
	kit := newKit(t, listOptions{})
	kit.RunCommand(lock{})
	if res := kit.RunCommand(stashCmd{Item: "s"}); len(res.Events) != 0 {
		t.Fatalf("a stashed command persisted %v", res.Events)
	}
	res := kit.RunCommand(unlock{})
	if !reflect.DeepEqual(res.Events, []event{unlocked{}}) {
		t.Fatalf("unlock's events %v, want only its own [unlocked]", res.Events)
	}
	want := []eventsourcedtest.Persisted[event]{{Cause: stashCmd{Item: "s"}, Events: []event{added{Item: "s"}}}}
	if !reflect.DeepEqual(res.Others, want) {
		t.Fatalf("others %+v, want %+v", res.Others, want)
	}
	if h := kit.History(); len(h) != 3 || !reflect.DeepEqual(h[1].Cause, unlock{}) || !reflect.DeepEqual(h[2], want[0]) {
		t.Fatalf("history %+v", h)
	}
}

func TestKitReportsTimerEventsForTheTimerMessage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		kit := newJobKit(t)
		started := kit.RunCommand(startJob{Timeout: 10 * time.Second})
		time.Sleep(11 * time.Second)
		synctest.Wait()
		res := kit.RunCommand(finishJob{}) // too late: unhandled
		if len(res.Events) != 0 {
			t.Fatalf("finishJob reported %v, the timer's events", res.Events)
		}
		deadline := started.Events[0].(jobStarted).Deadline
		if len(res.Others) != 1 || !reflect.DeepEqual(res.Others[0].Events, []jobEvent{jobTimedOut{}}) {
			t.Fatalf("others %+v, want the timeout's write", res.Others)
		}
		if c, ok := res.Others[0].Cause.(jobTimeout); !ok || !c.Deadline.Equal(deadline) {
			t.Fatalf("cause %#v, want the timer message jobTimeout{%v}", res.Others[0].Cause, deadline)
		}
	})
}

func TestKitReportsPipedResultsEventsAndTheLateReply(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		kit := newFetchKit(t)
		probe := eventsourcedtest.NewReplyProbe[string](kit)
		if res := kit.RunCommand(fetch{ReplyTo: probe.Ref()}); len(res.Events) != 0 {
			t.Fatalf("fetch persisted %v before its result came back", res.Events)
		}
		if r, ok := probe.Replied(); ok {
			t.Fatalf("replied %q before the result came back", r)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if r := probe.Expect(); r != "v" {
			t.Fatalf("late reply %q, want v", r)
		}
		res := kit.RunCommand(ping{})
		if len(res.Events) != 0 || len(res.Others) != 1 {
			t.Fatalf("ping result %+v, want the piped write in Others", res)
		}
		if c, ok := res.Others[0].Cause.(fetched); !ok || c.V != "v" || !reflect.DeepEqual(res.Others[0].Events, []event{added{Item: "v"}}) {
			t.Fatalf("other write %+v, want added{v} caused by fetched", res.Others[0])
		}
	})
}

func TestKitHistoryHasThePipedWriteOnceItsReplyIsSeen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		kit := newFetchKit(t)
		probe := eventsourcedtest.NewReplyProbe[string](kit)
		kit.RunCommand(fetch{ReplyTo: probe.Ref()})
		time.Sleep(time.Second)
		probe.Expect()
		h := kit.History()
		if len(h) != 1 || !reflect.DeepEqual(h[0].Events, []event{added{Item: "v"}}) {
			t.Fatalf("history after the late reply %+v, want the piped write added{v}", h)
		}
		if c, ok := h[0].Cause.(fetched); !ok || c.V != "v" {
			t.Fatalf("cause %#v, want fetched{v}", h[0].Cause)
		}
		// Reported by History, and still by the next Result.
		if res := kit.RunCommand(ping{}); len(res.Others) != 1 || !reflect.DeepEqual(res.Others[0].Events, h[0].Events) {
			t.Fatalf("ping's others %+v, want the piped write", res.Others)
		}
		if h := kit.History(); len(h) != 1 {
			t.Fatalf("history %+v, want the piped write once", h)
		}
	})
}

func TestReplyProbeFailsWhenNoReplyComes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		msg := expectFatal(t, func(tb testing.TB) {
			kit := newFetchKit(tb)
			probe := eventsourcedtest.NewReplyProbe[string](kit)
			kit.RunCommand(ping{}) // never answers the probe
			probe.Expect()
		})
		if !strings.Contains(msg, "no string reply within") {
			t.Fatalf("failure %q", msg)
		}
	})
}

func TestKitFailsTheTestOnAnUnexpectedStop(t *testing.T) {
	msg := expectFatal(t, func(tb testing.TB) {
		kit := eventsourcedtest.New[cmd, event, state](tb, listKey, listEntity(listOptions{}), eventsourcedtest.Options{Codec: newRegistry()})
		kit.RunCommand(addAndStop{Item: "x"})
	})
	if !strings.Contains(msg, "stopped unexpectedly") {
		t.Fatalf("failure %q, want an unexpected stop", msg)
	}
	// Announced, the same stop is a result.
	kit := newKit(t, listOptions{})
	kit.ExpectStop()
	if res := kit.RunCommand(addAndStop{Item: "x"}); !res.Stopped || res.Err != nil {
		t.Fatalf("result %+v, want a normal stop", res)
	}
}

func TestKitStopsNowAndStartsLater(t *testing.T) {
	kit := newKit(t, listOptions{})
	kit.RunCommand(add{Item: "a"})
	kit.Stop()
	if stopped, err := kit.Stopped(); !stopped || err != nil {
		t.Fatalf("stopped=%v err=%v after Stop", stopped, err)
	}
	seed(t, kit.Journal(), "List|test-entity", added{Item: "b"}) // written while it was down
	kit.Start()
	if got := itemsOf(kit.State()); got != "a,b" {
		t.Fatalf("recovered %q, want a,b", got)
	}
}

func TestKitPassesPropsCapacities(t *testing.T) {
	kit := eventsourcedtest.New[cmd, event, state](t, listKey, listEntity(listOptions{}), eventsourcedtest.Options{Codec: newRegistry(), StashCapacity: 1})
	kit.RunCommand(lock{})
	kit.RunCommand(stashCmd{Item: "1"})
	kit.ExpectStop()
	if res := kit.RunCommand(stashCmd{Item: "2"}); !res.Stopped || !errors.Is(res.Err, stash.ErrFull) {
		t.Fatalf("second stash with capacity 1: %+v, want a stop with stash.ErrFull", res)
	}
}

// fixedClock says it is always at; its timers run on the wall clock.
type fixedClock struct{ at time.Time }

func (c fixedClock) Now() time.Time { return c.at }
func (c fixedClock) AfterFunc(d time.Duration, f func()) timers.Timer {
	return timers.Real{}.AfterFunc(d, f)
}

func TestKitRunsTheEntityOnTheGivenClock(t *testing.T) {
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	kit := eventsourcedtest.New[cmd, event, state](t, listKey, listEntity(listOptions{}), eventsourcedtest.Options{Codec: newRegistry(), Clock: fixedClock{at}})
	kit.RunCommand(add{Item: "a"})
	if w := kit.Journal().Written(); len(w) != 1 || !w[0].Timestamp.Equal(at) {
		t.Fatalf("written %+v, want one event stamped %v", w, at)
	}
}

func TestKitInjectsSnapshotStoreFaults(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		kit := newKit(t, listOptions{rec: rec, retention: eventsourced.SnapshotEvery(1, 0)})
		down := errors.New("snapshot store down")
		kit.Snapshots().FailNextSave(down)
		kit.RunCommand(add{Item: "a"})
		synctest.Wait()
		if failed := countSignals[eventsourced.SnapshotFailed](rec); failed != 1 {
			t.Fatalf("%d SnapshotFailed signals, want 1: %v", failed, rec.signals())
		}
		kit.RunCommand(add{Item: "b"}) // one-shot: this snapshot is saved
		synctest.Wait()
		if done := countSignals[eventsourced.SnapshotCompleted](rec); done != 1 {
			t.Fatalf("%d SnapshotCompleted signals, want 1", done)
		}
		kit.Snapshots().FailNextLoad(down)
		kit.ExpectStop()
		kit.Restart()
		if stopped, err := kit.Stopped(); !stopped || !errors.Is(err, eventsourced.ErrRecoveryFailed) || !errors.Is(err, down) {
			t.Fatalf("stopped=%v err=%v, want a recovery failure with the store's error", stopped, err)
		}
	})
}

func TestKitInjectsJournalLatency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		kit := newKit(t, listOptions{})
		kit.Journal().DelayWrites(300 * time.Millisecond)
		start := time.Now()
		if res := kit.RunCommand(add{Item: "a"}); len(res.Events) != 1 {
			t.Fatalf("result %+v", res)
		}
		if took := time.Since(start); took != 300*time.Millisecond {
			t.Fatalf("persist took %v of the bubble's clock, want the injected 300ms", took)
		}
		kit.Journal().DelayReads(time.Second)
		start = time.Now()
		kit.Restart()
		if took := time.Since(start); took != 2*time.Second { // Replay, then HighestSeqNr
			t.Fatalf("recovery took %v, want 2s (two delayed reads)", took)
		}
		if got := itemsOf(kit.State()); got != "a" {
			t.Fatalf("recovered %q", got)
		}
	})
}

func TestKitPassesHeldCapacity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		kit := eventsourcedtest.New[cmd, event, state](t, listKey, listEntity(listOptions{}), eventsourcedtest.Options{Codec: newRegistry(), HeldCapacity: 1})
		kit.Journal().DelayWrites(time.Second)
		if err := kit.Ref().Tell(add{Item: "a"}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // a is being written: the mailbox is held
		if err := kit.Ref().Tell(add{Item: "b"}); err != nil {
			t.Fatalf("first held command: %v", err)
		}
		if err := kit.Ref().Tell(add{Item: "c"}); !errors.Is(err, entity.ErrMailboxFull) {
			t.Fatalf("second held command with HeldCapacity 1: %v, want entity.ErrMailboxFull", err)
		}
		if got := itemsOf(kit.State()); got != "a,b" {
			t.Fatalf("items %q, want a,b", got)
		}
	})
}
