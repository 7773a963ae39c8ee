package clustertest

import (
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// CounterOp is one operation on a counter as a client saw it: invoked at
// Call, answered at Return (times in nanoseconds since the history began).
type CounterOp struct {
	Counter string
	Client  int
	// Add is true for an add of By, false for a read.
	Add bool
	By  int64
	// Value is the answer: the value after the add, or the value read.
	Value int64
	// Unknown: no answer came (a timeout, a cut connection, a 500): an add
	// may or may not have taken effect. Return is then ignored.
	Unknown      bool
	Err          string // with Unknown: the failure's kind (see failureKind)
	Call, Return int64
}

// CounterHistory collects the operations of concurrent clients.
type CounterHistory struct {
	start time.Time
	mu    sync.Mutex
	ops   []CounterOp
}

// NewCounterHistory starts a history now.
func NewCounterHistory() *CounterHistory { return &CounterHistory{start: time.Now()} }

// Now is the history's clock (monotonic).
func (h *CounterHistory) Now() int64 { return int64(time.Since(h.start)) }

// Record adds an operation.
func (h *CounterHistory) Record(op CounterOp) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops = append(h.ops, op)
}

// Ops returns the operations recorded so far.
func (h *CounterHistory) Ops() []CounterOp {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]CounterOp(nil), h.ops...)
}

type counterInput struct {
	counter string
	add     bool
	by      int64
}

type counterOutput struct {
	value   int64
	unknown bool
}

// counterModel is a set of independent counters, one partition each. An
// add whose answer is unknown may take effect at any time after its call
// (its return is at infinity) or not at all; porcupine explores both
// through the add's "unknown" output, which any value satisfies.
var counterModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byCounter := map[string][]porcupine.Operation{}
		var order []string
		for _, op := range history {
			c := op.Input.(counterInput).counter
			if _, ok := byCounter[c]; !ok {
				order = append(order, c)
			}
			byCounter[c] = append(byCounter[c], op)
		}
		out := make([][]porcupine.Operation, 0, len(order))
		for _, c := range order {
			out = append(out, byCounter[c])
		}
		return out
	},
	Init: func() any { return int64(0) },
	Step: func(state, input, output any) (bool, any) {
		s, in, out := state.(int64), input.(counterInput), output.(counterOutput)
		if !in.add {
			return out.value == s, s
		}
		next := s + in.by
		return out.unknown || out.value == next, next
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(counterInput), output.(counterOutput)
		res := fmt.Sprint(out.value)
		if out.unknown {
			res = "?"
		}
		if in.add {
			return fmt.Sprintf("%s add %d -> %s", in.counter, in.by, res)
		}
		return fmt.Sprintf("%s read -> %s", in.counter, res)
	},
}

// CheckLinearizable checks ops against a counter's sequential
// specification. An add with no answer may or may not have happened; a
// read with no answer says nothing and is left out (a read has no effect).
// It returns porcupine's verdict: Ok, Illegal, or Unknown when the search
// outlasted timeout.
func CheckLinearizable(ops []CounterOp, timeout time.Duration) porcupine.CheckResult {
	var history []porcupine.Operation
	for _, op := range ops {
		if op.Unknown && !op.Add {
			continue
		}
		ret := op.Return
		if op.Unknown {
			ret = math.MaxInt64
		}
		history = append(history, porcupine.Operation{
			ClientId: op.Client,
			Input:    counterInput{counter: op.Counter, add: op.Add, by: op.By},
			Call:     op.Call,
			Output:   counterOutput{value: op.Value, unknown: op.Unknown},
			Return:   ret,
		})
	}
	return porcupine.CheckOperationsTimeout(counterModel, history, timeout)
}
