package sharding_test

import (
	"context"
	"testing"
	"testing/synctest"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/shoal-dev/shoal/sharding"
)

// Messages told with a traced context before any shard has a home wait in
// the region's buffer, then go to their entity on this node or the other:
// each is handled in a span of the caller's trace, through a remote send
// and receive where it crossed (docs/DESIGN.md, "Tracing").
func TestTraceContextThroughBufferAndAcrossRegions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		spans := tracetest.NewInMemoryExporter()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
		defer func() { _ = tp.Shutdown(context.Background()) }()
		s := newSim(t, sharding.Settings{NumberOfShards: 4, MinMembers: 2})
		s.tracer = tp
		a := s.join("a", "host")
		ctx, caller := tp.Tracer("test").Start(context.Background(), "caller")
		ids := entityIDs(20)
		for _, id := range ids { // no home yet: MinMembers holds allocation back
			if err := a.region.EntityRefFor(id).TellContext(ctx, note{Text: "traced"}); err != nil {
				t.Fatal(err)
			}
		}
		caller.End()
		s.join("b", "host")
		synctest.Wait()
		for _, id := range ids {
			if got := s.log.notes(id); len(got) != 1 {
				t.Fatalf("%s got %v", id, got)
			}
		}
		byID := map[trace.SpanID]tracetest.SpanStub{}
		for _, sp := range spans.GetSpans() {
			byID[sp.SpanContext.SpanID()] = sp
		}
		handled, crossed := 0, 0
		for _, sp := range byID {
			if sp.Name != "shoal.entity.handle" {
				continue
			}
			handled++
			if sp.SpanContext.TraceID() != caller.SpanContext().TraceID() {
				t.Fatalf("handled in trace %v, want the caller's %v", sp.SpanContext.TraceID(), caller.SpanContext().TraceID())
			}
			parent := sp.Parent.SpanID()
			if parent == caller.SpanContext().SpanID() {
				continue // handled on a
			}
			receive, ok := byID[parent]
			if !ok || receive.Name != "shoal.remote.receive" {
				t.Fatalf("handle span's parent %v is neither the caller nor a remote receive", parent)
			}
			send, ok := byID[receive.Parent.SpanID()]
			if !ok || send.Name != "shoal.remote.send" || send.Parent.SpanID() != caller.SpanContext().SpanID() {
				t.Fatalf("the receive span's parent is not a send span under the caller")
			}
			crossed++
		}
		if handled != len(ids) || crossed == 0 || crossed == len(ids) {
			t.Fatalf("%d handled, %d of them on b; want %d, some on each node", handled, crossed, len(ids))
		}
		for _, n := range s.nodes {
			_ = n.sh.Shutdown(context.Background())
		}
	})
}
