package eventsourcedtest_test

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/eventsourced"
	"github.com/shoal-dev/shoal/eventsourced/eventsourcedtest"
)

type command interface{ isCommand() }
type (
	set      struct{ V string }
	setLossy struct{ V string }
	unreg    struct{}
)

func (set) isCommand()      {}
func (setLossy) isCommand() {}
func (unreg) isCommand()    {}

type event interface{ isEvent() }
type was struct{ V string }

func (was) isEvent() {}

// state keeps a copy of the value in an unexported field, which JSON drops:
// the kind of state that works until the first snapshot or transfer.
type state struct {
	V      string
	hidden string
}

var key = entity.NewTypeKey[command]("Reg")

func create(ec entity.Context[command]) entity.Behavior[command] {
	return eventsourced.New(eventsourced.Config[command, event, state]{
		PersistenceID: eventsourced.PersistenceIDOf(key, ec.EntityID()),
		OnCommand: func(ctx eventsourced.CommandContext[command, event, state], _ state, c command) eventsourced.Effect[event, state] {
			switch c := c.(type) {
			case set:
				return ctx.Persist(was{V: c.V})
			case setLossy:
				return ctx.Persist(was{V: "lossy:" + c.V})
			}
			return ctx.None()
		},
		OnEvent: func(_ eventsourced.Context[command], s state, e event) state {
			v := e.(was).V
			if rest, ok := strings.CutPrefix(v, "lossy:"); ok {
				return state{V: rest, hidden: rest}
			}
			return state{V: v}
		},
	})
}

func registry() *codec.Registry {
	r := codec.NewRegistry()
	codec.MustRegister[set](r, "set")
	codec.MustRegister[setLossy](r, "setLossy")
	codec.MustRegister[was](r, "was")
	codec.MustRegister[state](r, "state")
	return r
}

// fakeTB records the first fatal failure instead of failing the real test.
type fakeTB struct {
	testing.TB
	fatal string
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (f *fakeTB) Fatal(args ...any) { f.Fatalf("%s", fmt.Sprint(args...)) }

// expectFatal runs body with a fakeTB and returns the failure it reported.
func expectFatal(t *testing.T, body func(tb testing.TB)) string {
	t.Helper()
	tb := &fakeTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		body(tb)
	}()
	<-done
	return tb.fatal
}

func TestKitPassesForSerializableEntity(t *testing.T) {
	kit := eventsourcedtest.New[command, event, state](t, key, create, eventsourcedtest.Options{Codec: registry()})
	res := kit.RunCommand(set{V: "x"})
	if len(res.Events) != 1 || res.Events[0] != (was{V: "x"}) || res.State.V != "x" {
		t.Fatalf("result = %+v", res)
	}
}

func TestKitCatchesStateThatDoesNotSurviveTheCodec(t *testing.T) {
	msg := expectFatal(t, func(tb testing.TB) {
		kit := eventsourcedtest.New[command, event, state](tb, key, create, eventsourcedtest.Options{Codec: registry()})
		kit.RunCommand(setLossy{V: "x"})
	})
	if !strings.Contains(msg, "state changes in a codec round trip") {
		t.Fatalf("failure = %q", msg)
	}
}

func TestKitCatchesUnregisteredCommand(t *testing.T) {
	msg := expectFatal(t, func(tb testing.TB) {
		kit := eventsourcedtest.New[command, event, state](tb, key, create, eventsourcedtest.Options{Codec: registry()})
		kit.RunCommand(unreg{})
	})
	if !strings.Contains(msg, "does not serialize") {
		t.Fatalf("failure = %q", msg)
	}
}

func TestKitInspectRunsOnTheEntityAfterQueuedMessages(t *testing.T) {
	kit := eventsourcedtest.New[command, event, state](t, key, create, eventsourcedtest.Options{Codec: registry()})
	if err := kit.Ref().Tell(set{V: "queued"}); err != nil {
		t.Fatal(err)
	}
	var id string
	var stored int
	if !kit.Inspect(func(ctx entity.Context[command]) {
		// The command queued before was handled, and its event stored:
		// its write holds the mailbox until it completes.
		id, stored = ctx.EntityID(), len(kit.Journal().Written())
	}) {
		t.Fatal("Inspect reported a stopped entity")
	}
	if id != "test-entity" || stored != 1 {
		t.Fatalf("Inspect saw entity %q after %d events, want test-entity after 1", id, stored)
	}
	kit.Stop()
	if kit.Inspect(func(entity.Context[command]) { t.Error("Inspect ran on a stopped entity") }) {
		t.Fatal("Inspect on a stopped entity reported true")
	}
}

func TestKitChecksCanBeSkipped(t *testing.T) {
	kit := eventsourcedtest.New[command, event, state](t, key, create, eventsourcedtest.Options{Codec: registry(), SkipSerializationChecks: true})
	if res := kit.RunCommand(setLossy{V: "x"}); res.State.V != "x" {
		t.Fatalf("result = %+v", res)
	}
	if res := kit.RunCommand(unreg{}); res.Stopped {
		t.Fatalf("result = %+v", res)
	}
}

func TestFaultInjectionIsOneShot(t *testing.T) {
	kit := eventsourcedtest.New[command, event, state](t, key, create, eventsourcedtest.Options{Codec: registry()})
	boom := errors.New("boom")
	kit.Journal().FailNextPersist(boom)
	kit.ExpectStop()
	if res := kit.RunCommand(set{V: "a"}); !errors.Is(res.Err, boom) {
		t.Fatalf("first persist: %+v", res)
	}
	kit.Restart()
	if res := kit.RunCommand(set{V: "b"}); res.Stopped || res.State.V != "b" {
		t.Fatalf("second persist: %+v", res)
	}
}
