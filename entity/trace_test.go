package entity_test

import (
	"context"
	"errors"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/internal/runtime"
)

// unknown is a command its entity returns Unhandled for.
type unknown struct{ ReplyTo entity.ReplyTo[int] }

func (unknown) isCmd() {}

// seen records, for each command, the span context its handler ran in.
type seen struct {
	ch chan trace.SpanContext
}

func (s seen) create(entity.Context[cmd]) entity.Behavior[cmd] {
	return entity.Receive(func(ctx entity.Context[cmd], c cmd) entity.Behavior[cmd] {
		s.ch <- trace.SpanContextFromContext(entity.TraceContext(ctx))
		switch c := c.(type) {
		case get:
			entity.Reply(ctx, c.ReplyTo, 1)
		case stop:
			return entity.Stopped[cmd]()
		case unknown:
			return entity.Unhandled[cmd]()
		}
		return entity.Same[cmd]()
	})
}

func tracedSystem(t *testing.T) (*entity.System, *tracetest.InMemoryExporter) {
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return newSystem(t, func(c *entity.Config) { c.TracerProvider = tp }), spans
}

func spanNamed(t *testing.T, spans *tracetest.InMemoryExporter, name string) tracetest.SpanStub {
	t.Helper()
	for _, s := range spans.GetSpans() {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no %s span among %d", name, len(spans.GetSpans()))
	return tracetest.SpanStub{}
}

// A command told with a traced context is handled in a
// "shoal.entity.handle" span, a child of the sender's, named after the
// entity; TraceContext gives the handler that span.
func TestTellContextHandlesInAChildSpan(t *testing.T) {
	sys, spans := tracedSystem(t)
	s := seen{make(chan trace.SpanContext, 1)}
	c := entity.Spawn(sys, &entity.Props[cmd]{Key: counterKey, Create: s.create}, "traced")
	ctx, caller := sys.Tracer().Start(context.Background(), "caller")
	if err := entity.TellContext[cmd](ctx, c, add{N: 1}); err != nil {
		t.Fatal(err)
	}
	inHandler := <-s.ch
	caller.End()
	askGet(t, c) // the handle span has ended once the next command is answered
	<-s.ch
	handle := spanNamed(t, spans, "shoal.entity.handle")
	if handle.Parent.SpanID() != caller.SpanContext().SpanID() || handle.SpanContext.TraceID() != caller.SpanContext().TraceID() {
		t.Fatalf("handle span's parent %v, want the caller's %v", handle.Parent, caller.SpanContext())
	}
	if inHandler.SpanID() != handle.SpanContext.SpanID() {
		t.Fatalf("TraceContext in the handler has span %v, want the handle span %v", inHandler.SpanID(), handle.SpanContext.SpanID())
	}
	attrs := map[string]string{}
	for _, kv := range handle.Attributes {
		attrs[string(kv.Key)] = kv.Value.Emit()
	}
	if attrs[string(entity.AttrEntityType)] != "counter" || attrs[string(entity.AttrEntityID)] != "traced" {
		t.Fatalf("attributes %v", attrs)
	}
}

// An Ask starts a "shoal.ask" span, the parent of the handling of its
// command; an ask that fails marks its span with the error. A Tell
// without a context starts no span at all.
func TestAskSpan(t *testing.T) {
	sys, spans := tracedSystem(t)
	s := seen{make(chan trace.SpanContext, 3)}
	c := entity.Spawn(sys, &entity.Props[cmd]{Key: counterKey, Create: s.create}, "asked")
	if err := c.Tell(add{N: 1}); err != nil {
		t.Fatal(err)
	}
	if sc := <-s.ch; sc.IsValid() {
		t.Fatalf("an untraced Tell's handler sees span %v", sc)
	}
	if n := len(spans.GetSpans()); n != 0 {
		t.Fatalf("an untraced Tell made %d spans", n)
	}
	askGet(t, c)
	inHandler := <-s.ch
	ask := spanNamed(t, spans, "shoal.ask")
	if inHandler.TraceID() != ask.SpanContext.TraceID() {
		t.Fatalf("the asked handler runs in trace %v, want the ask's %v", inHandler.TraceID(), ask.SpanContext.TraceID())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := entity.Ask(ctx, entity.Ref[cmd](c), func(to entity.ReplyTo[int]) cmd { return unknown{to} })
	if !errors.Is(err, entity.ErrUnhandled) {
		t.Fatalf("ask of an unhandled command: %v", err)
	}
	<-s.ch
	var failed int
	for _, sp := range spans.GetSpans() {
		if sp.Name == "shoal.ask" && sp.Status.Code.String() == "Error" {
			failed++
		}
	}
	if failed != 1 {
		t.Fatalf("%d failed ask spans, want 1", failed)
	}
}

// With the default no-op provider nothing is recorded, and the sender's
// trace context still reaches the handler, to continue elsewhere.
func TestNoopProviderCarriesTraceContext(t *testing.T) {
	sys := newSystem(t)
	if sys.Tracing() {
		t.Fatal("the default provider records spans")
	}
	s := seen{make(chan trace.SpanContext, 1)}
	c := entity.Spawn(sys, &entity.Props[cmd]{Key: counterKey, Create: s.create}, "plain")
	parent := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled})
	if err := c.TellContext(trace.ContextWithSpanContext(context.Background(), parent), add{N: 1}); err != nil {
		t.Fatal(err)
	}
	if got := <-s.ch; !got.Equal(parent) {
		t.Fatalf("handler sees %v, want the sender's %v", got, parent)
	}
}

// A traced command left in the mailbox of an entity that stops is a
// dead letter, like any other.
func TestTracedCommandLeftInMailboxIsADeadLetter(t *testing.T) {
	sys, _ := tracedSystem(t)
	s := seen{make(chan trace.SpanContext, 2)}
	c := entity.Spawn(sys, &entity.Props[cmd]{Key: counterKey, Create: s.create}, "left")
	ctx, span := sys.Tracer().Start(context.Background(), "caller")
	defer span.End()
	block := make(chan struct{})
	runtime.Post(c, func() { <-block }) // hold the entity while both commands queue
	if err := c.TellContext(ctx, stop{}); err != nil {
		t.Fatal(err)
	}
	if err := c.TellContext(ctx, add{N: 1}); err != nil {
		t.Fatal(err)
	}
	close(block)
	<-c.Done()
	if got := sys.DeadLetters(); got != 1 {
		t.Fatalf("dead letters %d, want 1", got)
	}
}
