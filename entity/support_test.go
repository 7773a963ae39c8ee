package entity_test

import (
	"bytes"
	"regexp"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/timers"
)

// recorder collects values from handlers for the test goroutine to check.
type recorder[T any] struct {
	mu    sync.Mutex
	items []T
}

func (r *recorder[T]) add(v T) {
	r.mu.Lock()
	r.items = append(r.items, v)
	r.mu.Unlock()
}

func (r *recorder[T]) get() []T {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.items)
}

func (r *recorder[T]) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.items)
}

var stringKey = entity.NewTypeKey[string]("strings")

// spawnFunc runs an entity of string commands whose every message goes to recv.
func spawnFunc(sys *entity.System, id string, recv func(ctx entity.Context[string], msg string) entity.Behavior[string], opts ...func(*entity.Props[string])) *entity.Cell[string] {
	props := &entity.Props[string]{Key: stringKey, Create: func(entity.Context[string]) entity.Behavior[string] {
		return entity.Receive(recv)
	}}
	for _, o := range opts {
		o(props)
	}
	return entity.Spawn(sys, props, id)
}

func mustTell[C any](t testing.TB, ref entity.Ref[C], msg C) {
	t.Helper()
	if err := ref.Tell(msg); err != nil {
		t.Fatalf("Tell(%v): %v", msg, err)
	}
}

// waitDone waits for c to stop, failing after a generous real-time bound
// (inside a synctest bubble the bound is fake time and costs nothing).
func waitDone[C any](t testing.TB, c *entity.Cell[C]) {
	t.Helper()
	select {
	case <-c.Done():
	case <-time.After(30 * time.Second):
		t.Fatalf("entity %s did not stop", c.EntityID())
	}
}

func recv[T any](t testing.TB, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatal("timed out waiting on channel")
		panic("unreachable")
	}
}

var bubbleRE = regexp.MustCompile(`synctest bubble (\d+)\]`)

// bubbleGoroutines lists the stacks of the goroutines in the caller's
// synctest bubble, the caller excluded.
func bubbleGoroutines() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	blocks := bytes.Split(buf, []byte("\n\n"))
	self := bubbleRE.FindSubmatch(blocks[0])
	if self == nil {
		panic("bubbleGoroutines called outside a synctest bubble")
	}
	var out []string
	for _, b := range blocks[1:] {
		m := bubbleRE.FindSubmatch(b)
		if m != nil && string(m[1]) == string(self[1]) {
			out = append(out, string(b))
		}
	}
	return out
}

// runtimeGoroutines are bubble goroutines running entity runtime code.
func runtimeGoroutines() []string {
	var out []string
	for _, g := range bubbleGoroutines() {
		if bytes.Contains([]byte(g), []byte("shoal/entity.")) {
			out = append(out, g)
		}
	}
	return out
}

// fakeClock is the manual clock the tests move.
type fakeClock = timers.ManualClock

func newFakeClock() *fakeClock {
	return timers.NewManualClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
}
