package runtime

import (
	"reflect"
	"testing"
)

// ReplyAddresses finds, through a type's cached plan, exactly what the
// search of every value finds, in the same order, for messages of every
// shape: flat, nested, behind pointers, interfaces and slices, deeper
// than the search goes, and embedding a ReplyTo.
func TestReplyAddressesPlanFindsWhatTheSearchFinds(t *testing.T) {
	to := func(id uint64) ReplyTo[int] {
		return ReplyTo[int]{addr: ReplyAddress{Node: "n", Incarnation: 1, AskID: id}}
	}
	type flat struct {
		A  int
		To ReplyTo[int]
		B  string
	}
	type inner struct{ To ReplyTo[string] }
	type nested struct {
		First  ReplyTo[int]
		In     inner
		Second ReplyTo[int]
	}
	type embeds struct {
		ReplyTo[int]
		N int
	}
	type behind struct {
		P  *flat
		I  any
		S  []ReplyTo[int]
		To ReplyTo[int]
	}
	type l5 struct{ To ReplyTo[int] }
	type l4 struct{ L l5 }
	type l3 struct{ L l4 }
	type l2 struct{ L l3 }
	type l1 struct{ L l2 }
	type tooDeep struct{ L l1 }
	type none struct {
		A int
		B []byte
		M map[string]ReplyTo[int]
	}
	msgs := []any{
		flat{A: 1, To: to(1)},
		flat{},
		nested{First: to(1), In: inner{To: ReplyTo[string]{addr: ReplyAddress{Node: "m", AskID: 2}}}, Second: to(3)},
		embeds{ReplyTo: to(4)},
		behind{P: &flat{To: to(5)}, I: flat{To: to(6)}, S: []ReplyTo[int]{to(7), to(8)}, To: to(9)},
		behind{To: to(10)},
		&flat{To: to(11)},
		tooDeep{L: l1{L: l2{L: l3{L: l4{L: l5{To: to(12)}}}}}},
		l2{L: l3{L: l4{L: l5{To: to(13)}}}},
		none{A: 1, M: map[string]ReplyTo[int]{"a": to(14)}},
		to(15),
		42,
		nil,
	}
	for _, m := range msgs {
		var want []ReplyAddress
		forEachReplyAddr(reflect.ValueOf(m), 0, func(a ReplyAddress) {
			if !a.IsZero() {
				want = append(want, a)
			}
		})
		for range 2 { // planned, then from the cache
			if got := ReplyAddresses(m); !reflect.DeepEqual(got, want) {
				t.Errorf("%T: ReplyAddresses %v, the search finds %v", m, got, want)
			}
		}
	}
}
