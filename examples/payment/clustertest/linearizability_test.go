package clustertest

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// The checker accepts what a counter may answer and refuses what it may
// not, unknown adds included: these histories are what a lost update, a
// stale read from a second incarnation, or an add applied twice look like.
func TestCheckLinearizable(t *testing.T) {
	add := func(c string, client int, call, ret, value int64) CounterOp {
		return CounterOp{Counter: c, Client: client, Add: true, By: 1, Value: value, Call: call, Return: ret}
	}
	read := func(c string, client int, call, ret, value int64) CounterOp {
		return CounterOp{Counter: c, Client: client, Value: value, Call: call, Return: ret}
	}
	lost := func(op CounterOp) CounterOp { op.Unknown, op.Value = true, 0; return op }
	for _, tc := range []struct {
		name string
		ops  []CounterOp
		want porcupine.CheckResult
	}{
		{"sequential adds and a read", []CounterOp{add("a", 0, 0, 1, 1), add("a", 1, 2, 3, 2), read("a", 0, 4, 5, 2)}, porcupine.Ok},
		{"concurrent adds answer in either order", []CounterOp{add("a", 0, 0, 10, 2), add("a", 1, 1, 9, 1)}, porcupine.Ok},
		{"stale read after an acknowledged add", []CounterOp{add("a", 0, 0, 1, 1), read("a", 1, 2, 3, 0)}, porcupine.Illegal},
		{"an add lost after its acknowledgement", []CounterOp{add("a", 0, 0, 1, 1), add("a", 1, 2, 3, 1)}, porcupine.Illegal},
		{"an unknown add that happened", []CounterOp{lost(add("a", 0, 0, 1, 0)), read("a", 1, 5, 6, 1)}, porcupine.Ok},
		{"an unknown add that did not happen", []CounterOp{lost(add("a", 0, 0, 1, 0)), read("a", 1, 5, 6, 0)}, porcupine.Ok},
		{"an unknown add counted twice", []CounterOp{lost(add("a", 0, 0, 1, 0)), read("a", 1, 5, 6, 2)}, porcupine.Illegal},
		{"counters are independent", []CounterOp{add("a", 0, 0, 1, 1), add("b", 1, 2, 3, 1), read("a", 0, 4, 5, 1)}, porcupine.Ok},
		{"unknown reads are left out", []CounterOp{add("a", 0, 0, 1, 1), lost(read("a", 1, 2, 3, 0))}, porcupine.Ok},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := CheckLinearizable(tc.ops, 10*time.Second); got != tc.want {
				t.Fatalf("CheckLinearizable = %v, want %v", got, tc.want)
			}
		})
	}
}
