package allocation

import (
	"fmt"

	"github.com/shoal-dev/shoal/cluster"
	"slices"
	"strings"
	"testing"
)

// sim is a minimal simulated coordinator: it holds the regions and the shard
// allocations, asks the strategy, and applies its answers the way Akka's
// coordinator (and Akka's own strategy specs) do: a rebalanced shard is
// deallocated, and the rebalanced shards are then allocated again one by
// one, in sorted order, each through Allocate on the updated state.
type sim struct {
	t           testing.TB
	strategy    Strategy
	limit       func(total int) int // the strategy's per-round limit, checked on every round
	regions     []Region            // registration order
	shards      map[string][]string // region → shards, allocation order
	unallocated []string            // shards without a home (handed off, or never allocated)
	nextShard   int
}

func newSim(t testing.TB, s Strategy, limit func(int) int) *sim {
	return &sim{t: t, strategy: s, limit: limit, shards: map[string][]string{}}
}

// state returns the state to give the strategy: fresh Regions and Shards
// containers, and clipped shard slices, so that a strategy appending to its
// input could not corrupt the simulation.
func (s *sim) state() State {
	st := State{Regions: slices.Clone(s.regions), Shards: make(map[cluster.UniqueAddress][]string, len(s.shards))}
	for id, sh := range s.shards {
		st.Shards[node(id)] = slices.Clip(sh)
	}
	return st
}

func (s *sim) region(id string) *Region {
	for i := range s.regions {
		if s.regions[i].ID.Node == id {
			return &s.regions[i]
		}
	}
	return nil
}

// upsert adds a region (Up, reachable, unless r says otherwise) or replaces it.
func (s *sim) upsert(r Region) {
	if p := s.region(r.ID.Node); p != nil {
		*p = r
		return
	}
	s.regions = append(s.regions, r)
}

// remove unregisters a region; the shards it still hosts lose their home.
func (s *sim) remove(id string) int {
	i := slices.IndexFunc(s.regions, func(r Region) bool { return r.ID.Node == id })
	if i < 0 {
		s.t.Fatalf("remove: unknown region %q", id)
	}
	s.regions = slices.Delete(s.regions, i, i+1)
	return s.handOffAll(id)
}

// handOffAll deallocates every shard of a region (graceful leave).
func (s *sim) handOffAll(id string) int {
	n := len(s.shards[id])
	s.unallocated = append(s.unallocated, s.shards[id]...)
	delete(s.shards, id)
	return n
}

// assign puts shards on a region directly (an initial allocation).
func (s *sim) assign(id string, shards ...string) {
	s.shards[id] = append(s.shards[id], shards...)
}

// newShards adds n never-allocated shards named with three digits, 001 up.
func (s *sim) newShards(n int) []string {
	var out []string
	for range n {
		s.nextShard++
		out = append(out, fmt.Sprintf("%03d", s.nextShard))
	}
	s.unallocated = append(s.unallocated, out...)
	return out
}

// allocate asks the strategy for the home of one shard and records it.
func (s *sim) allocate(shard string) string {
	s.t.Helper()
	st := s.state()
	var requester cluster.UniqueAddress
	if len(st.Regions) > 0 {
		requester = st.Regions[0].ID
	}
	a, err := s.strategy.Allocate(requester, shard, st)
	r := a.Node
	if err != nil {
		s.t.Fatalf("allocate %s: %v", shard, err)
	}
	if s.region(r) == nil {
		s.t.Fatalf("allocate %s: strategy chose unknown region %q", shard, r)
	}
	s.shards[r] = append(s.shards[r], shard)
	return r
}

// allocateUnallocated allocates every shard without a home, in sorted order.
func (s *sim) allocateUnallocated() int {
	s.t.Helper()
	pending := s.unallocated
	s.unallocated = nil
	slices.Sort(pending)
	for _, sh := range pending {
		s.allocate(sh)
	}
	return len(pending)
}

func (s *sim) total() int {
	n := 0
	for _, r := range s.regions {
		n += len(s.shards[r.ID.Node])
	}
	return n
}

// round runs one rebalance round and applies it; it returns the moved shards.
func (s *sim) round() []string {
	s.t.Helper()
	total := s.total()
	moved := s.strategy.Rebalance(s.state(), nil)
	if !slices.IsSorted(moved) {
		s.t.Fatalf("rebalance result not sorted: %v", moved)
	}
	if s.limit != nil && len(moved) > s.limit(total) {
		s.t.Fatalf("rebalance moved %d shards, limit %d", len(moved), s.limit(total))
	}
	set := map[string]bool{}
	for _, sh := range moved {
		if set[sh] {
			s.t.Fatalf("rebalance returned %s twice", sh)
		}
		set[sh] = true
	}
	found := 0
	for id, sh := range s.shards {
		kept := slices.DeleteFunc(slices.Clone(sh), func(x string) bool { return set[x] })
		found += len(sh) - len(kept)
		s.shards[id] = kept
	}
	if found != len(moved) {
		s.t.Fatalf("rebalance returned shards that are not allocated: %v", moved)
	}
	for _, sh := range moved { // already sorted
		s.allocate(sh)
	}
	if s.total() != total {
		s.t.Fatalf("round changed the number of shards: %d → %d", total, s.total())
	}
	return moved
}

// settle allocates the shards without a home, then runs rebalance rounds
// until one moves nothing. It fails after maxRounds rounds.
func (s *sim) settle(maxRounds int) (allocated, rounds, moved, maxPerRound int) {
	s.t.Helper()
	allocated = s.allocateUnallocated()
	for {
		m := s.round()
		if len(m) == 0 {
			return allocated, rounds, moved, maxPerRound
		}
		rounds++
		moved += len(m)
		maxPerRound = max(maxPerRound, len(m))
		if rounds > maxRounds {
			s.t.Fatalf("no stable allocation after %d rounds: %s", maxRounds, s.countsString())
		}
	}
}

// counts returns the number of shards per region, in registration order.
func (s *sim) counts() []int {
	out := make([]int, len(s.regions))
	for i, r := range s.regions {
		out[i] = len(s.shards[r.ID.Node])
	}
	return out
}

func (s *sim) countsString() string {
	var b strings.Builder
	for i, r := range s.regions {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%d", r.ID.Node, len(s.shards[r.ID.Node]))
	}
	return b.String()
}

// node is the address of the region the tests name name: its node id, no
// incarnation.
func node(name string) cluster.UniqueAddress { return cluster.UniqueAddress{Node: name} }

// nodes names the regions of ids.
func names(ids []cluster.UniqueAddress) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = id.Node
	}
	return out
}
