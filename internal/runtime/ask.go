package runtime

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/internal/deepequal"
	"github.com/shoal-dev/shoal/internal/metrics"
	"github.com/shoal-dev/shoal/timers"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// ErrAskTimeout is returned by Ask when no reply arrives before its
// deadline: its context's, or the System's AskTimeout when the context has none.
var ErrAskTimeout = errors.New("entity: ask timed out")

// ErrUnhandled is returned by an Ask whose target returned Unhandled for the
// command: nobody will reply.
var ErrUnhandled = errors.New("entity: message unhandled")

// DefaultAskTimeout is how long an Ask whose context has no deadline waits
// for its reply, unless Config.AskTimeout says otherwise.
const DefaultAskTimeout = 30 * time.Second

// ReplyAddress names one pending ask anywhere in the cluster: the node id
// and incarnation of the System that asked, and the ask's id there. It is
// what a ReplyTo carries and what a transport carries back with a reply.
type ReplyAddress struct {
	Node        string `json:"node"`
	Incarnation uint64 `json:"incarnation"`
	AskID       uint64 `json:"id"`
}

// IsZero reports whether a names no ask.
func (a ReplyAddress) IsZero() bool { return a.AskID == 0 }

// String renders a as reply:node#incarnation/askid, for logs.
func (a ReplyAddress) String() string {
	return fmt.Sprintf("reply:%s#%d/%d", a.Node, a.Incarnation, a.AskID)
}

// ReplyTo is the address of one pending Ask expecting an R. It is a plain
// value: an entity may keep it in its state, persist it, or send it to
// another node, and reply through it later.
type ReplyTo[R any] struct {
	addr ReplyAddress
}

// IsZero reports whether r addresses nobody; replies to it are dropped.
func (r ReplyTo[R]) IsZero() bool { return r.addr.IsZero() }

// Address is the ask r names: node, incarnation and ask id.
func (r ReplyTo[R]) Address() ReplyAddress { return r.addr }

// String renders r's address, for logs.
func (r ReplyTo[R]) String() string { return r.addr.String() }

// replyAddr lets the runtime find the reply addresses inside a message
// without knowing their R (see failAsks).
type replyAddr interface {
	replyAddr() ReplyAddress
}

func (r ReplyTo[R]) replyAddr() ReplyAddress { return r.addr }

// MarshalJSON encodes the address, so commands carrying a ReplyTo serialize.
// It writes what json.Marshal of the ReplyAddress writes, without its
// reflection when the node id needs no escaping: every ask's command that
// leaves the node carries one.
func (r ReplyTo[R]) MarshalJSON() ([]byte, error) {
	if b, ok := appendAddressJSON(make([]byte, 0, 48+len(r.addr.Node)), r.addr); ok {
		return b, nil
	}
	return json.Marshal(r.addr)
}

// UnmarshalJSON decodes an address written by MarshalJSON: the form
// MarshalJSON writes is read directly, anything else by encoding/json.
func (r *ReplyTo[R]) UnmarshalJSON(data []byte) error {
	if a, ok := parseAddressJSON(data); ok {
		r.addr = a
		return nil
	}
	var a ReplyAddress
	if err := json.Unmarshal(data, &a); err != nil {
		return fmt.Errorf("entity: decode reply address: %w", err)
	}
	r.addr = a
	return nil
}

const (
	addrNode        = `{"node":"`
	addrIncarnation = `","incarnation":`
	addrID          = `,"id":`
)

// appendAddressJSON appends a as json.Marshal writes it; false when a's
// node id holds a byte json.Marshal would escape.
func appendAddressJSON(b []byte, a ReplyAddress) ([]byte, bool) {
	for i := range len(a.Node) {
		if c := a.Node[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return b, false
		}
	}
	b = append(b, addrNode...)
	b = append(b, a.Node...)
	b = append(b, addrIncarnation...)
	b = strconv.AppendUint(b, a.Incarnation, 10)
	b = append(b, addrID...)
	b = strconv.AppendUint(b, a.AskID, 10)
	return append(b, '}'), true
}

