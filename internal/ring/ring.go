// Package ring is a growable FIFO queue on a circular buffer, used for
// mailboxes and run queues where a slice would keep growing at the head.
package ring

import "fmt"

// Queue is a FIFO of T. The zero value is an empty queue ready to use. It is
// not safe for concurrent use.
type Queue[T any] struct {
	buf  []T
	head int
	n    int
}

// Len is the number of queued items.
func (q *Queue[T]) Len() int { return q.n }

// Cap is how many items the buffer holds before it grows.
func (q *Queue[T]) Cap() int { return len(q.buf) }

// Push appends v.
func (q *Queue[T]) Push(v T) {
	if q.n == len(q.buf) {
		q.grow()
	}
	q.buf[(q.head+q.n)&(len(q.buf)-1)] = v
	q.n++
}

// Pop removes and returns the oldest item.
func (q *Queue[T]) Pop() (T, bool) {
	var zero T
	if q.n == 0 {
		return zero, false
	}
	v := q.buf[q.head]
	q.buf[q.head] = zero
	q.head = (q.head + 1) & (len(q.buf) - 1)
	q.n--
	return v, true
}

// PushFront prepends items, keeping their order, ahead of everything queued.
func (q *Queue[T]) PushFront(items []T) {
	for len(q.buf)-q.n < len(items) {
		q.grow()
	}
	for i := len(items) - 1; i >= 0; i-- {
		q.head = (q.head - 1) & (len(q.buf) - 1)
		q.buf[q.head] = items[i]
	}
	q.n += len(items)
}

// Drain removes every item, passing each to fn in order.
func (q *Queue[T]) Drain(fn func(T)) {
	for q.n > 0 {
		v, _ := q.Pop()
		fn(v)
	}
}

// Release drops the buffer when the queue is empty, so an idle owner keeps
// no memory for it.
func (q *Queue[T]) Release() {
	if q.n == 0 {
		q.buf, q.head = nil, 0
	}
}

// Shrink drops the buffer when the queue is empty and the buffer holds
// more than keep items: an owner that goes idle between single messages
// (a mailbox told once, then drained) keeps its small buffer instead of
// allocating it again for the next message, while a burst's large buffer
// is not kept for good.
func (q *Queue[T]) Shrink(keep int) {
	if q.n == 0 {
		q.head = 0
		if len(q.buf) > keep {
			q.buf = nil
		}
	}
}

// Take removes and returns the buffer of an empty queue, leaving it none,
// so that an owner can keep it for another queue to Adopt; it returns nil
// when the queue holds items. Every slot of the buffer is zero, since Pop
// clears the slots it empties.
func (q *Queue[T]) Take() []T {
	if q.n != 0 {
		return nil
	}
	buf := q.buf
	q.buf, q.head = nil, 0
	return buf
}

// Adopt makes buf the queue's buffer, with the queued items moved to its
// front, and returns the buffer it replaces with every slot zeroed, for
// another queue to adopt. buf's length must be a power of two and at least
// Len. Its other slots should be zero, as a taken or replaced buffer's are,
// or the queue keeps what they hold alive until it overwrites them.
func (q *Queue[T]) Adopt(buf []T) []T {
	if n := len(buf); n < q.n || n&(n-1) != 0 {
		panic(fmt.Sprintf("ring: Adopt of a buffer of %d for %d items", n, q.n))
	}
	old := q.move(buf)
	clear(old)
	return old
}

// move copies the items to the front of buf, which becomes the buffer, and
// returns the old one, its slots as they were.
func (q *Queue[T]) move(buf []T) []T {
	for i := 0; i < q.n; i++ {
		buf[i] = q.buf[(q.head+i)&(len(q.buf)-1)]
	}
	old := q.buf
	q.buf, q.head = buf, 0
	return old
}

func (q *Queue[T]) grow() {
	size := len(q.buf) * 2
	if size == 0 {
		size = 2
	}
	q.move(make([]T, size))
}
