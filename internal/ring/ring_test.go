package ring

import (
	"slices"
	"testing"
)

func popAll[T any](q *Queue[T]) []T {
	var out []T
	q.Drain(func(v T) { out = append(out, v) })
	return out
}

func TestZeroValueIsEmpty(t *testing.T) {
	var q Queue[int]
	if q.Len() != 0 {
		t.Fatalf("Len = %d, want 0", q.Len())
	}
	if v, ok := q.Pop(); ok || v != 0 {
		t.Fatalf("Pop on empty = (%d, %v), want (0, false)", v, ok)
	}
}

func TestFIFO(t *testing.T) {
	var q Queue[int]
	for i := range 5 {
		q.Push(i)
	}
	if q.Len() != 5 {
		t.Fatalf("Len = %d, want 5", q.Len())
	}
	for i := range 5 {
		v, ok := q.Pop()
		if !ok || v != i {
			t.Fatalf("Pop #%d = (%d, %v), want (%d, true)", i, v, ok, i)
		}
	}
	if _, ok := q.Pop(); ok {
		t.Fatal("Pop after draining reported an item")
	}
}

// Interleaved pushes and pops make the head wrap around the buffer many
// times and force growth while wrapped; order must survive both.
func TestFIFOAcrossWrapAndGrow(t *testing.T) {
	var q Queue[int]
	next, want := 0, 0
	for round := range 200 {
		for range round%7 + 1 {
			q.Push(next)
			next++
		}
		for range round % 5 {
			v, ok := q.Pop()
			if !ok {
				break
			}
			if v != want {
				t.Fatalf("round %d: Pop = %d, want %d", round, v, want)
			}
			want++
		}
		if q.Len() != next-want {
			t.Fatalf("round %d: Len = %d, want %d", round, q.Len(), next-want)
		}
	}
	for _, v := range popAll(&q) {
		if v != want {
			t.Fatalf("drain: got %d, want %d", v, want)
		}
		want++
	}
	if want != next {
		t.Fatalf("drained up to %d, pushed %d", want, next)
	}
}

func TestGrowKeepsCapacityPowerOfTwo(t *testing.T) {
	var q Queue[int]
	for i := range 1000 {
		q.Push(i)
		if n := len(q.buf); n&(n-1) != 0 {
			t.Fatalf("buffer size %d is not a power of two", n)
		}
	}
	if len(q.buf) != 1024 {
		t.Fatalf("buffer size = %d, want 1024 for 1000 items", len(q.buf))
	}
}

func TestPushFrontKeepsItemOrderAheadOfQueue(t *testing.T) {
	var q Queue[int]
	q.Push(10)
	q.Push(11)
	q.PushFront([]int{1, 2, 3})
	q.Push(12)
	if got, want := popAll(&q), []int{1, 2, 3, 10, 11, 12}; !slices.Equal(got, want) {
		t.Fatalf("order = %v, want %v", got, want)
	}
}

func TestPushFrontOnEmptyAndNested(t *testing.T) {
	var q Queue[string]
	q.PushFront([]string{"c", "d"})
	q.PushFront([]string{"a", "b"})
	q.PushFront(nil)
	q.Push("e")
	if got, want := popAll(&q), []string{"a", "b", "c", "d", "e"}; !slices.Equal(got, want) {
		t.Fatalf("order = %v, want %v", got, want)
	}
}

func TestPushFrontWhenWrappedAndGrowing(t *testing.T) {
	var q Queue[int]
	for i := range 8 {
		q.Push(100 + i)
	}
	for range 6 { // head now near the end of the buffer
		q.Pop()
	}
	q.Push(108)
	front := make([]int, 20)
	for i := range front {
		front[i] = i
	}
	q.PushFront(front)
	want := append(slices.Clone(front), 106, 107, 108)
	if got := popAll(&q); !slices.Equal(got, want) {
		t.Fatalf("order = %v, want %v", got, want)
	}
}

func TestPopClearsSlot(t *testing.T) {
	var q Queue[*int]
	x := 1
	q.Push(&x)
	q.Pop()
	for i, p := range q.buf {
		if p != nil {
			t.Fatalf("slot %d still references a popped item", i)
		}
	}
}

