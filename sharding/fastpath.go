package sharding

import (
	"sync/atomic"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/internal/runtime"
	"go.opentelemetry.io/otel/trace"
)

// The fast path: a message for an entity that runs, in a shard this region
// hosts and routes to directly, goes straight into the entity's mailbox,
// with no lock of the region or the shard and no shard id to compute. Two
// checks make that safe, and anything else takes the locked path, where
// the cores decide:
//
//   - The shard is routable as of the region's write epoch: the locked
//     path stamps a hosted shard it finds routable (no buffer, no hand-off,
//     region running) with the epoch, and every write lock of the region,
//     the only way a shard stops being routable, starts a new epoch.
//   - The incarnation is not sealed: the shard seals an entity's cell under
//     its own lock before the stop message or a forced stop, so a fast
//     message either queues ahead of the stop or finds the cell sealed.
//
// A sender that read the epoch before a write lock that made the shard
// unroutable may still deliver directly: per-sender order holds all the
// same, since that sender's own later messages read the new epoch, and
// any earlier message of it that was buffered or held went through a
// write lock (or the sealed cell) before this read.
type fastPath[C any] struct {
	// tick mirrors the region core's idle tick, for the idle time of
	// messages told without the region's lock.
	tick atomic.Uint64
	// entities maps an entity id to its current incarnation in a local
	// shard, written under that shard's lock: stored once the core started
	// the entity and handed it its buffered messages, removed when it stops.
	entities entityTable[C]
}

// tellFast tells msg to the running incarnation of entityID (of hash h in
// r.fast.entities) if the fast path may (see fastPath). It reports false,
// having done nothing, when it may not: the caller takes the locked path.
// Otherwise it reports true and what the cell's Tell returned, as the
// locked path would. The cell keeps the region's idle tick as its mark,
// which its shard hands its core before it looks for idle entities
// (foldFastTicks).
func (r *Region[C]) tellFast(entityID string, h uint64, msg C, parent *trace.SpanContext) (bool, error) {
	epoch := r.mu.epoch.Load()
	c, sh := r.fast.entities.load(entityID, h)
	if c == nil || sh.routedAt.Load() != epoch {
		return false, nil
	}
	return runtime.TellUnsealed(c, msg, r.fast.tick.Load(), parent)
}

// routed stamps sh routable at the current write epoch: the region's
// locked path found it hosted and routable under its read lock.
func (sh *shard[C]) routed(epoch uint64) {
	if sh.routedAt.Load() != epoch {
		sh.routedAt.Store(epoch)
	}
}

// publish puts a started incarnation on the fast path; sh.mu is held.
func (sh *shard[C]) publish(cell *entity.Cell[C]) {
	sh.r.fast.entities.store(cell, sh)
}

// unpublish takes incarnation c off the fast path; sh.mu is held.
func (sh *shard[C]) unpublish(c *entity.Cell[C]) {
	sh.r.fast.entities.remove(c)
}

// foldFastTicks hands the core the idle ticks of what the fast path told
// the shard's entities; sh.mu is held.
func (sh *shard[C]) foldFastTicks() {
	for id, e := range sh.core.entities {
		if e.handle != nil {
			if tick := runtime.Mark(e.handle); tick > 0 {
				sh.core.told(id, tick)
			}
		}
	}
}
