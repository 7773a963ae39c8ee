package sharding

import "github.com/shoal-dev/shoal/entity"

// Terminate stops this node's sharding as a crash would: every entity stops
// at once without its stop message, whatever it was doing; buffered
// messages are dropped; the coordinator hosted here stops; nobody is told.
// Other nodes learn of it as they learn of any vanished node, through the
// membership. Entities that persist keep only what they had written, so
// tests use Terminate to show what recovery makes of a crash. Use Shutdown
// to leave gracefully.
func (s *Sharding) Terminate() {
	regions, ok := s.stop()
	if !ok {
		return
	}
	s.unsub()
	for _, r := range regions {
		r.terminate()
	}
}

func (r *Region[C]) terminate() {
	r.mu.Lock()
	r.core.terminate()
	r.mu.Unlock()
	shards := r.localShards()
	r.unlisten()
	r.coordinated.Lock()
	if r.coord != nil {
		r.unlistenCo()
		r.coord.StopNow()
		<-r.coord.Done()
		r.coord = nil
	}
	r.coordinated.Unlock()
	for _, sh := range shards {
		sh.terminate()
	}
	r.stopControl()
}

// terminate stops every entity at once and waits for them. The shard stays
// in hand-off with nobody to tell, so nothing restarts: not a failed
// entity's back-off, not remembered entities, not idle passivation.
func (sh *shard[C]) terminate() {
	sh.wmu.Lock()
	sh.terminated, sh.writes = true, nil
	sh.wmu.Unlock()
	sh.mu.Lock()
	sh.handedOff = nil
	sh.core.terminate()
	cells := make([]*entity.Cell[C], 0, len(sh.core.out))
	for _, ef := range sh.core.out {
		if ef.kind == effForceStop {
			cells = append(cells, ef.handle)
		}
	}
	sh.apply()
	sh.mu.Unlock()
	for _, c := range cells {
		<-c.Done()
	}
	// A cell is done before its Stopped runs: forget the entities here, so
	// that the shard is empty when terminate returns (a late Stopped finds
	// nothing and does nothing).
	sh.mu.Lock()
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
