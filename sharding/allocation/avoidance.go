package allocation

import (
	"fmt"
	"github.com/shoal-dev/shoal/cluster"
	"slices"
)

// CoordinatorAvoidanceConfig configures [NewCoordinatorAvoidance]. The four
// settings are those of the proposal (lerna-stack's
// coordinator-avoidance-shard-allocation-strategy).
type CoordinatorAvoidanceConfig struct {
	// OldestExcluded is how many of the oldest regions get no shards
	// (oldest-nodes-excluded-from-allocation). The oldest member hosts the
	// coordinator; 2 also covers the member that takes over when the oldest
	// crashes. 0 makes the strategy behave almost like least-shard (without
	// its app-version rules). Negative values act as 0. Default 1.
	OldestExcluded int
	// MinAllocationNodes is how many regions, at least, get shards when that
	// many are available (allocation-nodes-min-cap). It has precedence over
	// OldestExcluded. Values below 1 act as 1. Default 1.
	MinAllocationNodes int
	// AbsoluteLimit is the maximum number of shards rebalanced in one round
	// (rebalance-absolute-limit); 0 or less means no absolute limit, as in
	// the proposal's implementation. Default 0.
	AbsoluteLimit int
	// RelativeLimit is the maximum number of shards rebalanced in one round
	// as a fraction of all allocated shards (rebalance-relative-limit). The
	// limit of a round is max(1, min(floor(RelativeLimit*total),
	// AbsoluteLimit)), as for least-shard. Default 0.1.
	RelativeLimit float64
}

// DefaultCoordinatorAvoidanceConfig returns OldestExcluded 1,
// MinAllocationNodes 1, AbsoluteLimit 0 (none) and RelativeLimit 0.1.
func DefaultCoordinatorAvoidanceConfig() CoordinatorAvoidanceConfig {
	return CoordinatorAvoidanceConfig{OldestExcluded: 1, MinAllocationNodes: 1, AbsoluteLimit: 0, RelativeLimit: 0.1}
}

// NewCoordinatorAvoidance returns the coordinator-avoidance strategy of the
// proposal ("Coordinator Avoidance Shard Allocation Strategy"): shards avoid
// the oldest regions, where the coordinator runs, so that stopping the
// oldest node does not lose the coordinator and the shard homes at once.
//
// Which regions may get shards: the available regions (status Up or
// Joining, and reachable) are ranked by age, oldest first (JoinedAt, then
// ID). Of N available regions the oldest min(OldestExcluded, max(0,
// N-MinAllocationNodes)) are excluded, so max(N-OldestExcluded,
// min(N, MinAllocationNodes)) youngest regions are allocation targets; see
// [AllocationTargets]. Regions that are leaving, down or unreachable are
// neither targets nor counted: when the oldest member leaves, the next
// oldest, which takes over the coordinator, is excluded at once.
//
// Allocate picks the target with the fewest shards, then the oldest, then
// the lowest ID; ErrNoRegion when there is no target. App versions are not
// consulted (the proposal leaves that to further work, and preferring the
// newest version would fight rebalance during a rolling update, which the
// proposal's table requires).
//
// Rebalance returns nothing when inProgress is non-empty, when there is no
// target or no shard, or when any region is unreachable, joining, or
// leaving/exiting/down (the proposal's implementation waits for leaves to
// complete: the coordinator may be moving). Otherwise, with T shards in all
// and K targets, optimal is ceil(T/K) for a target and 0 for any other
// region, limit is as for least-shard, and regions are sorted by fewest
// shards, then age, then ID:
//
//   - Phase 1 takes from every region the shards above its optimal (all the
//     shards of an excluded region), from the head of its list,
//     concatenated in region order and capped at limit.
//   - Phase 2, only when phase 1 found nothing, is least-shard's phase 2
//     over the targets: countBelowOptimal = Σ max(0, optimal-1-size); when
//     positive, the head shard of every target with size >= optimal, capped
//     at min(countBelowOptimal, limit).
//
// Repeated rounds therefore empty the excluded regions and leave the targets
// within one shard of each other.
func NewCoordinatorAvoidance(cfg CoordinatorAvoidanceConfig) Strategy {
	cfg.OldestExcluded = max(0, cfg.OldestExcluded)
	cfg.MinAllocationNodes = max(1, cfg.MinAllocationNodes)
	return coordinatorAvoidance{cfg: cfg}
}

