package stash_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/shoal-dev/shoal/stash"
)

type sink struct {
	calls [][]int
}

func (s *sink) redeliver(items []int) { s.calls = append(s.calls, slices.Clone(items)) }

func TestStashIsBoundedAndKeepsEarlierItems(t *testing.T) {
	var s sink
	b := stash.New(3, s.redeliver)
	if b.Capacity() != 3 {
		t.Fatalf("Capacity = %d, want 3", b.Capacity())
	}
	for i := 1; i <= 3; i++ {
		if b.IsFull() {
			t.Fatalf("IsFull before item %d", i)
		}
		if err := b.Stash(i); err != nil {
			t.Fatalf("Stash(%d) = %v", i, err)
		}
	}
	if !b.IsFull() || b.Len() != 3 {
		t.Fatalf("IsFull=%v Len=%d, want true 3", b.IsFull(), b.Len())
	}
	err := b.Stash(4)
	if !errors.Is(err, stash.ErrFull) {
		t.Fatalf("Stash on full = %v, want ErrFull", err)
	}
	if err := b.Stash(5); !errors.Is(err, stash.ErrFull) {
		t.Fatalf("second Stash on full = %v, want ErrFull", err)
	}
	if b.Len() != 3 {
		t.Fatalf("Len after overflow = %d, want 3", b.Len())
	}
	b.UnstashAll()
	if len(s.calls) != 1 || !slices.Equal(s.calls[0], []int{1, 2, 3}) {
		t.Fatalf("redelivered %v, want one call with [1 2 3] (overflowed items not kept)", s.calls)
	}
}

func TestUnstashAllRedeliversInOrderAndEmpties(t *testing.T) {
	var s sink
	b := stash.New(10, s.redeliver)
	for i := range 5 {
		_ = b.Stash(i)
	}
	b.UnstashAll()
	if !b.IsEmpty() || b.Len() != 0 {
		t.Fatalf("after UnstashAll: IsEmpty=%v Len=%d", b.IsEmpty(), b.Len())
	}
	if len(s.calls) != 1 || !slices.Equal(s.calls[0], []int{0, 1, 2, 3, 4}) {
		t.Fatalf("redelivered %v", s.calls)
	}
	// Empty: no call.
	b.UnstashAll()
	if len(s.calls) != 1 {
		t.Fatalf("UnstashAll of an empty buffer called redeliver: %v", s.calls)
	}
	// Reusable, and capacity freed.
	for i := range 10 {
		if err := b.Stash(10 + i); err != nil {
			t.Fatalf("Stash after UnstashAll: %v", err)
		}
	}
	b.UnstashAll()
	if len(s.calls) != 2 || s.calls[1][0] != 10 || len(s.calls[1]) != 10 {
		t.Fatalf("second unstash %v", s.calls)
	}
}

// Stashing from inside the redeliver callback (as a handler that stashes
// again while unstashing would) must not corrupt the batch being handed back.
func TestStashDuringRedeliverDoesNotAliasBatch(t *testing.T) {
	var b *stash.Buffer[int]
	var got []int
	b = stash.New(10, func(items []int) {
		for _, it := range items {
			_ = b.Stash(it * 10)
		}
		got = append(got, items...)
	})
	_ = b.Stash(1)
	_ = b.Stash(2)
	b.UnstashAll()
	if !slices.Equal(got, []int{1, 2}) {
		t.Fatalf("batch = %v, want [1 2]", got)
	}
	if got := b.Clear(); !slices.Equal(got, []int{10, 20}) {
		t.Fatalf("restashed = %v, want [10 20]", got)
	}
}

func TestClearReturnsItemsWithoutRedelivery(t *testing.T) {
	var s sink
	b := stash.New(4, s.redeliver)
	_ = b.Stash(1)
	_ = b.Stash(2)
	if got := b.Clear(); !slices.Equal(got, []int{1, 2}) {
		t.Fatalf("Clear = %v", got)
	}
	if !b.IsEmpty() {
		t.Fatal("not empty after Clear")
	}
	b.UnstashAll()
	if len(s.calls) != 0 {
		t.Fatalf("redeliver called after Clear: %v", s.calls)
	}
}

func TestDefaultCapacity(t *testing.T) {
	for _, c := range []int{0, -1} {
		b := stash.New[int](c, func([]int) {})
		if b.Capacity() != stash.DefaultCapacity {
			t.Fatalf("New(%d).Capacity = %d, want %d", c, b.Capacity(), stash.DefaultCapacity)
		}
	}
}