// parseAddressJSON reads the exact form appendAddressJSON writes; false
// for any other (spaces, another key order, an escaped node id), which
// encoding/json reads instead.
func parseAddressJSON(data []byte) (ReplyAddress, bool) {
	rest, ok := bytes.CutPrefix(data, []byte(addrNode))
	if !ok {
		return ReplyAddress{}, false
	}
	end := bytes.IndexByte(rest, '"')
	if end < 0 {
		return ReplyAddress{}, false
	}
	node := rest[:end]
	for _, c := range node {
		if c < 0x20 || c == '\\' { // a control byte is an error, an escape encoding/json's
			return ReplyAddress{}, false
		}
	}
	if rest, ok = bytes.CutPrefix(rest[end:], []byte(addrIncarnation)); !ok {
		return ReplyAddress{}, false
	}
	inc, rest, ok := cutUint(rest)
	if !ok {
		return ReplyAddress{}, false
	}
	if rest, ok = bytes.CutPrefix(rest, []byte(addrID)); !ok {
		return ReplyAddress{}, false
	}
	id, rest, ok := cutUint(rest)
	if !ok || string(rest) != "}" || !utf8.Valid(node) {
		return ReplyAddress{}, false
	}
	return ReplyAddress{Node: string(node), Incarnation: inc, AskID: id}, true
}

// cutUint reads the decimal digits b starts with as a uint64, as JSON
// writes one (no sign, no leading zero but for 0 itself).
func cutUint(b []byte) (uint64, []byte, bool) {
	n := 0
	for n < len(b) && b[n] >= '0' && b[n] <= '9' {
		n++
	}
	if n == 0 || n > 1 && b[0] == '0' {
		return 0, b, false
	}
	v, err := strconv.ParseUint(string(b[:n]), 10, 64)
	if err != nil {
		return 0, b, false
	}
	return v, b[n:], true
}

// Replier is anything that can send replies: every entity Context, and the System.
type Replier interface{ System() *System }

// System lets a System be used as a Replier.
func (s *System) System() *System { return s }

// ErrNoReplyAddress is returned by Reply for a zero ReplyTo.
var ErrNoReplyAddress = errors.New("entity: reply to a zero address")

// ErrAskEnded is returned by Reply and DeliverReply for a reply to an ask
// that has already returned (answered, timed out or cancelled): a race
// with its deadline, not a fault. The reply is counted as a dead letter.
var ErrAskEnded = errors.New("entity: reply to an ask that has ended")

// ErrStaleIncarnation is returned by Reply and DeliverReply for a reply to
// an ask of another incarnation of this node: that process is gone, and
// its ask ids mean nothing to its successor, so the reply is refused.
var ErrStaleIncarnation = errors.New("entity: reply to another incarnation of this node")

// ErrNotThisNode is returned by DeliverReply for a reply addressed to
// another node id: the transport routed it wrongly.
var ErrNotThisNode = errors.New("entity: reply addressed to another node")

// ErrNoRemoteReplies is returned by Reply for a reply to another node when
// the System has no ReplyRouter to carry it.
var ErrNoRemoteReplies = errors.New("entity: no way to send replies to other nodes")

// ErrReplyUndecodable fails an Ask whose reply arrived from another node
// as bytes that do not decode into the asker's R: an unknown manifest, a
// manifest of another type (codec.ErrTypeMismatch), or a corrupt payload.
// The codec's error is wrapped too. DeliverReply returns it as well.
var ErrReplyUndecodable = errors.New("entity: reply does not decode")

// JSONReplyManifest is the manifest of a reply whose type is not
// registered in the codec: its payload is the value's JSON, decoded into
// the asker's R (reply types need no registration, as the asker knows R).
const JSONReplyManifest = "shoal.reply.json"

