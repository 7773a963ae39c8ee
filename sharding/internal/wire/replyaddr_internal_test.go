package wire

import (
	"reflect"
	"testing"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/internal/typeslot"
)

// replyFinder.mayHold gives mayHoldReplyTo's verdict on each type, also among many
// types that share its slots, whatever the order they come in.
func TestMayHoldKeepsEachTypesVerdict(t *testing.T) {
	var types []reflect.Type
	for n := range 4 * typeslot.Slots {
		elem := reflect.TypeFor[int]()
		if n%2 == 0 {
			elem = reflect.TypeFor[entity.ReplyTo[string]]()
		}
		types = append(types, reflect.ArrayOf(n+1, elem))
	}
	var f replyFinder
	for round := range 3 {
		for i, typ := range types {
			if round == 1 {
				typ = types[len(types)-1-i]
			}
			if got, want := f.mayHold(typ), mayHoldReplyTo(typ, 0); got != want {
				t.Fatalf("round %d: mayHold(%v) = %v, want %v", round, typ, got, want)
			}
		}
	}
}
