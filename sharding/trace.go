package sharding

import (
	"context"
	"fmt"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/internal/runtime"
	"github.com/shoal-dev/shoal/sharding/internal/protocol"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// AttrNode is the span attribute naming the node a remote send goes to,
// or a remote receive came from.
const AttrNode = attribute.Key("shoal.node")

// w3c reads and writes W3C trace context (docs/DESIGN.md, "Tracing").
var w3c propagation.TraceContext

// traceCarrier is W3C trace context as propagation reads and writes it.
// It lives only on the traced path: passing one as an interface moves it
// to the heap, so an untraced message never makes one.
type traceCarrier struct{ parent, state string }

func (c *traceCarrier) Get(key string) string {
	switch key {
	case "traceparent":
		return c.parent
	case "tracestate":
		return c.state
	}
	return ""
}

func (c *traceCarrier) Set(key, value string) {
	switch key {
	case "traceparent":
		c.parent = value
	case "tracestate":
		c.state = value
	}
}

func (c *traceCarrier) Keys() []string { return []string{"traceparent", "tracestate"} }

// setTrace writes sc into d as W3C trace context.
func setTrace(d *protocol.Deliver, sc trace.SpanContext) {
	c := new(traceCarrier)
	w3c.Inject(trace.ContextWithSpanContext(context.Background(), sc), c)
	d.Trace = &protocol.TraceContext{Parent: c.parent, State: c.state}
}

// traceOf is the trace context d carries: nil when none, or when it does
// not parse (a bad traceparent costs the message its trace, nothing else).
func traceOf(d *protocol.Deliver) *trace.SpanContext {
	if d.Trace == nil {
		return nil
	}
	return parseTrace(d.Trace.Parent, d.Trace.State)
}

func parseTrace(parent, state string) *trace.SpanContext {
	sc := trace.SpanContextFromContext(w3c.Extract(context.Background(), &traceCarrier{parent, state}))
	if !sc.IsValid() {
		return nil
	}
	p := new(trace.SpanContext)
	*p = sc
	return p
}

// startRemote starts a span of kind, a child of parent, for a message to
// entityID on node ("" when unknown); the runtime records spans.
func (r *Region[C]) startRemote(name string, kind trace.SpanKind, parent trace.SpanContext, node, entityID string) trace.Span {
	attrs := []attribute.KeyValue{entity.AttrEntityType.String(r.typ), entity.AttrEntityID.String(entityID)}
	if node != "" {
		attrs = append(attrs, AttrNode.String(node))
	}
	_, span := r.s.sys.Tracer().Start(trace.ContextWithSpanContext(context.Background(), parent), name,
		trace.WithSpanKind(kind), trace.WithAttributes(attrs...))
	return span
}

// endSpan ends span with err, when not nil, as its error.
func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// traceInbound starts the "shoal.remote.receive" span of a traced Deliver
// the transport hands this region, and returns the Deliver carrying that
// span instead of the sender's, so that the entity's handler is its child;
// an untraced Deliver, and all when the runtime records no spans, comes
// back as it is, with no span. The caller ends the span once the message
// is queued.
func (r *Region[C]) traceInbound(d protocol.Deliver) (protocol.Deliver, trace.Span) {
	if d.Trace == nil || !r.s.sys.Tracing() {
		return d, nil
	}
	parent := traceOf(&d)
	if parent == nil {
		return d, nil
	}
	span := r.startRemote("shoal.remote.receive", trace.SpanKindConsumer, *parent, "", d.EntityID)
	setTrace(&d, span.SpanContext())
	return d, span
}

// TellContext implements entity.ContextRef: Tell, with the trace context of
// ctx carried to the entity's handler, on this node or another.
func (r EntityRef[C]) TellContext(ctx context.Context, msg C) error {
	if r.region == nil {
		return fmt.Errorf("%w: zero EntityRef", ErrUnknownEntityType)
	}
	return r.region.tell(r.id, r.hash, msg, false, false, runtime.SpanOf(ctx))
}