// Reply sends v to the Ask waiting behind to, and returns why it could not.
// To an ask of this System it is delivered at once; to another node's it
// goes to the ReplyRouter, the one route of replies between nodes, which
// encodes it (EncodeReply) if it leaves the process. Every reply that
// reaches no ask is
// counted as a dead letter: to a zero ReplyTo (ErrNoReplyAddress), to an
// ask that has ended (ErrAskEnded), to another incarnation of this node
// (ErrStaleIncarnation), to another node with no way there
// (ErrNoRemoteReplies), or refused by the router (its error, wrapped).
// A reply that reaches the other node may still find its ask ended there.
func Reply[R any](via Replier, to ReplyTo[R], v R) error {
	sys := via.System()
	a := to.addr
	switch {
	case a.IsZero():
		sys.deadLetter(sys.untyped, nil, "", "", a.String(), "reply to a zero address", v)
		return ErrNoReplyAddress
	case a.Node != sys.cfg.NodeID:
		return sys.replyRemote(a, v)
	case a.Incarnation != sys.cfg.Incarnation:
		sys.deadLetter(sys.untyped, nil, "", "", a.String(), "reply to another incarnation", v)
		return fmt.Errorf("%w: %s, this is #%d", ErrStaleIncarnation, a, sys.cfg.Incarnation)
	}
	if sys.cfg.ForceSerialization {
		copied, err := roundTripReply(sys.cfg.Codec, v)
		if err != nil {
			err = fmt.Errorf("entity: ask: reply %T: %w", v, err)
			// The asker learns why; the reply itself reached nobody, and is
			// counted before the asker returns.
			sys.deadLetter(sys.untyped, nil, "", "", a.String(), "reply does not serialize", v)
			sys.replies.deliver(a.AskID, askFailure{err})
			return err
		}
		v = copied
	}
	if !sys.replies.deliver(a.AskID, v) {
		sys.deadLetter(sys.untyped, nil, "", "", a.String(), "reply to an ask that has returned", v)
		return fmt.Errorf("%w: %s", ErrAskEnded, a)
	}
	return nil
}

// replyRemote sends v towards another node's ask.
func (s *System) replyRemote(a ReplyAddress, v any) error {
	if router := s.router.Load(); router != nil {
		if err := (*router).RouteReply(a, v); err != nil {
			s.deadLetter(s.untyped, nil, "", "", a.String(), "reply refused on its way to "+a.Node, v)
			return fmt.Errorf("entity: reply to %s: %w", a, err)
		}
		return nil
	}
	s.deadLetter(s.untyped, nil, "", "", a.String(), "reply to another node, and no way there", v)
	return fmt.Errorf("%w: %s", ErrNoRemoteReplies, a)
}

// encodeReply encodes a reply for another node: with its registered
// manifest, or as JSON under JSONReplyManifest; a failure (failRemote)
// under AskFailureManifest.
func encodeReply(reg *codec.Registry, v any) (string, []byte, error) {
	if f, ok := v.(failureReply); ok {
		return AskFailureManifest, encodeFailure(f), nil
	}
	if reg != nil {
		if _, ok := reg.Manifest(v); ok {
			manifest, payload, err := reg.Encode(v)
			if err != nil {
				return "", nil, fmt.Errorf("%w: %w", ErrNotSerializable, err)
			}
			return manifest, payload, nil
		}
	}
	payload, err := json.Marshal(v)
	if err != nil {
		return "", nil, fmt.Errorf("%w: %w", ErrNotSerializable, err)
	}
	return JSONReplyManifest, payload, nil
}

// replyDecoder turns a reply's bytes into the asker's R. A pending ask
// keeps one, as a zero-size value, so that it costs a local Ask nothing.
type replyDecoder interface {
	decodeReply(reg *codec.Registry, manifest string, payload []byte) (any, error)
}

type decoderFor[R any] struct{}

func (decoderFor[R]) decodeReply(reg *codec.Registry, manifest string, payload []byte) (any, error) {
	if manifest == JSONReplyManifest {
		var r R
		if err := json.Unmarshal(payload, &r); err != nil {
			return nil, fmt.Errorf("as %v: %w", reflect.TypeFor[R](), err)
		}
		return r, nil
	}
	if reg == nil {
		return nil, &codec.UnknownManifestError{Manifest: manifest}
	}
	r, err := codec.DecodeAs[R](reg, manifest, payload)
	if err != nil {
		return nil, err
	}
	return r, nil
}

