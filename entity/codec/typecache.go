package codec

import (
	"reflect"
	"sync/atomic"
	"unsafe"
)

// typeCacheSlots is how many bindings a snapshot of the registry keeps
// in its type cache.
const typeCacheSlots = 64

// typeCache remembers the bindings found by type in one snapshot of the
// registry (bindings), direct-mapped by the address of the type's
// descriptor: a message's type is found with a load and a compare instead
// of hashing an interface for the map, once per message (see
// docs/DESIGN.md, "Wire"). It belongs to its snapshot, which never
// changes, so an entry never goes stale: a registration publishes a new
// snapshot with an empty cache. Colliding types take turns in a slot, each
// miss a look-up in the map.
type typeCache [typeCacheSlots]atomic.Pointer[binding]

// typeSlot is t's slot: from the address of its descriptor, which is what
// a reflect.Type holds.
func typeSlot(t reflect.Type) uintptr {
	p := uintptr((*[2]unsafe.Pointer)(unsafe.Pointer(&t))[1])
	return (p>>4 ^ p>>10) % typeCacheSlots
}

// lookupType is the binding of t in bs, nil when t is not registered.
func (bs *bindings) lookupType(t reflect.Type) *binding {
	slot := &bs.cache[typeSlot(t)]
	if b := slot.Load(); b != nil && b.typ == t {
		return b
	}
	b := bs.byType[t]
	if b != nil {
		slot.Store(b)
	}
	return b
}
