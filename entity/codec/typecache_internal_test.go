package codec

import (
	"reflect"
	"testing"

	"github.com/shoal-dev/shoal/internal/typeslot"
)

// A snapshot's type cache finds each type's own binding, also among many
// types that share its slots, and nothing for a type not registered.
func TestTypeCacheFindsEachTypesBinding(t *testing.T) {
	bs := &bindings{byType: make(map[reflect.Type]*binding)}
	var types []reflect.Type
	for n := range 4 * typeslot.Slots {
		typ := reflect.ArrayOf(n, reflect.TypeFor[int]())
		types = append(types, typ)
		if n%3 != 0 {
			bs.byType[typ] = &binding{typ: typ}
		}
	}
	for round := range 3 {
		for i, typ := range types {
			if round == 1 { // another order: other types in the slots
				typ = types[len(types)-1-i]
			}
			got := bs.lookupType(typ)
			if want := bs.byType[typ]; got != want {
				t.Fatalf("round %d: lookupType(%v) = %p, want %p", round, typ, got, want)
			}
		}
	}
	if bs.lookupType(nil) != nil {
		t.Fatal("lookupType(nil) found a binding")
	}
}