// roundTripReply copies v through the codec. Reply types need no
// registration: the asker knows R, so an unregistered R travels as JSON.
// Like a message, a reply the copy changes fails with ErrLossyRoundTrip.
func roundTripReply[R any](r *codec.Registry, v R) (R, error) {
	if _, ok := r.Manifest(v); ok {
		return roundTripExact(r, v)
	}
	var out R
	data, err := json.Marshal(v)
	if err != nil {
		return out, fmt.Errorf("%w: encode: %w", ErrNotSerializable, err)
	}
	if err := json.Unmarshal(data, &out); err != nil {
		return out, fmt.Errorf("%w: decode: %w", ErrNotSerializable, err)
	}
	if !deepequal.Equal(out, v) {
		return out, lossy(v, out)
	}
	return out, nil
}

// AskRef is a Ref that sends the commands of asks its own way: Ask and
// AskFrom call TellAsk instead of Tell. sharding's EntityRef implements it
// to refuse at once an ask that cannot be answered soon (its entity is
// backing off after a failure), where a Tell is kept for the restart.
type AskRef[C any] interface {
	Ref[C]
	// TellAsk sends msg, which carries the reply address of an ask, with
	// the trace context of ctx (see ContextRef); ctx bounds nothing.
	TellAsk(ctx context.Context, msg C) error
}

func tellAsk[C any](ctx context.Context, ref Ref[C], msg C) error {
	if ar, ok := ref.(AskRef[C]); ok {
		return ar.TellAsk(ctx, msg)
	}
	return TellContext(ctx, ref, msg)
}

// startAsk starts an Ask's "shoal.ask" span when the runtime records
// spans; otherwise it returns ctx and a span that does nothing.
func (s *System) startAsk(ctx context.Context, ref any) (context.Context, trace.Span) {
	if !s.trace.on {
		return ctx, noSpan
	}
	attrs := []attribute.KeyValue{AttrEntityType.String(entityTypeOf(ref))}
	if id, ok := ref.(interface{ EntityID() string }); ok {
		attrs = append(attrs, AttrEntityID.String(id.EntityID()))
	}
	return s.trace.tracer.Start(ctx, "shoal.ask", trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
}

// noSpan is the span of an untraced Ask.
var noSpan trace.Span = noop.Span{}

// endAsk ends an Ask's span with its outcome.
func endAsk(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// Ask sends the command built by build to ref and waits for the reply
// through the ReplyTo it passes to build.
//
// Ask never waits for ever: when ctx has no deadline it fails with
// ErrAskTimeout once the System's AskTimeout (DefaultAskTimeout unless
// configured) has passed on the System's clock — at most an eighth of it
// later, as one sweep serves all such asks. It returns ErrAskTimeout when a
// deadline passes, the context's error when ctx is cancelled (and sends
// nothing when ctx has already ended), and fails at once, without waiting,
// when the target cannot answer: the send is refused (ErrStopped,
// ErrMailboxFull, a serialization error), the target stops before handling
// the command or crashes while handling it (ErrStopped, wrapping the crash),
// or it returns Unhandled for it (ErrUnhandled). Where the target lives on
// another node, that node sends the failure back on the reply route, and
// Ask fails at once with an *AskFailedError that matches the same
// sentinels (ErrUnhandled, ErrStopped, ...). A reply that does not
// serialize under ForceSerialization fails the Ask with ErrNotSerializable;
// one from another node that does not decode into R fails it at once with
// ErrReplyUndecodable (see DeliverReply).
// An entity that handles the command normally and stops without replying
// may have handed the ReplyTo on, so that Ask waits for its deadline.
//
// Ask blocks its goroutine: an entity's handler must not call it (it would
// hold one of the System's few workers); use AskFrom there.
func Ask[C, R any](ctx context.Context, ref Ref[C], build func(ReplyTo[R]) C) (r R, err error) {
	var zero R
	if ctx.Err() != nil {
		return zero, askContextErr(ctx)
	}
	sys := ref.System()
	ctx, span := sys.startAsk(ctx, ref)
	defer func() { endAsk(span, err) }()
	if sys.metrics != nil {
		m, start := sys.metrics.Type(entityTypeOf(ref)), sys.cfg.Clock.Now()
		defer func() { m.Asked(sys.cfg.Clock.Now().Sub(start)) }()
	}
	_, hasDeadline := ctx.Deadline()
	id, ch := sys.registerAsk(!hasDeadline, decoderFor[R]{})
	defer sys.replies.unregister(id)
	if err := tellAsk(ctx, ref, build(ReplyTo[R]{addr: sys.replyAddress(id)})); err != nil {
		return zero, fmt.Errorf("entity: ask: %w", err)
	}
	select {
	case v := <-ch:
		return replyAs[R](v)
	case <-ctx.Done():
		select {
		case v := <-ch: // a reply that raced the deadline still counts
			if r, err := replyAs[R](v); err == nil {
				return r, nil
			}
		default:
		}
		return zero, askContextErr(ctx)
	}
}

// entityTypeOf names the entity type ref addresses, for metrics, when the
// ref knows it (a Cell, a sharded EntityRef).
func entityTypeOf(ref any) string {
	if t, ok := ref.(interface{ EntityType() string }); ok {
		return t.EntityType()
	}
	return metrics.NoEntityType
}

func askContextErr(ctx context.Context) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("%w: %w", ErrAskTimeout, ctx.Err())
	}
	return fmt.Errorf("entity: ask: %w", ctx.Err())
}

