package memberlist

import (
	"math"
	"time"

	ml "github.com/hashicorp/memberlist"
)

// MinDowningStableAfter is the floor of DowningStableAfter: sharding's
// former fixed default, and Pekko's advice for a cluster of ten. It covers
// what the timing model leaves out (a paused process, a loaded machine,
// the view's way from memberlist to the coordinator), which no setting
// bounds; fast test timings would otherwise derive a fraction of a second.
const MinDowningStableAfter = 10 * time.Second

// CutSpread bounds the time between this node's memberlist declaring the
// first and the last member of one cut failed, in a cluster of n members
// with this timing: how long a view may show only part of the other side
// of a partition. The model (hashicorp/memberlist v0.7.0):
//
//   - Detection. This node probes one member per ProbeInterval, round
//     robin over the others in an order it reshuffles every round
//     (state.go probe, resetNodes), so a member probed just before the cut
//     may be probed next at the end of the following round: after the
//     tick under way, 2n−3 probes, the last its own. A failed probe lasts
//     its whole interval, which Lifeguard's awareness stretches to
//     (score+1) × ProbeInterval (state.go probeNode, awareness.go); each
//     failed probe raises the score by at most IndirectChecks (the helpers
//     that did not nack, and helpers on the other side never do), up to
//     AwarenessMaxMultiplier−1. So the i-th probe lasts at most
//     min(8, 1 + i × IndirectChecks) × ProbeInterval, and
//     detect = ProbeInterval × (1 + Σ_{i<2n−3} min(8, 1 + i×IndirectChecks)).
//     Peers on this side may suspect a member sooner and gossip it, never
//     later than this node's own probe.
//   - Suspicion. A suspect is declared failed min = SuspicionMult ×
//     max(1, log10 n) × ProbeInterval after its first suspicion once
//     k = SuspicionMult−2 peers confirmed it, and after max =
//     SuspicionMaxTimeoutMult × min without confirmations (util.go
//     suspicionTimeout; state.go suspectNode; suspicion.go). k is 0, and
//     every timeout min, when k < 1 or n−2 < k. Confirmations are gossip
//     to random members, those of the other side too, so one member's may
//     be lost while another's arrive at once.
//
// CutSpread is detect + (max − min): the first member suspected at the cut
// and confirmed at once, the last suspected detect later and never
// confirmed. It is a worst case: with several probers on this side and
// little awareness, cuts are usually seen whole much sooner. n < 2 has
// nothing to cut: 0.
func (t Timing) CutSpread(n int) time.Duration {
	if n < 2 {
		return 0
	}
	maxScale := int64(ml.DefaultLANConfig().AwarenessMaxMultiplier) // the config memberlistConfig starts from
	scales := int64(1)                                              // the tick under way at the cut
	for i := range int64(2*n - 3) {
		scales += min(maxScale, 1+i*int64(max(t.IndirectChecks, 1)))
	}
	detect := time.Duration(scales) * t.ProbeInterval
	return detect + t.suspicionMax(n) - t.suspicionMin(n)
}

// suspicionMin is memberlist's suspicionTimeout (util.go).
func (t Timing) suspicionMin(n int) time.Duration {
	scale := math.Max(1, math.Log10(math.Max(1, float64(n))))
	return time.Duration(t.SuspicionMult) * time.Duration(scale*1000) * t.ProbeInterval / 1000
}

// suspicionMax is the longest suspicion timeout: min when memberlist asks
// for no confirmations (state.go suspectNode; suspicion.go newSuspicion).
func (t Timing) suspicionMax(n int) time.Duration {
	if k := t.SuspicionMult - 2; k < 1 || n-2 < k {
		return t.suspicionMin(n)
	}
	return time.Duration(t.SuspicionMaxTimeoutMult) * t.suspicionMin(n)
}

// DowningStableAfter is a keep-majority stable-after (sharding's
// Settings.DowningStableAfter) for a cluster of up to n members with this
// timing: longer than CutSpread(n) by a ProbeInterval (a view that
// arrives just after the bound), and at least MinDowningStableAfter.
// CutSpread grows with n (the probe round), so derive it for the largest
// size the cluster is planned for.
func (t Timing) DowningStableAfter(n int) time.Duration {
	return max(MinDowningStableAfter, t.CutSpread(n)+t.ProbeInterval)
}
