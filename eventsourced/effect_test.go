package eventsourced_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/eventsourced"
	"github.com/shoal-dev/shoal/eventsourced/eventsourcedtest"
	"github.com/shoal-dev/shoal/journal/memory"
)

func TestChainingNeverChangesAnExistingEffect(t *testing.T) {
	var fx eventsourced.Effects[event, state]
	var r entity.ReplyTo[int]
	base := fx.Persist(added{Item: "a"})
	a := base.ThenRun(func(state) {})
	_ = base.ThenRun(func(state) {}).ThenStop()
	b := a.ThenReply(eventsourced.To(r, 1))
	_ = a.ThenUnstashAll() // a's spare capacity must not be b's
	// A chain long enough to have spare capacity, branched twice.
	c3 := fx.None().ThenRun(func(state) {}).ThenRun(func(state) {}).ThenRun(func(state) {})
	d := c3.ThenStop()
	_ = c3.ThenUnstashAll()
	run3 := []eventsourced.SideEffectKind{eventsourced.SideRun, eventsourced.SideRun, eventsourced.SideRun}
	for _, tc := range []struct {
		name string
		eff  eventsourced.Effect[event, state]
		want []eventsourced.SideEffectKind
	}{
		{"c3", c3, run3},
		{"d", d, append(run3, eventsourced.SideStop)},
		{"base", base, []eventsourced.SideEffectKind{}},
		{"a", a, []eventsourced.SideEffectKind{eventsourced.SideRun}},
		{"b", b, []eventsourced.SideEffectKind{eventsourced.SideRun, eventsourced.SideReply}},
	} {
		if got := tc.eff.SideEffects(); !slices.Equal(got, tc.want) {
			t.Errorf("%s: side effects %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestPersistKeepsItsOwnCopyOfTheEvents(t *testing.T) {
	var fx eventsourced.Effects[event, state]
	evs := []event{added{Item: "a"}}
	eff := fx.Persist(evs...)
	evs[0] = added{Item: "changed"}
	eff.Events()[0] = added{Item: "changed too"}
	if got := eff.Events(); len(got) != 1 || got[0] != (added{Item: "a"}) {
		t.Fatalf("events %v, want [a]", got)
	}
	if eff.Kind() != eventsourced.EffectPersist || fx.Persist().Kind() != eventsourced.EffectNone {
		t.Fatalf("kinds %v and %v", eff.Kind(), fx.Persist().Kind())
	}
}

// Two chains from one base (chaining returns a new effect, the base is
// unchanged): the entity runs only the side effect of the chain it returned.
func TestEntityRunsOnlyTheChainItReturned(t *testing.T) {
	rec := &recorder{}
	create := func(ec entity.Context[cmd]) entity.Behavior[cmd] {
		return eventsourced.New(eventsourced.Config[cmd, event, state]{
			PersistenceID: eventsourced.PersistenceIDOf(listKey, ec.EntityID()),
			OnCommand: func(ctx eventsourced.CommandContext[cmd, event, state], s state, c cmd) eventsourced.Effect[event, state] {
				base := ctx.Persist(added{Item: "x"})
				a := base.ThenRun(func(state) { rec.note("f") })
				_ = base.ThenRun(func(state) { rec.note("g") })
				return a
			},
			OnEvent: func(_ eventsourced.Context[cmd], s state, _ event) state { return s },
		})
	}
	kit := eventsourcedtest.New[cmd, event, state](t, listKey, create, eventsourcedtest.Options{Codec: newRegistry()})
	kit.RunCommand(add{Item: "x"})
	if got := rec.notes(); !slices.Equal(got, []string{"f"}) {
		t.Fatalf("side effects %v, want [f]", got)
	}
}

// ignoreEffect is shared by every entity below, as a user might share a
// package-level effect.
var ignoreEffect = eventsourced.Effects[event, state]{}.None()

// Two entities on two workers return ignoreEffect.ThenRun(...) for every
// command: each command runs exactly one side effect, the shared effect
// does not grow, and (under -race) nothing races.
func TestSharedPackageLevelEffectNeitherGrowsNorRaces(t *testing.T) {
	sys, err := entity.NewSystem(entity.Config{Workers: 2, Codec: newRegistry(), Journal: memory.New(), Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	var ran [2]atomic.Int64
	props := &entity.Props[cmd]{Key: listKey, Create: func(ec entity.Context[cmd]) entity.Behavior[cmd] {
		i := 0
		if ec.EntityID() == "b" {
			i = 1
		}
		return eventsourced.New(eventsourced.Config[cmd, event, state]{
			PersistenceID: eventsourced.PersistenceIDOf(listKey, ec.EntityID()),
			OnCommand: func(ctx eventsourced.CommandContext[cmd, event, state], s state, c cmd) eventsourced.Effect[event, state] {
				if c, ok := c.(getItems); ok {
					return ctx.Reply(eventsourced.To(c.ReplyTo, s.Items))
				}
				return ignoreEffect.ThenRun(func(state) { ran[i].Add(1) })
			},
			OnEvent: func(_ eventsourced.Context[cmd], s state, _ event) state { return s },
		})
	}}
	const commands = 200
	cells := []*entity.Cell[cmd]{entity.Spawn(sys, props, "a"), entity.Spawn(sys, props, "b")}
	var wg sync.WaitGroup
	for _, c := range cells {
		wg.Go(func() {
			for range commands {
				if err := c.Tell(noop{}); err != nil {
					t.Error(err)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if _, err := entity.Ask(ctx, c, func(r entity.ReplyTo[[]string]) cmd { return getItems{ReplyTo: r} }); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	for i := range ran {
		if n := ran[i].Load(); n != commands {
			t.Errorf("entity %d ran %d side effects for %d commands", i, n, commands)
		}
	}
	if n := len(ignoreEffect.SideEffects()); n != 0 {
		t.Errorf("the shared effect grew to %d side effects", n)
	}
}
