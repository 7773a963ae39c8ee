package wire

import (
	"reflect"
	"strings"
	"sync"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/internal/typeslot"
)

// replyFinder lists the reply addresses inside user messages, for the
// Deliver's ReplyTo field. Whether a type can hold one at all is decided
// once per type, from its declaration: a message of a type that cannot
// (most commands: no ReplyTo field anywhere) costs a load and a compare,
// and only the commands of asks are searched. Each Encoder has its own:
// the verdicts are memos of a pure function of a type, kept by whoever
// encodes, not in package state.
type replyFinder struct {
	// all caches mayHoldReplyTo by type: reflect.Type → bool. Types are
	// finite and never change, so it only grows to the program's types.
	all sync.Map
	// recent holds the verdicts of all looked up lately, by type (see
	// typeslot). A verdict never changes, so no entry goes stale.
	recent typeslot.Table[verdict]
}

// addresses lists the reply addresses inside msg.
func (f *replyFinder) addresses(msg any) []entity.ReplyAddress {
	if !f.mayHold(reflect.TypeOf(msg)) {
		return nil
	}
	return entity.ReplyAddresses(msg)
}

// mayHold is mayHoldReplyTo(t, 0), decided once per type: found in a
// slot of recent with a load and a compare, else in all.
func (f *replyFinder) mayHold(t reflect.Type) bool {
	slot := f.recent.Slot(t)
	if v := slot.Load(); v != nil && v.t == t {
		return v.holds
	}
	holds, ok := f.all.Load(t)
	if !ok {
		holds, _ = f.all.LoadOrStore(t, mayHoldReplyTo(t, 0))
	}
	slot.Store(&verdict{t: t, holds: holds.(bool)})
	return holds.(bool)
}

// verdict is mayHoldReplyTo(t, 0), immutable once published.
type verdict struct {
	t     reflect.Type
	holds bool
}

var replyToPkg = reflect.TypeFor[entity.ReplyTo[struct{}]]().PkgPath()

// mayHoldReplyTo reports whether a value of t can hold an entity.ReplyTo:
// one of its fields, elements or an interface inside it, to the depth
// entity.ReplyAddresses searches.
func mayHoldReplyTo(t reflect.Type, depth int) bool {
	if depth > 8 {
		return true // deeper than the search goes: let it decide
	}
	switch t.Kind() {
	case reflect.Interface:
		return true
	case reflect.Pointer, reflect.Slice, reflect.Array:
		return mayHoldReplyTo(t.Elem(), depth+1)
	case reflect.Struct:
		if t.PkgPath() == replyToPkg && strings.HasPrefix(t.Name(), "ReplyTo[") {
			return true
		}
		for i := range t.NumField() {
			if mayHoldReplyTo(t.Field(i).Type, depth+1) {
				return true
			}
		}
	}
	return false
}
