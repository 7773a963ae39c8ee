package codec

import (
	"reflect"

	"github.com/shoal-dev/shoal/internal/typeslot"
)

// typeCache remembers the bindings found by type in one snapshot of the
// registry (bindings): it belongs to its snapshot, which never changes,
// so an entry never goes stale, and a registration publishes a new
// snapshot with an empty cache. Colliding types take turns in a slot,
// each miss a look-up in the map.
type typeCache = typeslot.Table[binding]

// lookupType is the binding of t in bs, nil when t is not registered.
func (bs *bindings) lookupType(t reflect.Type) *binding {
	slot := bs.cache.Slot(t)
	if b := slot.Load(); b != nil && b.typ == t {
		return b
	}
	b := bs.byType[t]
	if b != nil {
		slot.Store(b)
	}
	return b
}
