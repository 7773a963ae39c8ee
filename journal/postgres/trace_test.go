package postgres_test

import (
	"context"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/shoal-dev/shoal/journal/postgres"
)

// Three writes share one round trip: two traced (one through WriteAsync),
// one not. Each traced write has its "shoal.journal.write" span, a child
// of its caller's; the batch's span is a child of the first traced write's
// and links to the other's (docs/DESIGN.md, "Tracing"). An untraced write
// makes no span.
func TestTracedWritesAndTheirBatch(t *testing.T) {
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	j := newJournal(t, postgres.Config{Writers: 1, MaxBatchEvents: 3, MaxBatchWait: time.Minute, TracerProvider: tp})
	tracer := tp.Tracer("test")
	ctxA, callerA := tracer.Start(context.Background(), "a")
	ctxB, callerB := tracer.Start(context.Background(), "b")
	defer callerA.End()
	defer callerB.End()
	var wg sync.WaitGroup
	errs := make([]error, 3)
	wg.Add(3)
	go func() { defer wg.Done(); errs[0] = j.Write(ctxA, evs("traced-a", 1, 1, "w")) }()
	j.WriteAsync(ctxB, evs("traced-b", 1, 1, "w"), func(err error) { errs[1] = err; wg.Done() })
	go func() { defer wg.Done(); errs[2] = j.Write(context.Background(), evs("untraced", 1, 1, "w")) }()
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	if got := j.Stats().Batches; got != 1 {
		t.Fatalf("%d batches, want 1", got)
	}
	var writes []tracetest.SpanStub
	var batch *tracetest.SpanStub
	poll(t, "the batch span ends after the outcomes went out", 30*time.Second, func() bool {
		writes, batch = nil, nil
		for _, s := range spans.GetSpans() {
			switch s.Name {
			case "shoal.journal.write":
				writes = append(writes, s)
			case "shoal.journal.batch":
				batch = &s
			}
		}
		return batch != nil && len(writes) == 2
	})
	parentOf := map[trace.SpanID]trace.SpanID{}
	for _, w := range writes {
		parentOf[w.SpanContext.SpanID()] = w.Parent.SpanID()
	}
	callers := map[trace.SpanID]bool{callerA.SpanContext().SpanID(): true, callerB.SpanContext().SpanID(): true}
	for w, p := range parentOf {
		if !callers[p] {
			t.Fatalf("write span %v has parent %v, not a caller", w, p)
		}
	}
	first := batch.Parent.SpanID()
	if _, ok := parentOf[first]; !ok {
		t.Fatalf("batch span's parent %v is no write span", first)
	}
	if len(batch.Links) != 1 {
		t.Fatalf("batch links %v, want the other traced write", batch.Links)
	}
	other := batch.Links[0].SpanContext.SpanID()
	if _, ok := parentOf[other]; !ok || other == first {
		t.Fatalf("batch links to %v, want the write span that is not its parent", other)
	}
}
