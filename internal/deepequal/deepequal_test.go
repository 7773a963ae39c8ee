package deepequal_test

import (
	"testing"
	"time"

	"github.com/shoal-dev/shoal/internal/deepequal"
)

type withHidden struct {
	Shown int
	n     int
}

type withAny struct{ V any }

func TestEqual(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		name string
		a, b any
		want bool
	}{
		{"unexported field differs", withHidden{1, 42}, withHidden{1, 0}, false},
		{"unexported field same", withHidden{1, 42}, withHidden{1, 42}, true},
		{"interface field changes type", withAny{V: 3}, withAny{V: 3.0}, false},
		{"struct in interface becomes map", withAny{V: withHidden{Shown: 1}}, withAny{V: map[string]any{"Shown": 1.0}}, false},
		{"time by instant, not monotonic reading", now, now.Round(0).UTC(), true},
		{"different instants", now, now.Add(time.Nanosecond), false},
		{"nil and empty slice", []int(nil), []int{}, true},
		{"slices differ", []int{1}, []int{2}, false},
		{"maps", map[string]int{"a": 1}, map[string]int{"a": 1}, true},
		{"maps differ", map[string]int{"a": 1}, map[string]int{"a": 2}, false},
		{"different types", 1, int64(1), false},
		{"nil pointers", (*int)(nil), (*int)(nil), true},
	} {
		if got := deepequal.Equal(tc.a, tc.b); got != tc.want {
			t.Errorf("%s: Equal(%#v, %#v) = %v, want %v", tc.name, tc.a, tc.b, got, tc.want)
		}
	}
}
