// Package allocation decides where the shards of a sharded entity type live.
//
// A shard allocation strategy answers the two questions the sharding
// coordinator asks:
//
//   - Allocate: a region asked for the home of a shard nobody hosts; which
//     region should host it?
//   - Rebalance: on the periodic rebalance tick, which shards should be handed
//     off now so that they can be allocated again somewhere better?
//
// Strategies here are pure, deterministic functions of their input (a [State]:
// the registered regions with their member information, and the shards each
// one hosts). They keep no state between calls, do no IO, never look at a
// clock, and never depend on Go's map iteration order: equal input gives equal
// output, so a coordinator that persists its decisions can replay them and
// tests can replay whole scenarios.
//
// Two strategies are provided:
//
//   - [NewLeastShard]: Akka's LeastShardAllocationStrategy as of Akka 2.6.10
//     (akka/akka#29555, the same code in Apache Pekko) with its app-version
//     mixin: allocate to the most suitable region (not leaving, newest app
//     version, fewest shards); rebalance in two phases with an absolute and a
//     relative limit per round, and not at all during a rolling update.
//   - [NewCoordinatorAvoidance]: the coordinator-avoidance strategy of the
//     lerna-stack proposal: the oldest regions (where the coordinator
//     singleton runs) get no shards, so that stopping the oldest node never
//     loses the coordinator and shard homes at the same time.
//
// The coordinator calls the strategy; how moved shards are handed off, and
// when a rebalance round is "in progress", is the coordinator's business.
package allocation

import (
	"cmp"
	"errors"
	"github.com/shoal-dev/shoal/cluster"
	"slices"
	"strconv"
	"strings"
)

// ErrNoRegion is returned by Strategy.Allocate when no region can take the
// shard: no region is registered, or every registered region is on its way
// out of the cluster (Leaving, Down) or unreachable, or, for the
// coordinator-avoidance strategy, none is left after the exclusions. The
// coordinator should keep the request pending and ask again when the
// membership changes. Test with errors.Is.
var ErrNoRegion = errors.New("allocation: no region can host the shard")

// leaving reports whether a member with status s is on its way out of the
// cluster (Akka's LeavingClusterStatuses): Leaving or Down. An unknown
// status counts as leaving.
func leaving(s cluster.Status) bool { return s != cluster.Up && s != cluster.Joining }

// Region is one shard region (one per node per entity type) with the
// information about its cluster member that strategies use.
type Region struct {
	// ID identifies the region: the node incarnation it runs on. IDs are
	// unique within a State and the final tie-breaker of every ordering.
	ID cluster.UniqueAddress
	// JoinOrder is the member's age: smaller is older (Akka's upNumber,
	// cluster.Member.JoinOrder). Equal ages are ordered by ID. The oldest
	// member hosts the coordinator.
	JoinOrder uint64
	// AppVersion is the application version of the member (Akka's
	// akka.cluster.app-version), compared as a dotted numeric version:
	// "1.10.0" > "1.9.2", "1.2" == "1.2.0", a pre-release qualifier sorts
	// before the release ("1.0.0-RC1" < "1.0.0"), and "" is the lowest of all.
	// See [CompareVersions].
	AppVersion string
	// Status is the member's membership status: Joining, Up, Leaving or
	// Down. Shards may be allocated to a Joining or Up member, but no
	// rebalance runs while any region is Joining: the join should
	// complete first.
	Status cluster.Status
	// Reachable is false while the failure detector considers the member
	// unreachable. No shard is allocated to an unreachable region and no
	// rebalance runs while any region is unreachable.
	Reachable bool
}

// State is what a strategy decides from: every registered region with its
// member information, and the shards each one hosts.
//
// A region listed in Regions but absent from Shards hosts no shard. Shards
// of a region absent from Regions are ignored, as Akka ignores regions whose
// member it does not know yet. A strategy never modifies a State.
type State struct {
	// Regions is every registered region. Order does not matter; IDs must be
	// unique (a later duplicate is ignored).
	Regions []Region
	// Shards maps a region ID to the shards it hosts, in allocation order
	// (oldest allocation first). Rebalance moves shards from the head of a
	// region's list, as Akka does.
	Shards map[cluster.UniqueAddress][]string
}

