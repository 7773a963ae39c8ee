package main

import (
	"context"
	"math"
	"net/http"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/journal"
)

// acceptedTraceID is the trace_id the SettlementAccepted of key stored.
func acceptedTraceID(t *testing.T, n *Node, key OrderKey) string {
	t.Helper()
	reg := codec.NewRegistry()
	Register(reg)
	var got string
	err := n.Journal.Replay(context.Background(), TypeKey.Name()+"|"+key.EntityID(), 1, math.MaxUint64, func(e journal.Event) error {
		ev, err := codec.DecodeAs[Event](reg, e.Manifest, e.Payload)
		if a, ok := ev.(SettlementAccepted); ok && err == nil {
			got = a.TraceID
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// A settle continues the caller's trace: the trace_id stored with the
// payment is the traceparent's trace id, and the request's span is the
// parent of the ask, whose span is the parent of the entity's handling.
func TestSettleContinuesTheCallersTrace(t *testing.T) {
	spans := tracetest.NewInMemoryExporter()
	n := startNode(t, func(c *Config) {
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
		t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
		c.TracerProvider = tp
	})
	const traceID, callerSpan = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	req, err := http.NewRequest(http.MethodPut, n.APIURL+"/00/ec/settlements/shop-1/traced1/payment", strings.NewReader(amount1000))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Tenant-Id", "example")
	req.Header.Set("Authorization", "Bearer dummy")
	req.Header.Set("traceparent", "00-"+traceID+"-"+callerSpan+"-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("HTTP %d", resp.StatusCode)
	}
	key := OrderKey{Tenant: TenantExample, WalletShopID: "shop-1", OrderID: "traced1"}
	if got := acceptedTraceID(t, n, key); got != traceID {
		t.Fatalf("stored trace_id %q, want the caller's %s", got, traceID)
	}
	parent := callerSpan
	for _, name := range []string{"PUT payment", "shoal.ask", "shoal.entity.handle"} {
		var span *tracetest.SpanStub
		for _, s := range spans.GetSpans() {
			if s.Name == name && s.Parent.SpanID().String() == parent {
				span = &s
				break
			}
		}
		if span == nil {
			t.Fatalf("no %s span with parent %s", name, parent)
		}
		if got := span.SpanContext.TraceID().String(); got != traceID {
			t.Fatalf("%s in trace %s, want %s", name, got, traceID)
		}
		parent = span.SpanContext.SpanID().String()
	}
}

// Without a traceparent, the default provider starts a trace: its id,
// not a made-up one, is the stored trace_id.
func TestSettleStartsATrace(t *testing.T) {
	n := startNode(t, nil)
	put(t, n, "example", "dummy", "shop-1/untraced1/payment", amount1000).want(t, 200, "")
	got := acceptedTraceID(t, n, OrderKey{Tenant: TenantExample, WalletShopID: "shop-1", OrderID: "untraced1"})
	if len(got) != 32 || strings.Trim(got, "0") == "" {
		t.Fatalf("stored trace_id %q, want a W3C trace id", got)
	}
}
