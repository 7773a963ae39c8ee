package sharding

import (
	"sync"
	"sync/atomic"

	"github.com/shoal-dev/shoal/cluster"
)

// routeCache is the fast path's counterpart for entities whose shard lives
// on another node: it remembers, per entity, where the locked path last
// forwarded its message (the shard, its stripe, its home) and the write
// epoch it found that route in. The next message for the entity read-locks
// that stripe and, the epoch unchanged, forwards to the same home without
// computing the shard id or looking up the routing table.
//
// Why that is safe: the routing table changes only under the region's
// write lock, and every write lock starts a new epoch. A reader holding
// the stripe's read lock that finds the epoch a route was stamped with
// would find the same route in the table; it forwards under that read
// lock, as the locked path does, so a hand-off (which takes the write
// lock first) still sees nothing forwarded after it began.
//
// The cache is direct-mapped by the entity id's hash and never grows: a
// slot holds one route, replaced when its entity's route changes or is
// from an older epoch. A route of the current epoch is not replaced by
// another entity's, so entities that collide cost no more than one
// allocation each per epoch; the one that got there first keeps the slot.
type routeCache struct {
	slots [routeSlots]atomic.Pointer[route]
}

// routeSlots is how many routes a region remembers.
const routeSlots = 1024

// route is one entity's route to another node, immutable once published.
type route struct {
	entityID string
	hash     uint64
	shardID  string
	stripe   *sync.RWMutex
	home     cluster.UniqueAddress
	epoch    uint64
}

// load returns the route of entityID (of hash h), or nil. Its epoch is to
// be checked under its stripe's read lock.
func (c *routeCache) load(entityID string, h uint64) *route {
	rt := c.slots[h%routeSlots].Load()
	if rt == nil || rt.hash != h || rt.entityID != entityID {
		return nil
	}
	return rt
}

// store remembers that entityID (of hash h) in shardID, behind stripe, was
// forwarded to home in epoch; stripe is read-locked, so epoch is current.
func (c *routeCache) store(entityID string, h uint64, shardID string, stripe *sync.RWMutex, home cluster.UniqueAddress, epoch uint64) {
	slot := &c.slots[h%routeSlots]
	if old := slot.Load(); old != nil && old.epoch == epoch {
		return // this route already, or another entity's of this epoch
	}
	slot.Store(&route{entityID: entityID, hash: h, shardID: shardID, stripe: stripe, home: home, epoch: epoch})
}