func TestRelease(t *testing.T) {
	var q Queue[int]
	q.Push(1)
	q.Release() // not empty: keeps its buffer and item
	if q.buf == nil || q.Len() != 1 {
		t.Fatalf("Release of a non-empty queue dropped it: buf=%v len=%d", q.buf, q.Len())
	}
	q.Pop()
	q.Release()
	if q.buf != nil || q.head != 0 {
		t.Fatalf("Release of an empty queue kept buf=%v head=%d", q.buf, q.head)
	}
	q.Push(7) // usable again
	q.Push(8)
	if got := popAll(&q); !slices.Equal(got, []int{7, 8}) {
		t.Fatalf("after Release: %v", got)
	}
}

func TestDrainEmpties(t *testing.T) {
	var q Queue[int]
	for i := range 3 {
		q.Push(i)
	}
	if got := popAll(&q); !slices.Equal(got, []int{0, 1, 2}) {
		t.Fatalf("Drain = %v", got)
	}
	if q.Len() != 0 {
		t.Fatalf("Len after Drain = %d", q.Len())
	}
}

func TestShrinkKeepsASmallBufferOnly(t *testing.T) {
	var q Queue[int]
	q.Push(1)
	q.Shrink(2) // not empty: keeps everything
	if q.buf == nil || q.Len() != 1 {
		t.Fatalf("Shrink of a non-empty queue dropped it: buf=%v len=%d", q.buf, q.Len())
	}
	q.Pop()
	q.Shrink(2)
	if len(q.buf) != 2 || q.head != 0 {
		t.Fatalf("Shrink(2) of an empty 2-item buffer: len(buf)=%d head=%d, want it kept at head 0", len(q.buf), q.head)
	}
	if n := testing.AllocsPerRun(100, func() { q.Push(1); q.Pop(); q.Shrink(2) }); n != 0 {
		t.Fatalf("a push into a kept buffer allocated %v times", n)
	}
	for i := range 5 {
		q.Push(i)
	}
	q.Drain(func(int) {})
	q.Shrink(2)
	if q.buf != nil {
		t.Fatalf("Shrink(2) kept a buffer of %d items", len(q.buf))
	}
}

func TestTakeAndAdoptMoveABufferBetweenQueues(t *testing.T) {
	var a, b Queue[*int]
	x := 1
	for range 5 {
		a.Push(&x)
	}
	if buf := a.Take(); buf != nil {
		t.Fatalf("Take of a queue holding items returned a buffer of %d", len(buf))
	}
	a.Pop()
	a.Push(&x) // wrapped: the head is past slot 0
	a.Drain(func(*int) {})
	buf := a.Take()
	if len(buf) != 8 || a.Cap() != 0 {
		t.Fatalf("Take: buffer of %d, queue keeps %d; want 8 and 0", len(buf), a.Cap())
	}
	for i, p := range buf {
		if p != nil {
			t.Fatalf("taken buffer's slot %d still references a popped item", i)
		}
	}
	ys := []int{10, 11, 12}
	for i := range ys {
		b.Push(&ys[i]) // wraps nothing yet: grows to 4
	}
	b.Pop()
	old := b.Adopt(buf)
	if b.Cap() != 8 || len(old) != 4 {
		t.Fatalf("after Adopt: Cap = %d, replaced buffer of %d; want 8 and 4", b.Cap(), len(old))
	}
	for i, p := range old {
		if p != nil {
			t.Fatalf("replaced buffer's slot %d still references an item", i)
		}
	}
	var got []int
	b.Drain(func(p *int) { got = append(got, *p) })
	if want := []int{11, 12}; !slices.Equal(got, want) {
		t.Fatalf("after Adopt: %v, want %v", got, want)
	}
	if n := testing.AllocsPerRun(10, func() {
		for i := range 8 {
			b.Push(&ys[i%3])
		}
		for range 8 {
			b.Pop()
		}
	}); n != 0 {
		t.Fatalf("pushes within the adopted buffer allocated %v times", n)
	}
}

func TestAdoptRefusesABufferThatCannotServe(t *testing.T) {
	for _, tc := range []struct {
		name  string
		items int
		size  int
	}{{"too short", 3, 2}, {"not a power of two", 1, 6}} {
		t.Run(tc.name, func(t *testing.T) {
			var q Queue[int]
			for i := range tc.items {
				q.Push(i)
			}
			defer func() {
				if recover() == nil {
					t.Fatalf("Adopt of %d slots for %d items did not panic", tc.size, tc.items)
				}
			}()
			q.Adopt(make([]int, tc.size))
		})
	}
}
