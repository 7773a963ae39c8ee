package runtime

import (
	"fmt"
	"reflect"
	"sync"

	"github.com/shoal-dev/shoal/entity/codec"
)

// EncodeReply encodes a reply to an ask of another node: under its
// registered manifest, or as JSON under JSONReplyManifest when its type is
// not registered; a failure a ReplyRouter was given in place of a reply,
// under AskFailureManifest. A value that does not encode is
// ErrNotSerializable. A ReplyRouter that carries replies between
// processes uses it, and the receiving node hands the result to
// DeliverReply.
func EncodeReply(reg *codec.Registry, v any) (manifest string, payload []byte, err error) {
	return encodeReply(reg, v)
}

// ReplyAddresses lists the reply addresses msg carries, at any depth (the
// ReplyTo fields of a command): the asks that wait for an answer to it. A
// transport sends them along with a message it encodes, so that the
// receiving node can fail those asks (FailAsk, through the transport)
// when it cannot handle a message it cannot even decode.
func ReplyAddresses(msg any) []ReplyAddress {
	var out []ReplyAddress
	v := reflect.ValueOf(msg)
	if v.IsValid() {
		if p := planOf(v.Type()); p.static {
			for _, path := range p.paths {
				if a := addrAt(v.FieldByIndex(path)); !a.IsZero() {
					out = append(out, a)
				}
			}
			return out
		}
	}
	forEachReplyAddr(v, 0, func(a ReplyAddress) {
		if !a.IsZero() {
			out = append(out, a)
		}
	})
	return out
}

// replyPlan says where a type's values hold their ReplyTo fields: static
// when every one is reached through struct fields alone, at the field
// index paths listed, in the order forEachReplyAddr visits them; else the
// values are searched one by one.
type replyPlan struct {
	static bool
	paths  [][]int
}

// replyPlans caches planOf by type: reflect.Type → *replyPlan. Types are
// finite and never change, so it only grows to the program's types.
var replyPlans sync.Map

func planOf(t reflect.Type) *replyPlan {
	if p, ok := replyPlans.Load(t); ok {
		return p.(*replyPlan)
	}
	p := &replyPlan{static: true}
	p.static = collectPaths(t, 0, nil, p)
	if !p.static {
		p.paths = nil
	}
	actual, _ := replyPlans.LoadOrStore(t, p)
	return actual.(*replyPlan)
}

// collectPaths adds the paths of t's ReplyTo fields below prefix to p, as
// forEachReplyAddr would find them at depth; false when one may sit behind
// an interface, pointer, slice or array, which only a search finds.
func collectPaths(t reflect.Type, depth int, prefix []int, p *replyPlan) bool {
	if depth > maxReplyDepth || !mayHoldReplyTo(t, maxReplyDepth-depth) {
		return true
	}
	if t.Kind() != reflect.Struct {
		return false
	}
	if isReplyTo(t) {
		p.paths = append(p.paths, append([]int(nil), prefix...))
		return true
	}
	for i := range t.NumField() {
		if !collectPaths(t.Field(i).Type, depth+1, append(prefix, i), p) {
			return false
		}
	}
	return true
}

// addrAt reads the address of v, a ReplyTo: its one field, unexported,
// read field by field.
func addrAt(v reflect.Value) ReplyAddress {
	a := v.Field(0)
	return ReplyAddress{Node: a.Field(0).String(), Incarnation: a.Field(1).Uint(), AskID: a.Field(2).Uint()}
}

// FailAsk fails this System's ask to at once with err, when another node
// reports that the command carrying its reply address will never be
// handled: the Ask returns err (wrapped) instead of waiting for its
// deadline. It refuses an address of another node (ErrNotThisNode) or
// incarnation (ErrStaleIncarnation), and returns ErrAskEnded for an ask
// that has already returned.
func FailAsk(s *System, to ReplyAddress, err error) error {
	if cerr := s.checkReplyAddress(to, err); cerr != nil {
		return cerr
	}
	if !s.replies.deliver(to.AskID, askFailure{fmt.Errorf("entity: ask: %w", err)}) {
		return fmt.Errorf("%w: %s", ErrAskEnded, to)
	}
	return nil
}