// replyAs turns what the reply table delivered into the Ask's outcome.
func replyAs[R any](v any) (R, error) {
	var zero R
	if f, ok := v.(askFailure); ok { // first: R may be an interface, even any
		return zero, f.err
	}
	if r, ok := v.(R); ok {
		return r, nil
	}
	return zero, fmt.Errorf("entity: ask: reply is %T, want %v", v, reflect.TypeFor[R]())
}

// askFailure is delivered instead of a reply when the runtime knows none
// will come. It is unexported, so no reply type R can be one.
type askFailure struct{ err error }

// AskFrom asks target on behalf of the entity whose handler calls it,
// without blocking that handler: it sends the command built by build, returns
// at once, and later delivers to the entity the command that adapt builds
// from the outcome, which is the reply, or an error as Ask would return it
// (ErrAskTimeout after timeout, ErrStopped, ErrUnhandled, ...). A timeout
// of zero or less means the System's AskTimeout; it runs on the System's
// clock. adapt runs on whichever goroutine completes the ask, not on the
// entity's: it must only build the command, never touch the entity's state.
// If the entity has stopped by then, the command is a dead letter.
func AskFrom[C, T, R any](ctx Context[C], target Ref[T], timeout time.Duration, build func(ReplyTo[R]) T, adapt func(R, error) C) {
	sys, self := ctx.System(), ctx.Self()
	if timeout <= 0 {
		timeout = sys.cfg.AskTimeout
	}
	pending := &asyncAsk{}
	var asked func()
	if sys.metrics != nil {
		m, start := sys.metrics.Type(entityTypeOf(target)), sys.cfg.Clock.Now()
		asked = func() { m.Asked(sys.cfg.Clock.Now().Sub(start)) }
	}
	id := sys.replies.add(waiter{dec: decoderFor[R]{}, fn: func(v any) {
		pending.finish()
		if asked != nil {
			asked()
		}
		r, err := replyAs[R](v)
		_ = self.Tell(adapt(r, err)) // a refused Tell is counted as a dead letter by Tell
	}})
	pending.start(sys.cfg.Clock.AfterFunc(timeout, func() {
		sys.replies.deliver(id, askFailure{fmt.Errorf("%w: no reply within %v: %w", ErrAskTimeout, timeout, context.DeadlineExceeded)})
	}))
	if err := tellAsk(TraceContext(ctx), target, build(ReplyTo[R]{addr: sys.replyAddress(id)})); err != nil {
		sys.replies.deliver(id, askFailure{fmt.Errorf("entity: ask: %w", err)})
	}
}

// asyncAsk stops an AskFrom's timeout timer once the ask is complete, even
// if it completes before the timer is set.
type asyncAsk struct {
	mu    sync.Mutex
	done  bool
	timer timers.Timer
}

func (a *asyncAsk) start(t timers.Timer) {
	a.mu.Lock()
	done := a.done
	if !done {
		a.timer = t
	}
	a.mu.Unlock()
	if done {
		t.Stop()
	}
}

func (a *asyncAsk) finish() {
	a.mu.Lock()
	a.done = true
	t := a.timer
	a.mu.Unlock()
	if t != nil {
		t.Stop()
	}
}

