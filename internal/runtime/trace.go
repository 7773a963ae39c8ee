package runtime

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// TracerName is the instrumentation name of Shoal's spans.
const TracerName = "github.com/shoal-dev/shoal"

// Span attribute keys Shoal sets (docs/DESIGN.md, "Tracing").
const (
	AttrEntityType = attribute.Key("shoal.entity.type")
	AttrEntityID   = attribute.Key("shoal.entity.id")
)

// tracing is a System's tracer; on is false for otel's no-op provider,
// so that an untraced node starts no span and allocates nothing for one.
type tracing struct {
	tracer trace.Tracer
	on     bool
}

func newTracing(tp trace.TracerProvider) tracing {
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	_, isNoop := tp.(noop.TracerProvider)
	return tracing{tracer: tp.Tracer(TracerName), on: !isNoop}
}

// Tracer is the runtime's tracer, from Config.TracerProvider.
func (s *System) Tracer() trace.Tracer { return s.trace.tracer }

// Tracing reports whether the runtime records spans: false with the
// default, otel's no-op provider. Trace context is carried either way.
func (s *System) Tracing() bool { return s.trace.on }

// ContextRef is a Ref that carries the trace context of a context with
// the message it sends: the entity's handler then runs in a span that is
// a child of the caller's (docs/DESIGN.md, "Tracing"). Cell and
// sharding's EntityRef implement it.
type ContextRef[C any] interface {
	Ref[C]
	// TellContext is Tell with the trace context of ctx; ctx does not
	// bound anything (Tell never blocks).
	TellContext(ctx context.Context, msg C) error
}

// TellContext sends msg to ref with the trace context of ctx, when ref
// carries one (a ContextRef); otherwise it is ref.Tell(msg).
func TellContext[C any](ctx context.Context, ref Ref[C], msg C) error {
	if cr, ok := ref.(ContextRef[C]); ok {
		return cr.TellContext(ctx, msg)
	}
	return ref.Tell(msg)
}

// TraceContext is a context carrying the span of the message the entity
// is handling (its "shoal.entity.handle" span), for a handler that starts
// spans of its own or calls traced code; without one, a context with no
// span. Call it from the entity's handlers.
func TraceContext[C any](ctx Context[C]) context.Context {
	if t, ok := ctx.(interface{ SpanContext() trace.SpanContext }); ok {
		if sc := t.SpanContext(); sc.IsValid() {
			return trace.ContextWithSpanContext(context.Background(), sc)
		}
	}
	return context.Background()
}

// SpanOf is the trace context of ctx, nil when it has none: what a
// message carries in a mailbox or a region's buffer, where a nil pointer
// costs an untraced message nothing.
func SpanOf(ctx context.Context) *trace.SpanContext {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		p := new(trace.SpanContext)
		*p = sc
		return p
	}
	return nil
}

// SpanContext is the span of the message the cell is handling: its
// "shoal.entity.handle" span, or, when the runtime records no spans, the
// sender's trace context; invalid when the message carried none. Call it
// from the entity's goroutine.
func (c *Cell[C]) SpanContext() trace.SpanContext {
	if c.x == nil {
		return trace.SpanContext{}
	}
	return c.x.span
}

// TellContext implements ContextRef.
func (c *Cell[C]) TellContext(ctx context.Context, msg C) error {
	_, err := c.tell(msg, false, 0, SpanOf(ctx))
	return err
}

// TellTraced is Tell with parent as the trace context the message
// carries (nil: none), for an owner that kept it (a shard).
func TellTraced[C any](c *Cell[C], msg C, parent *trace.SpanContext) error {
	_, err := c.tell(msg, false, 0, parent)
	return err
}

// deliverTraced handles msg in a "shoal.entity.handle" span, a child of
// parent, and makes that span the one SpanContext reports meanwhile.
func (c *Cell[C]) deliverTraced(msg C, parent trace.SpanContext) {
	x := c.extras()
	if !c.sys.trace.on {
		x.span = parent
		c.deliver(msg)
		x.span = trace.SpanContext{}
		return
	}
	_, span := c.sys.trace.tracer.Start(trace.ContextWithSpanContext(context.Background(), parent), "shoal.entity.handle",
		trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(AttrEntityType.String(c.props.Key.name), AttrEntityID.String(c.id)))
	x.span = span.SpanContext()
	defer func() {
		x.span = trace.SpanContext{}
		span.End()
	}()
	c.deliver(msg)
}
