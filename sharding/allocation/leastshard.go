package allocation

import (
	"fmt"
	"github.com/shoal-dev/shoal/cluster"
	"slices"
)

// LeastShardConfig configures [NewLeastShard]. The names follow Akka's
// akka.cluster.sharding.least-shard-allocation-strategy settings.
type LeastShardConfig struct {
	// AbsoluteLimit is the maximum number of shards rebalanced in one round
	// (rebalance-absolute-limit). 0 or less means no absolute limit: only
	// RelativeLimit applies. Default 0.
	//
	// Akka has the same default, 0, but there it selects the pre-2.6.10
	// "deprecated" least-shard strategy (rebalance-threshold /
	// max-simultaneous-rebalance), which Shoal does not implement; plugging
	// 0 into the 2.6.10 formula would cap every round at one shard. Akka
	// users who set a positive value get exactly Akka's behaviour here.
	AbsoluteLimit int
	// RelativeLimit is the maximum number of shards rebalanced in one round
	// as a fraction of the total number of allocated shards
	// (rebalance-relative-limit). Default 0.1. The limit of a round is
	// max(1, min(floor(RelativeLimit*total), AbsoluteLimit)): at least one
	// shard always moves. 0 or less gives a limit of 1; values above 1 act
	// as 1.
	RelativeLimit float64
}

// DefaultLeastShardConfig returns AbsoluteLimit 0 (no absolute limit) and
// RelativeLimit 0.1 (Akka's rebalance-relative-limit default): a round moves
// at most 10% of the shards, and at least one.
func DefaultLeastShardConfig() LeastShardConfig {
	return LeastShardConfig{AbsoluteLimit: 0, RelativeLimit: 0.1}
}

// NewLeastShard returns Akka's least-shard allocation strategy (Akka 2.6.10+,
// akka/akka#29555; Pekko's LeastShardAllocationStrategy with
// AbstractLeastShardAllocationStrategy's app-version mixin).
//
// Allocate picks, among the regions that are not Leaving, Exiting or Down
// and are reachable, the one with the highest AppVersion, then the fewest
// shards, then the oldest member, then the lowest ID. With no such region it
// returns ErrNoRegion (Akka would instead allocate to a leaving region, or
// retry when it knows no member).
//
// Rebalance returns nothing when inProgress is non-empty, when there is no
// region or no shard, or when it is not a good time: the regions do not all
// have the same AppVersion (a rolling update is in progress), or any region
// is unreachable or joining. Otherwise, with total shards T over R regions,
// optimal = ceil(T/R) and limit = max(1, min(floor(RelativeLimit*T),
// AbsoluteLimit)), and the regions sorted as for Allocate (leaving regions
// last, then version, fewest shards, age, ID):
//
//   - Phase 1 takes from every region the shards above optimal, from the head
//     of its list, concatenated in region order and capped at limit.
//   - Phase 2, only when phase 1 found nothing: countBelowOptimal = Σ max(0,
//     optimal-1-size). If it is positive, the head shard of every region with
//     size >= optimal, in region order, capped at min(countBelowOptimal,
//     limit).
//
// One deviation from Akka, which does not change any of Akka's own test
// vectors: Akka's ordering compares two regions whose statuses differ only by
// leaving-or-not and calls, say, a Joining and an Up region equal, which is
// not a total order; here the comparison goes on to version, shards, age and
// ID, so results never depend on input order.
func NewLeastShard(cfg LeastShardConfig) Strategy {
	return leastShard{cfg: cfg}
}

type leastShard struct{ cfg LeastShardConfig }

func (s leastShard) String() string {
	return fmt.Sprintf("LeastShard(absolute=%d, relative=%g)", s.cfg.AbsoluteLimit, s.cfg.RelativeLimit)
}

// compareSuitability is Akka's ShardSuitabilityOrdering made total: not
// leaving first, then highest app version, then fewest shards, then oldest,
// then ID.
func compareSuitability(a, b entry) int {
	if c := compareLeaving(a.Region, b.Region); c != 0 {
		return c
	}
	if c := CompareVersions(b.AppVersion, a.AppVersion); c != 0 {
		return c
	}
	if c := len(a.shards) - len(b.shards); c != 0 {
		return c
	}
	return compareAge(a.Region, b.Region)
}

func (s leastShard) Allocate(requester cluster.UniqueAddress, shard string, st State) (cluster.UniqueAddress, error) {
	var best *entry
	es := entriesOf(st)
	for i := range es {
		if !allocatable(es[i].Region) {
			continue
		}
		if best == nil || compareSuitability(es[i], *best) < 0 {
			best = &es[i]
		}
	}
	if best == nil {
		return cluster.UniqueAddress{}, fmt.Errorf("%w: shard %q: %d registered regions, none up and reachable", ErrNoRegion, shard, len(es))
	}
	return best.ID, nil
}

func (s leastShard) Rebalance(st State, inProgress map[string]bool) []string {
	if len(inProgress) > 0 {
		return nil // one rebalance round at a time
	}
	es := entriesOf(st)
	slices.SortFunc(es, compareSuitability)
	if !goodTimeForLeastShard(es) {
		return nil
	}
	total := 0
	for _, e := range es {
		total += len(e.shards)
	}
	if len(es) == 0 || total == 0 {
		return nil
	}
	optimal := (total + len(es) - 1) / len(es)
	limit := rebalanceLimit(s.cfg.AbsoluteLimit, s.cfg.RelativeLimit, total)

	// Phase 1: everything above optimal.
	var picked []string
	for _, e := range es {
		if n := len(e.shards) - optimal; n > 0 {
			picked = append(picked, e.shards[:n]...)
		}
	}
	if len(picked) > 0 {
		return sortedShards(picked[:min(len(picked), limit)])
	}

	// Phase 2: optimal was rounded up; look for regions at least 2 below it.
	below := 0
	for _, e := range es {
		below += max(0, optimal-1-len(e.shards))
	}
	if below == 0 {
		return nil
	}
	for _, e := range es {
		if len(e.shards) >= optimal {
			picked = append(picked, e.shards[0])
		}
	}
	return sortedShards(picked[:min(len(picked), below, limit)])
}

// goodTimeForLeastShard is Akka's isAGoodTimeToRebalance over the regions:
// at least one region, all with the same app version, none unreachable, none
// joining.
func goodTimeForLeastShard(es []entry) bool {
	if len(es) == 0 {
		return false
	}
	for _, e := range es {
		if CompareVersions(e.AppVersion, es[0].AppVersion) != 0 || !e.Reachable || e.Status == cluster.Joining {
			return false
		}
	}
	return true
}