// replyAddress names this System's ask id.
func (s *System) replyAddress(id uint64) ReplyAddress {
	return ReplyAddress{Node: s.cfg.NodeID, Incarnation: s.cfg.Incarnation, AskID: id}
}

// ReplyRouter carries replies to asks of other nodes: the one route they
// take, installed by the node's transport (SetReplyRouter). One between
// processes encodes each with EncodeReply, and the receiving node hands
// the bytes to DeliverReply; one in process may hand the value to
// DeliverLocalReply. A router must not block.
type ReplyRouter interface {
	// RouteReply delivers v to the ask to, or says why it cannot. v may
	// be a failure sent in place of a reply: a router carries it as it
	// is, to DeliverLocalReply, or encoded by EncodeReply, to DeliverReply.
	RouteReply(to ReplyAddress, v any) error
}

// SetReplyRouter installs the router for replies to other nodes' asks.
func SetReplyRouter(s *System, r ReplyRouter) { s.router.Store(&r) }

// DeliverLocalReply hands v to this System's ask to, for a ReplyRouter
// that carried it here as a value; v may be a failure the other node sent
// instead of a reply, which fails the ask with an *AskFailedError. It
// refuses a reply for another node (ErrNotThisNode) or incarnation
// (ErrStaleIncarnation), and counts one for an ask that has ended as a
// dead letter (ErrAskEnded).
func DeliverLocalReply(s *System, to ReplyAddress, v any) error {
	if err := s.checkReplyAddress(to, v); err != nil {
		return err
	}
	if f, ok := v.(failureReply); ok {
		return s.failAsk(to, f.err())
	}
	if s.replies.deliver(to.AskID, v) {
		return nil
	}
	s.deadLetter(s.untyped, nil, "", "", to.String(), "reply to an ask that has returned", v)
	return fmt.Errorf("%w: %s", ErrAskEnded, to)
}

// DeliverReply hands a reply that arrived from another node as bytes to
// this System's ask to; a transport's runner calls it. The pending ask
// decodes manifest and payload into its own R. It returns, having counted
// a dead letter: ErrNotThisNode or ErrStaleIncarnation for a reply meant
// for another node or incarnation (never handed to an ask of this one),
// ErrAskEnded when the ask has already returned, and ErrReplyUndecodable
// (wrapping the codec's error) when the bytes do not decode into R — that
// ask then fails at once with the same error instead of timing out.
// Under AskFailureManifest the bytes are a failure the other node sent
// instead of a reply: the ask fails at once with an *AskFailedError (and
// ErrReplyUndecodable, also returned, when they do not decode). When
// ctx has already ended it delivers nothing and returns ctx's error.
func DeliverReply(ctx context.Context, s *System, to ReplyAddress, manifest string, payload []byte) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("entity: deliver reply to %s: %w", to, err)
	}
	raw := encodedReply{Manifest: manifest}
	if err := s.checkReplyAddress(to, raw); err != nil {
		return err
	}
	if manifest == AskFailureManifest {
		failed, err := decodeFailure(payload)
		if err != nil {
			// Still a failure: the ask ends now, with what is known.
			err = fmt.Errorf("%w: %s: %w", ErrReplyUndecodable, to, &AskFailedError{Message: err.Error()})
			if ferr := s.failAsk(to, err); ferr != nil {
				return ferr
			}
			return err
		}
		return s.failAsk(to, failed)
	}
	w, ok := s.replies.take(to.AskID)
	if !ok {
		s.deadLetter(s.untyped, nil, "", "", to.String(), "reply to an ask that has returned", raw)
		return fmt.Errorf("%w: %s", ErrAskEnded, to)
	}
	v, err := w.dec.decodeReply(s.cfg.Codec, manifest, payload)
	if err != nil {
		err = fmt.Errorf("%w: %s, manifest %q: %w", ErrReplyUndecodable, to, manifest, err)
		w.send(askFailure{fmt.Errorf("entity: ask: %w", err)})
		s.deadLetter(s.untyped, nil, "", "", to.String(), "reply does not decode", raw)
		return err
	}
	w.send(v)
	return nil
}