// Strategy decides shard placement. Implementations in this package are
// pure, deterministic and safe for concurrent use.
type Strategy interface {
	// Allocate picks the region for an unallocated shard. requester is the
	// region that asked for the shard's home; the strategies here do not
	// prefer it (Akka's do not either) but it is part of the contract for
	// strategies that want to. The error wraps ErrNoRegion when no region can
	// take the shard.
	Allocate(requester cluster.UniqueAddress, shard string, st State) (region cluster.UniqueAddress, err error)
	// Rebalance picks shards to move now, sorted ascending; nil when none.
	// inProgress holds shards already being handed off; the strategies here
	// return nothing while it is non-empty (one rebalance round at a time).
	Rebalance(st State, inProgress map[string]bool) []string
}

// entry is a region with its shards, as the strategies sort it.
type entry struct {
	Region
	shards []string
}

// entriesOf returns one entry per distinct region of st, in the order of
// st.Regions (duplicates dropped).
func entriesOf(st State) []entry {
	out := make([]entry, 0, len(st.Regions))
	seen := make(map[cluster.UniqueAddress]bool, len(st.Regions))
	for _, r := range st.Regions {
		if seen[r.ID] {
			continue
		}
		seen[r.ID] = true
		out = append(out, entry{Region: r, shards: st.Shards[r.ID]})
	}
	return out
}

// compareAge orders regions oldest first, ties by ID.
func compareAge(a, b Region) int {
	if c := cmp.Compare(a.JoinOrder, b.JoinOrder); c != 0 {
		return c
	}
	return a.ID.Compare(b.ID)
}

// compareLeaving orders regions that are not leaving before those that are.
func compareLeaving(a, b Region) int {
	al, bl := leaving(a.Status), leaving(b.Status)
	switch {
	case al == bl:
		return 0
	case al:
		return 1
	default:
		return -1
	}
}

// allocatable reports whether a shard may be allocated to the region.
func allocatable(r Region) bool { return !leaving(r.Status) && r.Reachable }

// rebalanceLimit is Akka's limit per rebalance round:
// max(1, min(floor(relative*total), absolute)), where absolute <= 0 means no
// absolute limit. The float arithmetic is Akka's (a double product truncated
// toward zero), so results match it bit for bit.
func rebalanceLimit(absolute int, relative float64, total int) int {
	rel := int(relative * float64(total))
	if relative <= 0 {
		rel = 0
	}
	l := rel
	if absolute > 0 {
		l = min(l, absolute)
	}
	return max(1, l)
}

// sortedShards returns shards sorted ascending, nil when empty.
func sortedShards(shards []string) []string {
	if len(shards) == 0 {
		return nil
	}
	out := slices.Clone(shards)
	slices.Sort(out)
	return out
}

// CompareVersions compares two application versions and returns -1, 0 or +1.
//
// A version is dot-separated numeric parts, optionally followed by "-" and a
// qualifier: "1.10.0" > "1.9.2"; missing parts are 0 ("1.2" == "1.2.0"); a
// version with a qualifier sorts before the same version without one
// ("2.0.0-RC1" < "2.0.0"), and qualifiers compare as strings. The empty
// version is lower than every other. A part that is not a number compares as
// a string after all numeric parts of the same position. Leading and trailing
// spaces are ignored.
func CompareVersions(a, b string) int {
	a, b = strings.TrimSpace(a), strings.TrimSpace(b)
	switch {
	case a == b:
		return 0
	case a == "":
		return -1
	case b == "":
		return 1
	}
	an, aq, _ := strings.Cut(a, "-")
	bn, bq, _ := strings.Cut(b, "-")
	ap, bp := strings.Split(an, "."), strings.Split(bn, ".")
	for i := range max(len(ap), len(bp)) {
		x, y := "0", "0"
		if i < len(ap) {
			x = ap[i]
		}
		if i < len(bp) {
			y = bp[i]
		}
		if c := comparePart(x, y); c != 0 {
			return c
		}
	}
	switch {
	case aq == bq:
		return 0
	case aq == "":
		return 1
	case bq == "":
		return -1
	}
	return strings.Compare(aq, bq)
}

func comparePart(x, y string) int {
	xi, xerr := strconv.ParseUint(x, 10, 64)
	yi, yerr := strconv.ParseUint(y, 10, 64)
	switch {
	case xerr == nil && yerr == nil:
		return cmp.Compare(xi, yi)
	case xerr == nil:
		return -1
	case yerr == nil:
		return 1
	}
	return strings.Compare(x, y)
}
