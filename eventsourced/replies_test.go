package eventsourced_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/eventsourced"
	"github.com/shoal-dev/shoal/eventsourced/eventsourcedtest"
	"github.com/shoal-dev/shoal/journal/memory"
)

// Commands for the enforced-replies entity, beside the fixture's.
type (
	// later's reply comes from another message: its effect says NoReply.
	later struct{ ReplyTo entity.ReplyTo[string] }
	// embedded carries its ReplyTo in an embedded struct and forgets it.
	embedded struct{ replyHeader }
	// pointed is sent as a pointer and forgets its reply.
	pointed struct{ ReplyTo entity.ReplyTo[string] }
)

type replyHeader struct{ ReplyTo entity.ReplyTo[string] }

func (later) isCmd()    {}
func (embedded) isCmd() {}
func (*pointed) isCmd() {}

// enforcedEntity answers getItems, says NoReply to later, stashes stashCmd
// while locked, and forgets to reply to noop, embedded and *pointed.
func enforcedEntity(enforced bool, rec *recorder) func(entity.Context[cmd]) entity.Behavior[cmd] {
	return func(ec entity.Context[cmd]) entity.Behavior[cmd] {
		return eventsourced.New(eventsourced.Config[cmd, event, state]{
			PersistenceID:   eventsourced.PersistenceIDOf(listKey, ec.EntityID()),
			EnforcedReplies: enforced,
			OnCommand: func(ctx eventsourced.CommandContext[cmd, event, state], s state, c cmd) eventsourced.Effect[event, state] {
				switch c := c.(type) {
				case later:
					return ctx.NoReply()
				case noop, embedded, *pointed:
					return ctx.None()
				case getItems:
					return ctx.Persist(added{Item: "got"}).ThenReply(eventsourced.To(c.ReplyTo, s.Items))
				case lock:
					return ctx.Persist(locked{})
				case stashCmd:
					if s.Locked {
						return ctx.Stash()
					}
				}
				return ctx.Persist(added{Item: "x"})
			},
			OnEvent: func(_ eventsourced.Context[cmd], s state, e event) state {
				if _, ok := e.(locked); ok {
					s.Locked = true
				}
				return s
			},
			OnSignal: func(_ eventsourced.Context[cmd], _ state, sig eventsourced.Signal) { rec.signal(sig) },
		})
	}
}

func missingReplies(rec *recorder) []*eventsourced.MissingReplyError {
	var out []*eventsourced.MissingReplyError
	for _, s := range rec.signals() {
		if m, ok := s.(eventsourced.ReplyMissing); ok {
			var err *eventsourced.MissingReplyError
			if !errors.As(m.Err, &err) || !errors.Is(m.Err, eventsourced.ErrMissingReply) {
				panic("ReplyMissing without a *MissingReplyError")
			}
			out = append(out, err)
		}
	}
	return out
}

// In production (no testkit) a missing reply is logged and signalled, and
// the entity carries on; effects that reply, say NoReply or stash, and
// commands without a ReplyTo, are not flagged.
func TestEnforcedRepliesSignalsAMissingReplyAndCarriesOn(t *testing.T) {
	rec := &recorder{}
	sys, err := entity.NewSystem(entity.Config{Codec: newRegistry(), Journal: memory.New(), Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	c := entity.Spawn(sys, &entity.Props[cmd]{Key: listKey, Create: enforcedEntity(true, rec)}, "e")
	for _, m := range []cmd{add{Item: "a"}, later{}, lock{}, stashCmd{}, noop{}, embedded{}, &pointed{}} {
		if err := c.Tell(m); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := entity.Ask(ctx, c, func(r entity.ReplyTo[[]string]) cmd { return getItems{ReplyTo: r} }); err != nil {
		t.Fatalf("the entity did not carry on: %v", err)
	}
	var got []string
	for _, m := range missingReplies(rec) {
		got = append(got, m.Command)
		if m.PersistenceID != "List|e" || m.Effect != eventsourced.EffectNone {
			t.Errorf("violation %+v", m)
		}
	}
	want := []string{"eventsourced_test.noop", "eventsourced_test.embedded", "*eventsourced_test.pointed"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("missing replies for %v, want %v", got, want)
	}
}

func TestRepliesAreNotEnforcedByDefault(t *testing.T) {
	rec := &recorder{}
	kit := eventsourcedtest.New[cmd, event, state](t, listKey, enforcedEntity(false, rec), eventsourcedtest.Options{Codec: newRegistry()})
	kit.RunCommand(noop{})
	if m := missingReplies(rec); len(m) != 0 {
		t.Fatalf("violations without EnforcedReplies: %v", m)
	}
}

func TestDecidesReply(t *testing.T) {
	var fx eventsourced.Effects[event, state]
	var r entity.ReplyTo[int]
	for _, tc := range []struct {
		name string
		eff  eventsourced.Effect[event, state]
		want bool
	}{
		{"None", fx.None(), false},
		{"Persist", fx.Persist(added{}), false},
		{"Persist.ThenRun", fx.Persist(added{}).ThenRun(func(state) {}), false},
		{"Unhandled", fx.Unhandled(), true},
		{"Stop", fx.Stop(), false},
		{"Reply", fx.Reply(eventsourced.To(r, 1)), true},
		{"Persist.ThenReply", fx.Persist(added{}).ThenReply(eventsourced.To(r, 1)), true},
		{"Persist.ThenReplyFrom", fx.Persist(added{}).ThenReplyFrom(func(s state) eventsourced.Answer { return eventsourced.To(r, len(s.Items)) }), true},
		{"NoReply", fx.NoReply(), true},
		{"Stop.ThenNoReply", fx.Stop().ThenNoReply(), true},
		{"Stash", fx.Stash(), true},
	} {
		if got := tc.eff.DecidesReply(); got != tc.want {
			t.Errorf("%s: DecidesReply = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func enforcedRegistry() *codec.Registry {
	r := newRegistry()
	codec.MustRegister[later](r, "later")
	codec.MustRegister[embedded](r, "embedded")
	return r
}

// The testkit fails the test at the command that broke EnforcedReplies,
// naming it; commands that decide their reply pass.
func TestKitReportsAMissingReplyForThatCommand(t *testing.T) {
	msg := expectFatal(t, func(tb testing.TB) {
		kit := eventsourcedtest.New[cmd, event, state](tb, listKey, enforcedEntity(true, &recorder{}), eventsourcedtest.Options{Codec: enforcedRegistry()})
		kit.RunCommand(add{Item: "a"})
		kit.RunCommand(later{})
		eventsourcedtest.RunCommandWithReply(kit, func(r entity.ReplyTo[[]string]) cmd { return getItems{ReplyTo: r} })
		kit.RunCommand(embedded{})
	})
	if !strings.Contains(msg, "eventsourced_test.embedded") || !strings.Contains(msg, eventsourced.ErrMissingReply.Error()) {
		t.Fatalf("failure = %q", msg)
	}
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
