package wire

import (
	"reflect"
	"strings"
	"testing"

	"github.com/shoal-dev/shoal/sharding/internal/protocol"
)

// A protocol type with a field plain JSON could not carry is refused when
// it is planned, so RegisterTypes fails at start-up instead of a message
// arriving changed.
func TestPlanRefusesFieldsThatCannotTravel(t *testing.T) {
	type (
		hidden       struct{ x int }
		embedded     struct{ protocol.Register }
		namedTo      struct{ To string }
		iface        struct{ V any }
		deepIface    struct{ M map[string][]any }
		deliverInMap struct{ M map[string]protocol.Deliver }
		notStruct    []string
	)
	for _, typ := range []reflect.Type{
		reflect.TypeFor[hidden](), reflect.TypeFor[embedded](), reflect.TypeFor[namedTo](), reflect.TypeFor[iface](),
		reflect.TypeFor[deepIface](), reflect.TypeFor[deliverInMap](), reflect.TypeFor[notStruct](),
	} {
		if _, err := newPlan(typ, true); err == nil || !strings.HasPrefix(err.Error(), "wire: ") {
			t.Errorf("%v planned: %v", typ, err)
		}
	}
	type fine struct {
		D  protocol.Deliver
		Ds []protocol.Deliver
		N  map[string][]int
	}
	if _, err := newPlan(reflect.TypeFor[fine](), true); err != nil {
		t.Fatal(err)
	}
}