// failAsk fails this System's ask to with the failure another node sent
// for it. One for an ask that has ended is no dead letter: the message
// it failed was counted as one on its node.
func (s *System) failAsk(to ReplyAddress, failed error) error {
	if !s.replies.deliver(to.AskID, askFailure{failed}) {
		return fmt.Errorf("%w: %s", ErrAskEnded, to)
	}
	return nil
}

// encodedReply stands for a reply that arrived as bytes, in dead letters.
type encodedReply struct{ Manifest string }

// checkReplyAddress refuses, as a dead letter, a reply that is not for this
// node incarnation.
func (s *System) checkReplyAddress(to ReplyAddress, v any) error {
	switch {
	case to.Node != s.cfg.NodeID:
		s.deadLetter(s.untyped, nil, "", "", to.String(), "reply for another node", v)
		return fmt.Errorf("%w: %s delivered to %s", ErrNotThisNode, to, s.cfg.NodeID)
	case to.Incarnation != s.cfg.Incarnation:
		s.deadLetter(s.untyped, nil, "", "", to.String(), "reply for another incarnation", v)
		return fmt.Errorf("%w: %s delivered to incarnation #%d", ErrStaleIncarnation, to, s.cfg.Incarnation)
	}
	return nil
}

// replyTable holds the asks waiting for a reply.
type replyTable struct {
	next    atomic.Uint64
	mu      sync.Mutex
	pending map[uint64]waiter
	// sweeping: a sweep is armed for the asks without a deadline.
	sweeping bool
}

// waiter is one pending ask: a blocked Ask's channel, or AskFrom's
// callback, and the decoder of its R for a reply that arrives as bytes.
type waiter struct {
	ch  chan any
	fn  func(any)
	dec replyDecoder
	// expires is when the sweep fails an Ask that has no deadline of its
	// own; zero for the others.
	expires time.Time
}

func (w waiter) send(v any) {
	if w.fn != nil {
		w.fn(v)
	} else {
		w.ch <- v
	}
}

// registerAsk adds a blocked Ask; expiring when its context has no
// deadline, so the System's AskTimeout bounds it. One sweep on the clock,
// armed only while such asks wait, fails the expired ones: cheaper than a
// timer per Ask.
func (s *System) registerAsk(expiring bool, dec replyDecoder) (uint64, chan any) {
	w := waiter{ch: make(chan any, 1), dec: dec}
	if expiring {
		w.expires = s.cfg.Clock.Now().Add(s.cfg.AskTimeout)
	}
	t := &s.replies
	id := t.next.Add(1)
	t.mu.Lock()
	t.pending[id] = w
	arm := expiring && !t.sweeping
	if arm {
		t.sweeping = true
	}
	t.mu.Unlock()
	if arm {
		s.cfg.Clock.AfterFunc(s.cfg.AskTimeout/8, s.sweepAsks)
	}
	return id, w.ch
}

// sweepAsks fails the expired asks and runs again while others wait.
func (s *System) sweepAsks() {
	now := s.cfg.Clock.Now()
	t := &s.replies
	var expired []waiter
	t.mu.Lock()
	waiting := false
	for id, w := range t.pending {
		switch {
		case w.expires.IsZero():
		case now.Before(w.expires):
			waiting = true
		default:
			expired = append(expired, w)
			delete(t.pending, id)
		}
	}
	t.sweeping = waiting
	t.mu.Unlock()
	for _, w := range expired {
		w.send(askFailure{fmt.Errorf("%w: no reply within %v (the default; the context had no deadline): %w", ErrAskTimeout, s.cfg.AskTimeout, context.DeadlineExceeded)})
	}
	if waiting {
		s.cfg.Clock.AfterFunc(s.cfg.AskTimeout/8, s.sweepAsks)
	}
}

func (t *replyTable) add(w waiter) uint64 {
	id := t.next.Add(1)
	t.mu.Lock()
	t.pending[id] = w
	t.mu.Unlock()
	return id
}

func (t *replyTable) unregister(id uint64) {
	t.mu.Lock()
	delete(t.pending, id)
	t.mu.Unlock()
}

// deliver hands v to the ask id; only the first reply counts.
func (t *replyTable) deliver(id uint64, v any) bool {
	w, ok := t.take(id)
	if ok {
		w.send(v)
	}
	return ok
}

