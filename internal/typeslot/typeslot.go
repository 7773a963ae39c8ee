// Package typeslot keeps recent values by Go type in a small direct-mapped
// table: a value is found again with a load and a compare instead of an
// interface hashed for a map, once per message (see docs/DESIGN.md, "Wire").
package typeslot

import (
	"reflect"
	"sync/atomic"
	"unsafe"
)

// Slots is how many values a Table holds.
const Slots = 64

// Table holds recent values of type V, each in the slot of its type.
// Colliding types take turns in a slot: a value must name its type, for
// its finder to compare, and be immutable once stored.
type Table[V any] struct {
	slots [Slots]atomic.Pointer[V]
}

// Slot is t's slot in tab, chosen by the address of t's descriptor, which
// is what a reflect.Type holds.
func (tab *Table[V]) Slot(t reflect.Type) *atomic.Pointer[V] {
	p := uintptr((*[2]unsafe.Pointer)(unsafe.Pointer(&t))[1])
	return &tab.slots[(p>>4^p>>10)%Slots]
}
