package entity

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"

	"github.com/shoal-dev/shoal/entity/codec"
)

// ErrAskTimeout is returned by Ask when its context's deadline passes before
// the reply arrives.
var ErrAskTimeout = errors.New("entity: ask timed out")

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
		sys.deadLetter("reply to a zero address", v)
		return
	}
	if to.node != sys.cfg.NodeID {
		router := sys.router.Load()
		if router == nil || !(*router).RouteReply(to.node, to.id, v) {
			sys.deadLetter("reply to unreachable node "+to.node, v)
		}
		return
	}
	if sys.cfg.ForceSerialization {
		copied, err := roundTripReply(sys.cfg.Codec, v)
		if err != nil {
			sys.log.Error("reply does not serialize", "type", typeName(v), "err", err)
			sys.deadLetter("reply does not serialize", v)
			return
		}
		v = copied
	}
	if !sys.replies.deliver(to.id, v) {
		sys.deadLetter("reply to an ask that has returned", v)
	}
}

// roundTripReply copies v through the codec. Reply types need no
// registration: the asker knows R, so an unregistered R travels as JSON.
func roundTripReply[R any](r *codec.Registry, v R) (R, error) {
	if _, ok := r.Manifest(v); ok {
		return codec.RoundTrip(r, v)
	}
	var out R
	data, err := json.Marshal(v)
	if err != nil {
		return out, fmt.Errorf("encode reply %T: %w", v, err)
	}
	if err := json.Unmarshal(data, &out); err != nil {
		return out, fmt.Errorf("decode reply %T: %w", v, err)
	}
	return out, nil
}

// Ask sends the command built by build to ref and waits for the reply
// through the ReplyTo it passes to build, until ctx ends.
func Ask[C, R any](ctx context.Context, ref Ref[C], build func(ReplyTo[R]) C) (R, error) {
	var zero R
	sys := ref.System()
	id, ch := sys.replies.register()
	defer sys.replies.unregister(id)
	if err := ref.Tell(build(ReplyTo[R]{node: sys.cfg.NodeID, id: id})); err != nil {
		return zero, fmt.Errorf("entity: ask: %w", err)
	}
	select {
	case v := <-ch:
		r, ok := v.(R)
		if !ok {
			return zero, fmt.Errorf("entity: ask: reply is %T, want %v", v, reflect.TypeFor[R]())
		}
		return r, nil
	case <-ctx.Done():
		select {
		case v := <-ch: // a reply that raced the deadline still counts
			if r, ok := v.(R); ok {
				return r, nil
			}
		default:
		}
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return zero, fmt.Errorf("%w: %w", ErrAskTimeout, ctx.Err())
		}
		return zero, fmt.Errorf("entity: ask: %w", ctx.Err())
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
	s.deadLetter("reply to an ask that has returned", v)
	return false
}

// replyTable holds the asks waiting for a reply.
type replyTable struct {
	next    atomic.Uint64
	mu      sync.Mutex
	pending map[uint64]chan any
}

func (t *replyTable) register() (uint64, chan any) {
	id := t.next.Add(1)
	ch := make(chan any, 1)
	t.mu.Lock()
	t.pending[id] = ch
	t.mu.Unlock()
	return id, ch
}

func (t *replyTable) unregister(id uint64) {
	t.mu.Lock()
	delete(t.pending, id)
	t.mu.Unlock()
}

// deliver hands v to the ask id; only the first reply counts.
func (t *replyTable) deliver(id uint64, v any) bool {
	t.mu.Lock()
	ch, ok := t.pending[id]
	delete(t.pending, id)
	t.mu.Unlock()
	if !ok {
		return false
	}
	ch <- v
	return true
}

func typeName(v any) string { return fmt.Sprintf("%T", v) }
