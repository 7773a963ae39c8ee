package runtime

import (
	"reflect"
	"testing"
	"time"
)

// The search for reply addresses enters only what may hold one: a
// time.Time's location, say, which the runtime writes lazily without a
// lock, is never read.
func TestMayHoldReplyTo(t *testing.T) {
	type withTime struct {
		At time.Time
		N  []int
	}
	type withReply struct{ To ReplyTo[string] }
	type nested struct{ Inner []*withReply }
	type withAny struct{ V any }
	type list struct {
		Next *list
		At   time.Time
	}
	for _, tc := range []struct {
		v    any
		want bool
	}{
		{time.Now(), false},
		{withTime{}, false},
		{&withTime{}, false},
		{list{}, false}, // a recursive type ends at the depth bound
		{ReplyTo[string]{}, true},
		{withReply{}, true},
		{nested{}, true},
		{withAny{}, true},
	} {
		if got := mayHoldReplyTo(reflect.TypeOf(tc.v), maxReplyDepth); got != tc.want {
			t.Errorf("mayHoldReplyTo(%T) = %v, want %v", tc.v, got, tc.want)
		}
	}
	// A ReplyTo beyond the depth bound is not found, as the walk does not
	// reach it either.
	type d1 struct{ To ReplyTo[string] }
	type d2 struct{ A d1 }
	if mayHoldReplyTo(reflect.TypeOf(d2{}), 1) {
		t.Error("found a ReplyTo two levels down with one level left")
	}
}