type coordinatorAvoidance struct{ cfg CoordinatorAvoidanceConfig }

func (s coordinatorAvoidance) String() string {
	return fmt.Sprintf("CoordinatorAvoidance(excluded=%d, min-cap=%d, absolute=%d, relative=%g)",
		s.cfg.OldestExcluded, s.cfg.MinAllocationNodes, s.cfg.AbsoluteLimit, s.cfg.RelativeLimit)
}

// AllocationTargets returns the IDs of the regions that the
// coordinator-avoidance strategy with these settings allocates shards to,
// youngest last (sorted by age, oldest first). It is the first half of the
// strategy, exported for the coordinator's logs and for tests.
func AllocationTargets(cfg CoordinatorAvoidanceConfig, st State) []cluster.UniqueAddress {
	cfg.OldestExcluded = max(0, cfg.OldestExcluded)
	cfg.MinAllocationNodes = max(1, cfg.MinAllocationNodes)
	var ids []cluster.UniqueAddress
	for _, e := range targets(cfg, entriesOf(st)) {
		ids = append(ids, e.ID)
	}
	return ids
}

// targets returns the allocation targets among es, oldest first.
func targets(cfg CoordinatorAvoidanceConfig, es []entry) []entry {
	var avail []entry
	for _, e := range es {
		if allocatable(e.Region) {
			avail = append(avail, e)
		}
	}
	slices.SortFunc(avail, func(a, b entry) int { return compareAge(a.Region, b.Region) })
	excluded := min(cfg.OldestExcluded, max(0, len(avail)-cfg.MinAllocationNodes))
	return avail[excluded:]
}

// compareLoad orders regions by fewest shards, then oldest, then ID.
func compareLoad(a, b entry) int {
	if c := len(a.shards) - len(b.shards); c != 0 {
		return c
	}
	return compareAge(a.Region, b.Region)
}

func (s coordinatorAvoidance) Allocate(requester cluster.UniqueAddress, shard string, st State) (cluster.UniqueAddress, error) {
	es := entriesOf(st)
	ts := targets(s.cfg, es)
	if len(ts) == 0 {
		return cluster.UniqueAddress{}, fmt.Errorf("%w: shard %q: %d registered regions, none up and reachable", ErrNoRegion, shard, len(es))
	}
	return slices.MinFunc(ts, compareLoad).ID, nil
}

func (s coordinatorAvoidance) Rebalance(st State, inProgress map[string]bool) []string {
	if len(inProgress) > 0 {
		return nil // one rebalance round at a time
	}
	es := entriesOf(st)
	for _, e := range es {
		if !e.Reachable || e.Status != cluster.Up {
			return nil // wait for joins, leaves and reachability to settle
		}
	}
	ts := targets(s.cfg, es)
	total := 0
	for _, e := range es {
		total += len(e.shards)
	}
	if len(ts) == 0 || total == 0 {
		return nil
	}
	isTarget := make(map[cluster.UniqueAddress]bool, len(ts))
	for _, t := range ts {
		isTarget[t.ID] = true
	}
	optimal := (total + len(ts) - 1) / len(ts)
	optimalOf := func(e entry) int {
		if isTarget[e.ID] {
			return optimal
		}
		return 0
	}
	limit := rebalanceLimit(s.cfg.AbsoluteLimit, s.cfg.RelativeLimit, total)
	slices.SortFunc(es, compareLoad)

	// Phase 1: everything above optimal; everything on an excluded region.
	var picked []string
	for _, e := range es {
		if n := len(e.shards) - optimalOf(e); n > 0 {
			picked = append(picked, e.shards[:n]...)
		}
	}
	if len(picked) > 0 {
		return sortedShards(picked[:min(len(picked), limit)])
	}

	// Phase 2: as least-shard, over the targets (excluded regions are empty
	// here, or phase 1 would have picked their shards).
	below := 0
	for _, e := range es {
		if isTarget[e.ID] {
			below += max(0, optimal-1-len(e.shards))
		}
	}
	if below == 0 {
		return nil
	}
	for _, e := range es {
		if isTarget[e.ID] && len(e.shards) >= optimal {
			picked = append(picked, e.shards[0])
		}
	}
	return sortedShards(picked[:min(len(picked), below, limit)])
}