// take removes the ask id and returns it, if it still waits.
func (t *replyTable) take(id uint64) (waiter, bool) {
	t.mu.Lock()
	w, ok := t.pending[id]
	delete(t.pending, id)
	t.mu.Unlock()
	return w, ok
}

// FailAsks fails at once, with err, the asks whose reply addresses msg
// carries (at any depth): for a behavior that learns after handling a
// command that no answer will come for it (its events could not be
// stored, say). Asks that have ended are not touched. The asks of other
// nodes are sent a failure on the reply route (see AskFailedError), those
// of other incarnations of this node are left alone.
func FailAsks(s *System, msg any, err error) { s.failAsks(msg, err) }

// failAsks fails, with err, the asks whose reply addresses msg carries:
// msg will never be handled. It looks for ReplyTo values by reflection,
// which costs nothing until a message is lost.
func (s *System) failAsks(msg any, err error) {
	var remote *failureReply // classified once, for the first ask of another node
	forEachReplyAddr(reflect.ValueOf(msg), 0, func(a ReplyAddress) {
		switch {
		case a.IsZero():
		case a.Node != s.cfg.NodeID:
			if remote == nil {
				f := failureOf(err)
				remote = &f
			}
			s.failRemote(a, *remote)
		case a.Incarnation == s.cfg.Incarnation:
			s.replies.deliver(a.AskID, askFailure{err})
		}
	})
}

// isReplyTo reports whether t is a ReplyTo itself. A struct that embeds
// one implements replyAddr through the promoted method, but its fields are
// the user's: it is searched field by field instead.
func isReplyTo(t reflect.Type) bool {
	return t.PkgPath() == replyToPkg && strings.HasPrefix(t.Name(), "ReplyTo[")
}

var replyToPkg = reflect.TypeFor[ReplyTo[struct{}]]().PkgPath()

// maxReplyDepth bounds the search for reply addresses (and ends cycles).
const maxReplyDepth = 6

func forEachReplyAddr(v reflect.Value, depth int, visit func(ReplyAddress)) {
	if !v.IsValid() || depth > maxReplyDepth || !mayHoldReplyTo(v.Type(), maxReplyDepth-depth) {
		return
	}
	switch v.Kind() {
	case reflect.Interface, reflect.Pointer:
		if !v.IsNil() {
			forEachReplyAddr(v.Elem(), depth+1, visit)
		}
	case reflect.Struct:
		if isReplyTo(v.Type()) {
			a := v.FieldByName("addr") // unexported, so read field by field
			visit(ReplyAddress{Node: a.Field(0).String(), Incarnation: a.Field(1).Uint(), AskID: a.Field(2).Uint()})
			return
		}
		for i := range v.NumField() {
			forEachReplyAddr(v.Field(i), depth+1, visit)
		}
	case reflect.Slice, reflect.Array:
		if k := v.Type().Elem().Kind(); k <= reflect.Complex128 || k == reflect.String {
			return // numbers, bytes, strings: no address in there
		}
		for i := range v.Len() {
			forEachReplyAddr(v.Index(i), depth+1, visit)
		}
	}
}

// mayHoldReplyTo reports whether a value of type t may carry a ReplyTo
// within depth levels: one itself, or an interface, or a struct, pointer,
// slice or array whose elements may. The walk does not enter what cannot
// hold one; that is also what keeps it out of memory other goroutines
// write without a lock, such as a time.Time's *Location (the process's
// local zone is loaded lazily, on first use).
func mayHoldReplyTo(t reflect.Type, depth int) bool {
	if depth < 0 {
		return false
	}
	switch t.Kind() {
	case reflect.Interface:
		return true
	case reflect.Pointer, reflect.Slice, reflect.Array:
		return mayHoldReplyTo(t.Elem(), depth-1)
	case reflect.Struct:
		if isReplyTo(t) {
			return true
		}
		for i := range t.NumField() {
			if mayHoldReplyTo(t.Field(i).Type, depth-1) {
				return true
			}
		}
	}
	return false
}

func typeName(v any) string { return fmt.Sprintf("%T", v) }
