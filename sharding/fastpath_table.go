package sharding

import (
	"hash/maphash"
	"sync"
	"sync/atomic"

	"github.com/shoal-dev/shoal/entity"
)

// entityTable maps entity ids to their incarnations on the fast path. A
// read takes no lock and allocates nothing: open addressing with linear
// probing over slots of atomic words. Each slot holds the id's hash next
// to its entry, so that a probe past another id costs no pointer chase,
// and the entry's shard, so that the fast path's two checks (the cell's
// seal, the shard's epoch) load the cell and the shard at once rather
// than one after the other (cell, its props, its owner). Writes (an
// entity started or stopped, under its shard's lock) are serialized by
// mu; a table that fills up, with entries or with the tombstones of
// removed ones, is copied into a fresh one, published whole.
//
// A reader that loaded the table before such a copy may still find an
// entry removed since, as a reader that loaded the entry just before its
// removal would: the fast path checks the cell's seal after the lookup,
// and an incarnation is sealed or stopped before it is removed (or
// replaced by the next one). For the same reason a reader that loaded an
// entry just before its slot was reused may pair it with the new entry's
// shard: the old cell refuses all the same.
type entityTable[C any] struct {
	// seed is set once, before the first hash (init), and kept through
	// rebuilds, so that an id's hash may be taken once and kept with the
	// id (an EntityRef keeps it), and a rebuild need not hash again.
	seed maphash.Seed
	tab  atomic.Pointer[tableSlots[C]]
	mu   sync.Mutex
	tomb *entity.Cell[C] // marks a removed entry, never spawned; probes go on past it
}

// init readies an empty table.
func (t *entityTable[C]) init() { t.seed = maphash.MakeSeed() }

// hash is id's hash in t, for load.
func (t *entityTable[C]) hash(id string) uint64 { return maphash.String(t.seed, id) }

type tableSlots[C any] struct {
	mask  uint64
	slots []tableSlot[C]
	// Guarded by entityTable.mu.
	live int // entries
	used int // entries and tombstones: slots a probe goes past
}

// tableSlot is written hash and shard first, so that a reader who sees
// the entry sees its hash and shard.
type tableSlot[C any] struct {
	hash atomic.Uint64
	e    atomic.Pointer[entity.Cell[C]]
	sh   atomic.Pointer[shard[C]]
}

// set fills s with entry e of shard sh and hash h, e last.
func (s *tableSlot[C]) set(h uint64, e *entity.Cell[C], sh *shard[C]) {
	s.hash.Store(h)
	s.sh.Store(sh)
	s.e.Store(e)
}

const minTableSize = 16

// load returns the entry of id, whose hash is h, and its shard, or nil.
func (t *entityTable[C]) load(id string, h uint64) (*entity.Cell[C], *shard[C]) {
	tab := t.tab.Load()
	if tab == nil {
		return nil, nil
	}
	for i := h & tab.mask; ; i = (i + 1) & tab.mask {
		s := &tab.slots[i]
		e := s.e.Load()
		if e == nil {
			return nil, nil
		}
		if s.hash.Load() == h && e != t.tomb && e.EntityID() == id {
			return e, s.sh.Load()
		}
	}
}

// store makes e, of shard sh, the entry of its entity id, replacing any.
func (t *entityTable[C]) store(e *entity.Cell[C], sh *shard[C]) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.tomb == nil {
		t.tomb = new(entity.Cell[C])
	}
	tab := t.tab.Load()
	if tab == nil || (tab.used+1)*4 > len(tab.slots)*3 { // load ≤ 3/4
		live := 0
		if tab != nil {
			live = tab.live
		}
		tab = t.rebuild(tab, live+1)
	}
	id := e.EntityID()
	h := t.hash(id)
	var free *tableSlot[C]
	i := h & tab.mask
	for ; ; i = (i + 1) & tab.mask {
		s := &tab.slots[i]
		cur := s.e.Load()
		if cur == nil {
			break
		}
		if cur == t.tomb {
			if free == nil {
				free = s
			}
			continue
		}
		if s.hash.Load() == h && cur.EntityID() == id {
			s.set(h, e, sh)
			return
		}
	}
	if free == nil {
		free = &tab.slots[i]
		tab.used++
	}
	tab.live++
	free.set(h, e, sh)
}

// remove takes e off the table if it is still the entry of its entity id.
func (t *entityTable[C]) remove(e *entity.Cell[C]) {
	t.mu.Lock()
	defer t.mu.Unlock()
	tab := t.tab.Load()
	if tab == nil {
		return
	}
	h := t.hash(e.EntityID())
	for i := h & tab.mask; ; i = (i + 1) & tab.mask {
		s := &tab.slots[i]
		cur := s.e.Load()
		if cur == nil {
			return
		}
		if cur == e {
			s.e.Store(t.tomb)
			tab.live--
			break
		}
	}
	if len(tab.slots) > minTableSize && tab.live*8 < len(tab.slots) { // load < 1/8
		t.rebuild(tab, tab.live)
	}
}

// rebuild publishes a table sized for n entries (load ≤ 1/2) holding the
// entries of old, without its tombstones; t.mu is held.
func (t *entityTable[C]) rebuild(old *tableSlots[C], n int) *tableSlots[C] {
	size := minTableSize
	for size < 2*n {
		size *= 2
	}
	tab := &tableSlots[C]{mask: uint64(size - 1), slots: make([]tableSlot[C], size)}
	if old != nil {
		for i := range old.slots {
			e := old.slots[i].e.Load()
			if e == nil || e == t.tomb {
				continue
			}
			h := old.slots[i].hash.Load()
			j := h & tab.mask
			for tab.slots[j].e.Load() != nil {
				j = (j + 1) & tab.mask
			}
			tab.slots[j].set(h, e, old.slots[i].sh.Load())
			tab.live++
		}
		tab.used = tab.live
	}
	t.tab.Store(tab)
	return tab
}
