package sharding

import (
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/shoal-dev/shoal/entity"
)

// tableEntries spawns n idle cells of ids prefix0…, two incarnations each,
// as entries for an entityTable.
func tableEntries(t *testing.T, prefix string, n int) (first, second []*entity.Cell[string]) {
	t.Helper()
	sys, err := entity.NewSystem(entity.Config{NodeID: "a"})
	if err != nil {
		t.Fatal(err)
	}
	props := &entity.Props[string]{
		Key: entity.NewTypeKey[string]("Table"),
		Create: func(entity.Context[string]) entity.Behavior[string] {
			return entity.Receive(func(entity.Context[string], string) entity.Behavior[string] { return entity.Same[string]() })
		},
	}
	for i := range n {
		id := prefix + strconv.Itoa(i)
		first = append(first, entity.Spawn(sys, props, id))
		second = append(second, entity.Spawn(sys, props, id))
	}
	return first, second
}

// The table agrees with a map under random stores, replacements and
// removals (of the current entry or of a stale one), through growth,
// tombstone clean-ups and shrinking, and finds each entry with the shard
// it was stored with.
func TestEntityTableAgreesWithAMap(t *testing.T) {
	first, second := tableEntries(t, "e", 3000)
	shards := make([]*shard[string], 7)
	for i := range shards {
		shards[i] = &shard[string]{id: strconv.Itoa(i)}
	}
	owner := map[*entity.Cell[string]]*shard[string]{}
	for i := range first {
		owner[first[i]], owner[second[i]] = shards[i%7], shards[(i+1)%7]
	}
	var tab entityTable[string]
	tab.init()
	model := map[string]*entity.Cell[string]{}
	check := func(step int) {
		t.Helper()
		for _, e := range first {
			id := e.EntityID()
			got, sh := tab.load(id, tab.hash(id))
			if want := model[id]; got != want || sh != owner[want] {
				t.Fatalf("step %d: load(%s) = %p, %p; want %p, %p", step, id, got, sh, want, owner[want])
			}
		}
		if tab.cell("absent") != nil {
			t.Fatalf("step %d: found an absent id", step)
		}
		if tt := tab.tab.Load(); tt != nil && tt.live != len(model) {
			t.Fatalf("step %d: %d live entries, want %d", step, tt.live, len(model))
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	grow, shrink := 0, 0
	for step := range 40_000 {
		// Phases: mostly stores, then mostly removals, twice.
		storing := (step/10_000)%2 == 0
		i := rng.IntN(len(first))
		id := first[i].EntityID()
		e := first[i]
		if rng.IntN(2) == 0 {
			e = second[i]
		}
		before := len(tab.slotsOrNil())
		switch r := rng.IntN(10); {
		case storing && r < 7 || !storing && r < 1:
			tab.store(e, owner[e])
			model[id] = e
		default:
			if cur := model[id]; cur != nil && !storing && r < 8 {
				e = cur
			}
			tab.remove(e) // stale when e is not the current entry
			if model[id] == e {
				delete(model, id)
			}
		}
		switch after := len(tab.slotsOrNil()); {
		case after > before:
			grow++
		case after < before:
			shrink++
		}
		if step%500 == 0 {
			check(step)
		}
	}
	check(-1)
	if grow < 5 || shrink < 1 {
		t.Fatalf("grew %d times, shrank %d times: the test did not exercise resizing", grow, shrink)
	}
}

// cell is load's entry alone.
func (t *entityTable[C]) cell(id string) *entity.Cell[C] {
	e, _ := t.load(id, t.hash(id))
	return e
}

func (t *entityTable[C]) slotsOrNil() []tableSlot[C] {
	if tab := t.tab.Load(); tab != nil {
		return tab.slots
	}
	return nil
}

// Readers find an entry that stays in the table while other entries come
// and go and the table grows, shrinks and is rebuilt under them.
func TestEntityTableReadersFindStayingEntriesDuringWrites(t *testing.T) {
	staying, _ := tableEntries(t, "stay", 200)
	churn, next := tableEntries(t, "churn", 2000)
	var tab entityTable[string]
	tab.init()
	for _, e := range staying {
		tab.store(e, nil)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	var missed atomic.Int64
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := r; !stop.Load(); i++ {
				e := staying[i%len(staying)]
				if tab.cell(e.EntityID()) != e {
					missed.Add(1)
				}
			}
		}()
	}
	for range 5 {
		for i := range churn {
			tab.store(churn[i], nil)
			tab.store(next[i], nil)
		}
		for i := range churn {
			tab.remove(next[i])
		}
	}
	stop.Store(true)
	wg.Wait()
	if n := missed.Load(); n > 0 {
		t.Fatalf("readers missed a staying entry %d times", n)
	}
	for _, e := range staying {
		if tab.cell(e.EntityID()) != e {
			t.Fatalf("%s lost", e.EntityID())
		}
	}
}
