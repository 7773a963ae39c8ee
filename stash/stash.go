// Package stash is a bounded buffer an entity uses to set messages aside
// until it is ready for them, then hand them back in their original order.
package stash

import (
	"errors"
	"fmt"
)

// ErrFull is returned by Stash when the buffer is at capacity.
var ErrFull = errors.New("stash: buffer full")

// DefaultCapacity is the capacity entities get unless configured otherwise.
const DefaultCapacity = 4096

// Buffer holds stashed messages of type C. It belongs to one entity and is
// used only from that entity's handler, so it is not safe for concurrent use.
type Buffer[C any] struct {
	items    []C
	capacity int
	unstash  func([]C)
}

// New returns a buffer holding at most capacity messages. UnstashAll passes
// the stashed messages, oldest first, to redeliver; the entity runtime
// delivers them before any message still in its mailbox.
func New[C any](capacity int, redeliver func([]C)) *Buffer[C] {
	if capacity <= 0 {
		capacity = DefaultCapacity
	}
	return &Buffer[C]{capacity: capacity, unstash: redeliver}
}

// Stash appends msg. When the buffer is full, msg is not stored and the
// error, matching ErrFull, says so; the caller decides what to do with msg.
func (b *Buffer[C]) Stash(msg C) error {
	if len(b.items) >= b.capacity {
		return fmt.Errorf("%w (capacity %d)", ErrFull, b.capacity)
	}
	b.items = append(b.items, msg)
	return nil
}

// UnstashAll hands every stashed message back for redelivery, in the order
// they were stashed, and empties the buffer.
func (b *Buffer[C]) UnstashAll() {
	if len(b.items) == 0 {
		return
	}
	items := b.items
	b.items = nil
	b.unstash(items)
}

// Len is the number of stashed messages.
func (b *Buffer[C]) Len() int { return len(b.items) }

// Capacity is the most messages the buffer holds.
func (b *Buffer[C]) Capacity() int { return b.capacity }

// IsEmpty reports whether nothing is stashed.
func (b *Buffer[C]) IsEmpty() bool { return len(b.items) == 0 }

// IsFull reports whether Stash would fail.
func (b *Buffer[C]) IsFull() bool { return len(b.items) >= b.capacity }

// Clear drops every stashed message and returns them, oldest first.
func (b *Buffer[C]) Clear() []C {
	items := b.items
	b.items = nil
	return items
}
