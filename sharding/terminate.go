package sharding

import (
	"time"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/timers"
)

// Terminate stops this node's sharding as a crash would: every entity stops
// at once without its stop message, whatever it was doing; buffered
// messages are dropped; the coordinator hosted here stops; nobody is told.
// Other nodes learn of it as they learn of any vanished node, through the
// membership. Entities that persist keep only what they had written, so
// tests use Terminate to show what recovery makes of a crash. Use Shutdown
// to leave gracefully.
func (s *Sharding) Terminate() {
	regions, hosts, ok := s.stop()
	if !ok {
		return
	}
	s.unsub()
	s.unleave()
	for _, r := range regions {
		hosts[r.typeName()].terminate()
		r.terminate()
	}
}

func (r *Region[C]) terminate() {
	r.mu.Lock()
	r.core.terminate()
	r.mu.Unlock()
	shards := r.localShards()
	r.unlisten()
	var cells []*entity.Cell[C]
	for _, sh := range shards {
		cells = append(cells, sh.forceStopAll()...)
	}
	// Bounded: an entity stuck in its handler cannot be stopped, and a
	// crash does not wait for it.
	if !waitDone(r.clock, r.settings.StopTimeout, cells) {
		r.s.log.Warn("sharding: entities still in their handlers after Terminate", "entity_type", r.typ, "after", r.settings.StopTimeout)
	}
	for _, sh := range shards {
		sh.forgetAll()
	}
	r.stopControl()
}

// waitDone waits until every cell is done or the clock passes bound, and
// reports whether all were.
func waitDone[C any](clock timers.Clock, bound time.Duration, cells []*entity.Cell[C]) bool {
	if len(cells) == 0 {
		return true
	}
	expired := make(chan struct{})
	t := clock.AfterFunc(bound, func() { close(expired) })
	defer t.Stop()
	for _, c := range cells {
		select {
		case <-c.Done():
		case <-expired:
			return false
		}
	}
	return true
}

// forceStopAll stops every entity at once, as a crash would, and returns
// their incarnations for the caller to wait for. The shard stays in
// hand-off with nobody to tell, so nothing restarts: not a failed entity's
// back-off, not remembered entities, not idle passivation.
func (sh *shard[C]) forceStopAll() []*entity.Cell[C] {
	sh.wmu.Lock()
	sh.terminated, sh.writes = true, nil
	sh.wmu.Unlock()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.handedOff = nil
	if dropped := sh.core.terminate(); dropped > 0 {
		sh.r.s.log.Warn("sharding: shard stopped with undelivered messages held for its entities",
			"entity_type", sh.r.typ, "shard_id", sh.id, "count", dropped)
	}
	cells := make([]*entity.Cell[C], 0, len(sh.core.out))
	for _, ef := range sh.core.out {
		if ef.kind == effForceStop {
			cells = append(cells, ef.handle)
		}
	}
	sh.apply()
	return cells
}

// forgetAll empties a shard whose entities forceStopAll stopped. A cell is
// done before its Stopped runs: forgetting them here leaves the shard
// empty once its entities are done (a late Stopped finds nothing).
func (sh *shard[C]) forgetAll() {
	sh.mu.Lock()
	for _, e := range sh.core.entities {
		sh.unpublish(e.handle)
	}
	sh.core.forgetAll()
	sh.mu.Unlock()
}

func (r *Region[C]) localShards() []*shard[C] {
	r.mu.RLock()
	defer r.mu.RUnlock()
	ids := r.core.hostedShards()
	shards := make([]*shard[C], 0, len(ids))
	for _, id := range ids {
		sh, _ := r.core.local(id)
		shards = append(shards, sh)
	}
	return shards
}
