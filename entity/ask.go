package entity

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/internal/deepequal"
	"github.com/shoal-dev/shoal/timers"
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

// ReplyTo is the address of one pending Ask expecting an R. It is a plain
// value: an entity may keep it in its state, persist it, or send it to
// another node, and reply through it later.
type ReplyTo[R any] struct {
	node string
	id   uint64
}

// IsZero reports whether r addresses nobody; replies to it are dropped.
func (r ReplyTo[R]) IsZero() bool { return r.id == 0 }

func (r ReplyTo[R]) String() string { return fmt.Sprintf("reply:%s/%d", r.node, r.id) }

// replyAddr lets the runtime find the reply addresses inside a message
// without knowing their R (see failAsks).
type replyAddr interface {
	replyAddr() (node string, id uint64)
}

func (r ReplyTo[R]) replyAddr() (string, uint64) { return r.node, r.id }

type replyAddress struct {
	Node string `json:"node"`
	ID   uint64 `json:"id"`
}

// MarshalJSON encodes the address, so commands carrying a ReplyTo serialize.
func (r ReplyTo[R]) MarshalJSON() ([]byte, error) {
	return json.Marshal(replyAddress{Node: r.node, ID: r.id})
}

// UnmarshalJSON decodes an address written by MarshalJSON.
func (r *ReplyTo[R]) UnmarshalJSON(data []byte) error {
	var a replyAddress
	if err := json.Unmarshal(data, &a); err != nil {
		return fmt.Errorf("entity: decode reply address: %w", err)
	}
	r.node, r.id = a.Node, a.ID
	return nil
}

// Replier is anything that can send replies: every entity Context, and the System.
type Replier interface{ System() *System }

// System lets a System be used as a Replier.
func (s *System) System() *System { return s }

// Reply sends v to the Ask waiting behind to. A reply to an Ask that has
// already returned, or to a zero ReplyTo, is a dead letter.
func Reply[R any](via Replier, to ReplyTo[R], v R) {
	sys := via.System()
	if to.IsZero() {
		sys.deadLetter(nil, to.String(), "reply to a zero address", v)
		return
	}
	if to.node != sys.cfg.NodeID {
		router := sys.router.Load()
		if router == nil || !(*router).RouteReply(to.node, to.id, v) {
			sys.deadLetter(nil, to.String(), "reply to unreachable node "+to.node, v)
		}
		return
	}
	if sys.cfg.ForceSerialization {
		copied, err := roundTripReply(sys.cfg.Codec, v)
		if err != nil {
			// The asker learns why; the reply itself reached nobody.
			sys.replies.deliver(to.id, askFailure{fmt.Errorf("entity: ask: reply %T: %w", v, err)})
			sys.deadLetter(nil, to.String(), "reply does not serialize", v)
			return
		}
		v = copied
	}
	if !sys.replies.deliver(to.id, v) {
		sys.deadLetter(nil, to.String(), "reply to an ask that has returned", v)
	}
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
	// TellAsk sends msg, which carries the reply address of an ask.
	TellAsk(msg C) error
}

func tellAsk[C any](ref Ref[C], msg C) error {
	if ar, ok := ref.(AskRef[C]); ok {
		return ar.TellAsk(msg)
	}
	return ref.Tell(msg)
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
// or it returns Unhandled for it (ErrUnhandled). A reply that does not
// serialize under ForceSerialization fails the Ask with ErrNotSerializable.
// An entity that handles the command normally and stops without replying
// may have handed the ReplyTo on, so that Ask waits for its deadline.
//
// Ask blocks its goroutine: an entity's handler must not call it (it would
// hold one of the System's few workers); use AskFrom there.
func Ask[C, R any](ctx context.Context, ref Ref[C], build func(ReplyTo[R]) C) (R, error) {
	var zero R
	if ctx.Err() != nil {
		return zero, askContextErr(ctx)
	}
	sys := ref.System()
	_, hasDeadline := ctx.Deadline()
	id, ch := sys.registerAsk(!hasDeadline)
	defer sys.replies.unregister(id)
	if err := tellAsk(ref, build(ReplyTo[R]{node: sys.cfg.NodeID, id: id})); err != nil {
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
	id := sys.replies.registerFunc(func(v any) {
		pending.finish()
		r, err := replyAs[R](v)
		_ = self.Tell(adapt(r, err)) // a refused Tell is counted as a dead letter by Tell
	})
	pending.start(sys.cfg.Clock.AfterFunc(timeout, func() {
		sys.replies.deliver(id, askFailure{fmt.Errorf("%w: no reply within %v: %w", ErrAskTimeout, timeout, context.DeadlineExceeded)})
	}))
	if err := tellAsk(target, build(ReplyTo[R]{node: sys.cfg.NodeID, id: id})); err != nil {
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

// ReplyRouter carries replies to asks of other nodes. The transport that
// connects nodes installs one with System.SetReplyRouter; it serializes v
// when it leaves the process.
type ReplyRouter interface {
	// RouteReply delivers v to ask id on node; false if it cannot.
	RouteReply(node string, id uint64, v any) bool
}

// SetReplyRouter installs the router for replies to other nodes' asks.
func (s *System) SetReplyRouter(r ReplyRouter) { s.router.Store(&r) }

// DeliverReply hands v to this node's ask id, for a ReplyRouter that
// carried it here. It reports false when nobody waits for it any more.
func (s *System) DeliverReply(id uint64, v any) bool {
	if s.replies.deliver(id, v) {
		return true
	}
	s.deadLetter(nil, fmt.Sprintf("reply:%s/%d", s.cfg.NodeID, id), "reply to an ask that has returned", v)
	return false
}

// replyTable holds the asks waiting for a reply.
type replyTable struct {
	next    atomic.Uint64
	mu      sync.Mutex
	pending map[uint64]waiter
	// sweeping: a sweep is armed for the asks without a deadline.
	sweeping bool
}

// waiter is one pending ask: a blocked Ask's channel, or AskFrom's callback.
type waiter struct {
	ch chan any
	fn func(any)
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
func (s *System) registerAsk(expiring bool) (uint64, chan any) {
	w := waiter{ch: make(chan any, 1)}
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

func (t *replyTable) registerFunc(fn func(any)) uint64 { return t.add(waiter{fn: fn}) }

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
	t.mu.Lock()
	w, ok := t.pending[id]
	delete(t.pending, id)
	t.mu.Unlock()
	if !ok {
		return false
	}
	w.send(v)
	return true
}

// failAsks fails, with err, this node's asks whose reply addresses msg
// carries: msg will never be handled. It looks for ReplyTo values by
// reflection, which costs nothing until a message is lost.
func (s *System) failAsks(msg any, err error) {
	forEachReplyAddr(reflect.ValueOf(msg), 0, func(node string, id uint64) {
		if id != 0 && node == s.cfg.NodeID {
			s.replies.deliver(id, askFailure{err})
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

func forEachReplyAddr(v reflect.Value, depth int, visit func(node string, id uint64)) {
	if !v.IsValid() || depth > maxReplyDepth {
		return
	}
	switch v.Kind() {
	case reflect.Interface, reflect.Pointer:
		if !v.IsNil() {
			forEachReplyAddr(v.Elem(), depth+1, visit)
		}
	case reflect.Struct:
		if isReplyTo(v.Type()) {
			visit(v.FieldByName("node").String(), v.FieldByName("id").Uint())
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

func typeName(v any) string { return fmt.Sprintf("%T", v) }
