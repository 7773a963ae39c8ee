package entity_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/internal/metrics/metricstest"
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
	if got := metricstest.Value(t, reg, "shoal_entity_dead_letters_total", map[string]string{"type": "none"}); got != 1 {
		t.Fatalf("untyped dead letters %v, want 1", got)
	}
}

// Mailbox depth counts what waits behind a busy handler; delivered counts
// what the behavior handled.
func TestMetricsMailboxDepthAndDelivered(t *testing.T) {
	sys, reg, _ := metricsSystem(t)
	entered, release, handled := make(chan struct{}), make(chan struct{}), make(chan string, 10)
	c := spawnFunc(sys, "busy", func(_ entity.Context[string], m string) entity.Behavior[string] {
		if m == "block" {
			close(entered)
			<-release
		}
		handled <- m
		return entity.Same[string]()
	})
	mustTell(t, c, "block")
	recv(t, entered)
	for _, m := range []string{"a", "b", "c"} {
		mustTell(t, c, m)
	}
	depth := func() float64 {
		return metricstest.Value(t, reg, "shoal_entity_mailbox_depth", map[string]string{"type": "strings"})
	}
	if got := depth(); got != 3 {
		t.Fatalf("mailbox depth %v with 3 messages behind a busy handler, want 3", got)
	}
	close(release)
	for range 4 {
		recv(t, handled)
	}
	if got := depth(); got != 0 {
		t.Fatalf("mailbox depth %v after all were handled, want 0", got)
	}
	if got := metricstest.Value(t, reg, "shoal_entity_messages_delivered_total", map[string]string{"type": "strings"}); got != 4 {
		t.Fatalf("delivered %v, want 4", got)
	}
}

// Messages left in the mailbox of a stopped entity leave the depth.
func TestMetricsMailboxDepthDropsWithStop(t *testing.T) {
	sys, reg, _ := metricsSystem(t)
	entered, release := make(chan struct{}), make(chan struct{})
	c := spawnFunc(sys, "s", func(ctx entity.Context[string], m string) entity.Behavior[string] {
		if m == "block" {
			close(entered)
			<-release
			return entity.Stopped[string]()
		}
		return entity.Same[string]()
	})
	mustTell(t, c, "block")
	recv(t, entered)
	mustTell(t, c, "x")
	mustTell(t, c, "y")
	close(release)
	waitDone(t, c)
	if got := metricstest.Value(t, reg, "shoal_entity_mailbox_depth", map[string]string{"type": "strings"}); got != 0 {
		t.Fatalf("mailbox depth %v after the entity stopped, want 0", got)
	}
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
