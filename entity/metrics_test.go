package entity_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/internal/metrics/metricstest"
	"github.com/shoal-dev/shoal/internal/runtime"
)

func metricsSystem(t *testing.T) (*entity.System, *prometheus.Registry, *fakeClock) {
	reg := prometheus.NewRegistry()
	clock := newFakeClock()
	return newSystem(t, func(c *entity.Config) { c.Metrics, c.Clock = reg, clock }), reg, clock
}

// A message to a stopped entity adds exactly one dead letter to its type.
func TestMetricsDeadLetterCountsOnePerType(t *testing.T) {
	sys, reg, _ := metricsSystem(t)
	c := spawnFunc(sys, "gone", func(entity.Context[string], string) entity.Behavior[string] { return entity.Same[string]() })
	c.StopNow()
	waitDone(t, c)
	before := metricstest.Value(t, reg, "shoal_entity_dead_letters_total", map[string]string{"type": "strings"})
	_ = c.Tell("hello")
	if got := metricstest.Value(t, reg, "shoal_entity_dead_letters_total", map[string]string{"type": "strings"}); got != before+1 {
		t.Fatalf("dead letters of strings %v after one more, want %v", got, before+1)
	}
	entity.Reply(sys, entity.ReplyTo[int]{}, 1) // a reply to nobody: no entity type
	if got := metricstest.Value(t, reg, "shoal_entity_untyped_dead_letters_total", nil); got != 1 {
		t.Fatalf("untyped dead letters %v, want 1", got)
	}
}

// Mailbox depth counts what waits in a held mailbox (an event-sourced
// entity persisting); delivered counts what the behavior handled. Both are
// reported where the cell's lock is taken anyway, not per message, and are
// exact once the entity's turn has ended.
func TestMetricsMailboxDepthAndDelivered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewRegistry()
		sys := newSystem(t, func(c *entity.Config) { c.Metrics = reg })
		var cell *entity.Cell[string]
		handled := 0
		cell = spawnFunc(sys, "held", func(_ entity.Context[string], m string) entity.Behavior[string] {
			if m == "hold" {
				runtime.Suspend(cell)
			}
			handled++
			return entity.Same[string]()
		})
		depth := func() float64 {
			return metricstest.Value(t, reg, "shoal_entity_mailbox_depth", map[string]string{"type": "strings"})
		}
		mustTell(t, cell, "hold")
		synctest.Wait()
		for _, m := range []string{"a", "b", "c"} {
			mustTell(t, cell, m)
		}
		synctest.Wait()
		if got := depth(); got != 3 {
			t.Fatalf("mailbox depth %v with 3 messages held, want 3", got)
		}
		runtime.Post(cell, func() { runtime.Resume(cell) })
		synctest.Wait()
		if handled != 4 {
			t.Fatalf("handled %d, want 4", handled)
		}
		if got := depth(); got != 0 {
			t.Fatalf("mailbox depth %v after all were handled, want 0", got)
		}
		if got := metricstest.Value(t, reg, "shoal_entity_messages_delivered_total", map[string]string{"type": "strings"}); got != 4 {
			t.Fatalf("delivered %v, want 4", got)
		}
		cell.StopNow()
		synctest.Wait()
	})
}

// Messages left in the mailbox of a stopped entity leave the depth and
// become dead letters of its type.
func TestMetricsMailboxDepthDropsWithStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewRegistry()
		sys := newSystem(t, func(c *entity.Config) { c.Metrics = reg })
		var cell *entity.Cell[string]
		cell = spawnFunc(sys, "s", func(_ entity.Context[string], m string) entity.Behavior[string] {
			runtime.Suspend(cell)
			return entity.Same[string]()
		})
		labels := map[string]string{"type": "strings"}
		mustTell(t, cell, "hold")
		synctest.Wait()
		mustTell(t, cell, "x")
		mustTell(t, cell, "y")
		synctest.Wait()
		if got := metricstest.Value(t, reg, "shoal_entity_mailbox_depth", labels); got != 2 {
			t.Fatalf("mailbox depth %v with 2 held, want 2", got)
		}
		cell.StopNow()
		synctest.Wait()
		if got := metricstest.Value(t, reg, "shoal_entity_mailbox_depth", labels); got != 0 {
			t.Fatalf("mailbox depth %v after the entity stopped, want 0", got)
		}
		if got := metricstest.Value(t, reg, "shoal_entity_dead_letters_total", labels); got != 2 {
			t.Fatalf("dead letters %v, want the 2 left in the mailbox", got)
		}
	})
}

// An ask records one latency observation of its entity type, measured on
// the System's clock.
func TestMetricsAskLatency(t *testing.T) {
	sys, reg, clock := metricsSystem(t)
	slow := func(ctx entity.Context[cmd]) entity.Behavior[cmd] {
		return entity.Receive(func(ctx entity.Context[cmd], c cmd) entity.Behavior[cmd] {
			if g, ok := c.(get); ok {
				clock.Advance(3 * time.Second)
				entity.Reply(ctx, g.ReplyTo, 7)
			}
			return entity.Same[cmd]()
		})
	}
	c := entity.Spawn(sys, &entity.Props[cmd]{Key: counterKey, Create: slow}, "a")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := entity.Ask(ctx, c, func(r entity.ReplyTo[int]) cmd { return get{ReplyTo: r} }); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"type": "counter"}
	if n := metricstest.Value(t, reg, "shoal_entity_ask_duration_seconds", labels); n != 1 {
		t.Fatalf("%v ask observations, want 1", n)
	}
	if sum := metricstest.HistogramSum(t, reg, "shoal_entity_ask_duration_seconds", labels); sum != 3 {
		t.Fatalf("ask latency sum %v s, want 3 (the clock advanced while handling)", sum)
	}
}

// Without a Registerer the runtime runs as before.
func TestMetricsOffByDefault(t *testing.T) {
	sys := newSystem(t)
	if got := askGet(t, entity.Spawn(sys, &entity.Props[cmd]{Key: counterKey, Create: counter}, "n")); got != 0 {
		t.Fatalf("counter %d", got)
	}
}

// A runtime started again on the same registry (a node restarted in the
// process) is the one scraped: its delivered count, not the stopped
// runtime's.
func TestMetricsRestartedSystemIsScraped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewRegistry()
		run := func(msgs ...string) {
			sys := newSystem(t, func(c *entity.Config) { c.Metrics = reg })
			cell := spawnFunc(sys, "e", func(entity.Context[string], string) entity.Behavior[string] { return entity.Same[string]() })
			for _, m := range msgs {
				mustTell(t, cell, m)
			}
			synctest.Wait()
			cell.StopNow()
			synctest.Wait()
		}
		delivered := func() float64 {
			return metricstest.Value(t, reg, "shoal_entity_messages_delivered_total", map[string]string{"type": "strings"})
		}
		run("a", "b", "c")
		if got := delivered(); got != 3 {
			t.Fatalf("delivered %v by the first runtime, want 3", got)
		}
		run("d")
		if got := delivered(); got != 1 {
			t.Fatalf("delivered %v after the restart, want 1 (the new runtime's)", got)
		}
	})
}
