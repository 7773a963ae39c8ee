package lease

import (
	"fmt"
	"time"
)

// Timing is how one kind of lease is held.
type Timing struct {
	// Length is the lease's time to live, counted by the store from each
	// acquisition or renewal.
	Length time.Duration
	// RenewEvery is how long after the start of a successful renewal the
	// holder starts the next one. At most Length/3 (docs/DESIGN.md, "Cluster and leases"), so two
	// renewals can fail before the holder fences itself; the default is
	// Length/4 (see DefaultSettings).
	RenewEvery time.Duration
	// Margin is how long before Length runs out, counted on the holder's
	// own monotonic clock from the start of its last successful renewal,
	// the holder stops acting. It covers the drift between the holder's
	// clock and the store's over one Length and the time fencing takes
	// (stopping shards, a GC pause, a slow scheduler).
	Margin time.Duration
}

// Settings are the lease timings of a cluster. Every node must use the
// same ones.
type Settings struct {
	// Node is the timing of node leases. Its Length bounds how long the
	// shards of a crashed node stay unavailable: they move Length after
	// its last renewal at the latest.
	Node Timing
	// Coordinator is the timing of coordinator leases: failover takes at
	// least Length when the holder dies without releasing.
	Coordinator Timing
}

// DefaultSettings returns the defaults:
//
//	Node:        Length 2s, RenewEvery 500ms, Margin 500ms
//	Coordinator: Length 2s, RenewEvery 500ms, Margin 500ms
//
// The node lease's Length bounds failover: a crashed node's lease expires
// in the store at most Length after its last renewal, and the coordinators
// read the expiry in the store without waiting for the membership's
// failure detector, so its shards serve elsewhere 2 to 3 s after a
// kill -9. The price is tolerance of stalls: a holder that cannot
// complete a renewal for Length − Margin = 1.5 s (a database round trip
// that slow, a stop-the-world pause, a host that does not schedule it)
// fences itself and restarts as a new incarnation. Renewals ride a
// connection of their own, so journal traffic does not delay them; with
// RenewEvery a quarter of Length, a renewal has a whole second to answer
// before the fence time, and a failed one is retried every RenewEvery/4.
// (Renewing every third of Length left a renewal 833 ms, and a healthy
// node beside a busy loop on both cores of an overloaded host fenced
// itself once in ten 20 s runs.) The 500 ms margin dwarfs clock drift
// (ppm over 2 s) and covers the time fencing takes. Akka's lease default
// is 120 s, trading availability for tolerance of long pauses; a
// deployment on hosts that stall for seconds should lengthen Length (and
// so failover) accordingly.
func DefaultSettings() Settings {
	t := Timing{Length: 2 * time.Second, RenewEvery: 500 * time.Millisecond, Margin: 500 * time.Millisecond}
	return Settings{Node: t, Coordinator: t}
}

// Validate checks each timing with Timing.Validate.
func (s Settings) Validate() error {
	for name, t := range map[string]Timing{"Node": s.Node, "Coordinator": s.Coordinator} {
		if err := t.Validate(); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

// Validate checks that the timing leaves the holder time to renew before
// it must fence: 0 < Margin < Length and 0 < RenewEvery < Length − Margin.
// Its error wraps ErrInvalidConfig.
func (t Timing) Validate() error {
	switch {
	case t.Length < time.Microsecond:
		return fmt.Errorf("%w: Length %v is not positive", ErrInvalidConfig, t.Length)
	case t.Margin <= 0 || t.Margin >= t.Length:
		return fmt.Errorf("%w: Margin %v is not within (0, Length %v)", ErrInvalidConfig, t.Margin, t.Length)
	case t.RenewEvery <= 0 || t.RenewEvery >= t.Length-t.Margin:
		return fmt.Errorf("%w: RenewEvery %v is not within (0, Length − Margin = %v)", ErrInvalidConfig, t.RenewEvery, t.Length-t.Margin)
	}
	return nil
}
