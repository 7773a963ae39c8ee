package lease

import "time"

// Keeper is the holder's side of one lease: a pure machine that, told when
// each successful acquisition or renewal started, says when to renew next
// and when the holder must fence itself. It reads no clock: every time
// passed in must come from the holder's own monotonic clock (time.Now in
// one process; the simulator's per-node clock), and it only compares those
// times with each other, never with the store's.
//
// Once fenced, a Keeper stays fenced: a node incarnation that stopped its
// shards does not resume, it rejoins as a new incarnation (and a
// coordinator acquires again under a new epoch). A Keeper is not safe for
// concurrent use.
type Keeper struct {
	timing Timing
	start  time.Time // start of the last successful acquisition or renewal
	held   bool
	fenced bool
}

// NewKeeper returns a Keeper that holds nothing yet.
func NewKeeper(t Timing) *Keeper { return &Keeper{timing: t} }

// Granted records that an acquisition or renewal sent at start succeeded,
// learned at now. It reports whether the lease is held: false when the
// Keeper had fenced, or when the answer came too late (now at or past
// start + Length − Margin). An answer older than the last one recorded
// (renewals overlapping) changes nothing.
func (k *Keeper) Granted(start, now time.Time) bool {
	if k.fenced || (k.held && k.Fenced(now)) {
		return false
	}
	if now.Before(start) {
		// A clock that went backwards is not monotonic; count from now.
		start = now
	}
	if !k.held || start.After(k.start) {
		k.start = start
	}
	k.held = true
	return !k.Fenced(now)
}

// Refused records that the store refused a renewal (the incarnation was
// downed, the lease expired or a newer epoch exists): fence at once.
func (k *Keeper) Refused() { k.fenced = true }

// Fenced reports whether the holder must not act at now: nothing held yet,
// refused, or now at or past FenceAt. Once true it stays true.
func (k *Keeper) Fenced(now time.Time) bool {
	if k.fenced {
		return true
	}
	if !k.held {
		return true
	}
	if !now.Before(k.FenceAt()) {
		k.fenced = true
	}
	return k.fenced
}

// Holds reports whether the holder may act at now.
func (k *Keeper) Holds(now time.Time) bool { return !k.Fenced(now) }

// FenceAt is when the holder must stop acting unless a renewal succeeds
// first: the start of the last successful renewal + Length − Margin. Zero
// while nothing is held.
func (k *Keeper) FenceAt() time.Time {
	if !k.held {
		return time.Time{}
	}
	return k.start.Add(k.timing.Length - k.timing.Margin)
}

// RenewAt is when the next renewal should start: the start of the last
// successful one + RenewEvery. Zero while nothing is held.
func (k *Keeper) RenewAt() time.Time {
	if !k.held {
		return time.Time{}
	}
	return k.start.Add(k.timing.RenewEvery)
}
