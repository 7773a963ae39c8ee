package node_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/node"
)

// TestTraceAcrossNodes follows one trace from an HTTP request on node a,
// through an ask, to the entity on node b, its handler and its journal
// write, over loopback TCP and Postgres: every span of the chain is the
// child of the one before it (docs/DESIGN.md, "Tracing").
func TestTraceAcrossNodes(t *testing.T) {
	dsn := pg.MigratedDSN(t)
	spans := tracetest.NewInMemoryExporter()
	traced := func(c *node.Config) {
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
		t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
		c.TracerProvider = tp
	}
	a := startNode(t, dsn, "trace-a", nil, traced)
	b := startNode(t, dsn, "trace-b", []string{a.GossipAddr()}, traced)
	awaitUp(t, []*testNode{a, b})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// An entity that lives on b, asked through a.
	id := ""
	for i := range 50 {
		s, err := read(ctx, a.ops, fmt.Sprintf("traced-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		if s.Node == "trace-b" {
			id = fmt.Sprintf("traced-%d", i)
			break
		}
	}
	if id == "" {
		t.Fatal("no entity on trace-b among 50")
	}
	spans.Reset()

	// The application's HTTP server: it continues the caller's trace.
	httpTracer := a.System().Tracer()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := propagation.TraceContext{}.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		ctx, span := httpTracer.Start(ctx, "http", trace.WithSpanKind(trace.SpanKindServer))
		defer span.End()
		if err := apply(ctx, a.ops, id, "traced-op"); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	}))
	defer srv.Close()
	const traceID, callerSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, nil)
	req.Header.Set("traceparent", "00-"+traceID+"-"+callerSpan+"-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("HTTP %d", resp.StatusCode)
	}

	// The batch span ends after the write's outcome went out.
	// Only this trace's spans: the asks that found the entity made traces
	// of their own, whose spans may end after the Reset.
	var got tracetest.SpanStubs
	eventually(t, "the journal's batch span is exported", func() error {
		got = nil
		for _, s := range spans.GetSpans() {
			if s.SpanContext.TraceID().String() == traceID {
				got = append(got, s)
			}
		}
		if find(got, "shoal.journal.batch") == nil {
			return fmt.Errorf("spans so far: %v", names(got))
		}
		return nil
	})
	chain := []string{"http", "shoal.ask", "shoal.remote.send", "shoal.remote.receive", "shoal.entity.handle", "shoal.journal.write", "shoal.journal.batch"}
	parent := callerSpan
	for _, name := range chain {
		s := find(got, name)
		if s == nil {
			t.Fatalf("no %s span among %v", name, names(got))
		}
		if s.SpanContext.TraceID().String() != traceID {
			t.Errorf("%s: trace %s, want %s", name, s.SpanContext.TraceID(), traceID)
		}
		if s.Parent.SpanID().String() != parent {
			t.Errorf("%s: parent %s, want %s", name, s.Parent.SpanID(), parent)
		}
		parent = s.SpanContext.SpanID().String()
	}
	handle := find(got, "shoal.entity.handle")
	attrs := map[string]string{}
	for _, kv := range handle.Attributes {
		attrs[string(kv.Key)] = kv.Value.Emit()
	}
	if attrs[string(entity.AttrEntityType)] != "Ops" || attrs[string(entity.AttrEntityID)] != id {
		t.Errorf("handle span attributes %v", attrs)
	}
	if !find(got, "shoal.remote.receive").Parent.IsRemote() {
		t.Error("the receive span's parent is not marked remote")
	}
}

func find(spans tracetest.SpanStubs, name string) *tracetest.SpanStub {
	for i := range spans {
		if spans[i].Name == name {
			return &spans[i]
		}
	}
	return nil
}

func names(spans tracetest.SpanStubs) []string {
	out := make([]string, len(spans))
	for i, s := range spans {
		out[i] = s.Name
	}
	return out
}
