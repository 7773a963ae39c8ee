package eventsourced_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/eventsourced"
	"github.com/shoal-dev/shoal/eventsourced/eventsourcedtest"
)

// droppingEntity runs handle for every command of the list fixture.
func droppingEntity(handle func(ctx eventsourced.CommandContext[cmd, event, state], s state, c cmd) eventsourced.Effect[event, state]) func(entity.Context[cmd]) entity.Behavior[cmd] {
	return func(ec entity.Context[cmd]) entity.Behavior[cmd] {
		return eventsourced.New(eventsourced.Config[cmd, event, state]{
			PersistenceID: eventsourced.PersistenceIDOf(listKey, ec.EntityID()),
			OnCommand:     handle,
			OnEvent: func(_ eventsourced.Context[cmd], s state, e event) state {
				if a, ok := e.(added); ok {
					s.Items = append(append([]string(nil), s.Items...), a.Item)
				}
				return s
			},
		})
	}
}

func TestAHandlerThatDropsTheEffectItBuiltStopsTheEntity(t *testing.T) {
	cases := []struct {
		name, built string
		handle      func(ctx eventsourced.CommandContext[cmd, event, state], s state, c cmd) eventsourced.Effect[event, state]
	}{
		{"Stop then None", "Stop", func(ctx eventsourced.CommandContext[cmd, event, state], _ state, _ cmd) eventsourced.Effect[event, state] {
			ctx.Stop()
			return ctx.None()
		}},
		{"Stash then None", "Stash", func(ctx eventsourced.CommandContext[cmd, event, state], _ state, _ cmd) eventsourced.Effect[event, state] {
			ctx.Stash()
			return ctx.None()
		}},
		{"Persist then another Persist", "Persist", func(ctx eventsourced.CommandContext[cmd, event, state], _ state, _ cmd) eventsourced.Effect[event, state] {
			ctx.Persist(added{Item: "lost"})
			return ctx.Persist(added{Item: "kept"})
		}},
		{"Reply then Unhandled", "Reply", func(ctx eventsourced.CommandContext[cmd, event, state], _ state, c cmd) eventsourced.Effect[event, state] {
			ctx.Reply(eventsourced.To(c.(noop).ReplyTo, "lost"))
			return ctx.Unhandled()
		}},
		{"UnstashAll then an Effects value", "UnstashAll", func(ctx eventsourced.CommandContext[cmd, event, state], _ state, _ cmd) eventsourced.Effect[event, state] {
			ctx.UnstashAll()
			return eventsourced.Effects[event, state]{}.Stop()
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			kit := eventsourcedtest.New[cmd, event, state](t, listKey, droppingEntity(tc.handle), eventsourcedtest.Options{Codec: newRegistry()})
			kit.ExpectStop()
			res := eventsourcedtest.RunCommandWithReply(kit, func(r entity.ReplyTo[string]) cmd { return noop{ReplyTo: r} })
			if !res.Stopped || !errors.Is(res.Err, eventsourced.ErrEffectDropped) {
				t.Fatalf("stopped %v, err %v; want a stop matching ErrEffectDropped", res.Stopped, res.Err)
			}
			de, ok := errors.AsType[*eventsourced.DroppedEffectError](res.Err)
			if !ok || de.Built != tc.built || de.Command != "eventsourced_test.noop" {
				t.Fatalf("error %#v, want a *DroppedEffectError naming %s and the command", res.Err, tc.built)
			}
			if msg := res.Err.Error(); !strings.Contains(msg, "effects act only when returned") {
				t.Fatalf("message %q does not say what to do", msg)
			}
			if len(res.Events) != 0 || res.Replied {
				t.Fatalf("events %v, replied %v: neither effect may run", res.Events, res.Replied)
			}
		})
	}
}

func TestReturningTheBuiltEffectOrOneChainedFromItIsFine(t *testing.T) {
	var saved eventsourced.Effect[event, state]
	handle := func(ctx eventsourced.CommandContext[cmd, event, state], s state, c cmd) eventsourced.Effect[event, state] {
		switch c := c.(type) {
		case add: // a default, overridden: None is not tracked
			eff := ctx.None()
			if c.Item != "" {
				eff = ctx.Persist(added{Item: c.Item})
			}
			return eff
		case addAndReply: // built, then chained conditionally
			eff := ctx.Persist(added{Item: c.Item})
			if c.Item != "quiet" {
				eff = eff.ThenReply(eventsourced.To(c.ReplyTo, len(s.Items)+1))
			}
			return eff.ThenRun(func(state) {})
		case stashCmd: // Unhandled as a default, overridden
			eff := ctx.Unhandled()
			if c.Item == "ok" {
				eff = ctx.Persist(added{Item: c.Item})
			}
			return eff
		case lock: // built by an earlier command, returned again now
			if saved.Kind() == eventsourced.EffectNone {
				saved = ctx.Persist(added{Item: "saved"})
			}
			return saved
		case noop: // immediate actions beside a returned effect
			ctx.Context.Stash()
			return ctx.Reply(eventsourced.To(c.ReplyTo, "ok"))
		}
		return ctx.Persist() // no events: None
	}
	kit := eventsourcedtest.New[cmd, event, state](t, listKey, droppingEntity(handle), eventsourcedtest.Options{Codec: newRegistry()})
	kit.RunCommand(add{})
	kit.RunCommand(add{Item: "a"})
	if r := eventsourcedtest.RunCommandWithReply(kit, func(r entity.ReplyTo[int]) cmd { return addAndReply{Item: "b", ReplyTo: r} }); r.Reply != 2 {
		t.Fatalf("reply %d, want 2", r.Reply)
	}
	kit.RunCommand(stashCmd{Item: "ok"})
	kit.RunCommand(stashCmd{Item: "refused"})
	kit.RunCommand(lock{})
	kit.RunCommand(lock{})
	if r := eventsourcedtest.RunCommandWithReply(kit, func(r entity.ReplyTo[string]) cmd { return noop{ReplyTo: r} }); r.Reply != "ok" {
		t.Fatalf("reply %q, want ok", r.Reply)
	}
	kit.RunCommand(unlock{})
	want := []string{"a", "b", "ok", "saved", "saved"}
	if s := kit.State(); !reflect.DeepEqual(s.Items, want) {
		t.Fatalf("items %v, want %v", s.Items, want)
	}
}
