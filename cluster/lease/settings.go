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
	// holder starts the next one. Default Length/3, so two renewals
	// can fail before the holder fences itself.
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
//	Node:        Length 15s, RenewEvery 5s, Margin 3s
//	Coordinator: Length 15s, RenewEvery 5s, Margin 3s
//
// 15 s sits above memberlist's LAN failure detection (4 s, up to 24 s
// without confirmations), so a node is downed in
// about the time its lease takes to run out, and well below Akka's 120 s
// lease default, which trades availability for tolerance of long pauses.
// The 3 s margin dwarfs clock drift (ppm over 15 s) and leaves room for a
// stop-the-world pause while fencing.
func DefaultSettings() Settings {
	t := Timing{Length: 15 * time.Second, RenewEvery: 5 * time.Second, Margin: 3 * time.Second}
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
