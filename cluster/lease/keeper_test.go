package lease_test

import (
	"errors"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/cluster/lease"
)

var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

var timing = lease.Timing{Length: 15 * time.Second, RenewEvery: 5 * time.Second, Margin: 3 * time.Second}

func TestKeeperHoldsNothingBeforeGrant(t *testing.T) {
	k := lease.NewKeeper(timing)
	if k.Holds(at(0)) || !k.FenceAt().IsZero() || !k.RenewAt().IsZero() {
		t.Fatalf("a fresh keeper holds: fence %v renew %v", k.FenceAt(), k.RenewAt())
	}
	// Not holding yet does not latch: a grant still works.
	if !k.Granted(at(0), at(time.Second)) {
		t.Fatal("first grant refused")
	}
}

// The fence is counted from the start of the last successful renewal, not
// from when its answer arrived.
func TestKeeperFencesAtStartPlusLengthMinusMargin(t *testing.T) {
	k := lease.NewKeeper(timing)
	if !k.Granted(at(0), at(2*time.Second)) {
		t.Fatal("grant refused")
	}
	if got := k.FenceAt(); !got.Equal(at(12 * time.Second)) {
		t.Fatalf("FenceAt = %v, want start + 15s − 3s", got.Sub(t0))
	}
	if got := k.RenewAt(); !got.Equal(at(5 * time.Second)) {
		t.Fatalf("RenewAt = %v, want start + 5s", got.Sub(t0))
	}
	if !k.Holds(at(12*time.Second - time.Nanosecond)) {
		t.Fatal("fenced before its time")
	}
	if k.Holds(at(12 * time.Second)) {
		t.Fatal("still holding at start + Length − Margin")
	}
}

func TestKeeperRenewalMovesTheFence(t *testing.T) {
	k := lease.NewKeeper(timing)
	k.Granted(at(0), at(time.Second))
	if !k.Granted(at(5*time.Second), at(7*time.Second)) {
		t.Fatal("renewal refused")
	}
	if got := k.FenceAt(); !got.Equal(at(17 * time.Second)) {
		t.Fatalf("FenceAt = %v, want 17s", got.Sub(t0))
	}
	// An older renewal's answer arriving late does not move it back.
	if !k.Granted(at(4*time.Second), at(8*time.Second)) {
		t.Fatal("late older answer refused")
	}
	if got := k.FenceAt(); !got.Equal(at(17 * time.Second)) {
		t.Fatalf("an older answer moved FenceAt to %v", got.Sub(t0))
	}
}

// A renewal whose answer arrives after the fence time does not revive the
// lease: the node has already stopped its shards.
func TestKeeperLateAnswerDoesNotRevive(t *testing.T) {
	k := lease.NewKeeper(timing)
	k.Granted(at(0), at(time.Second))
	if k.Granted(at(11*time.Second), at(12*time.Second)) {
		t.Fatal("an answer at the fence time revived the lease")
	}
	if k.Holds(at(12 * time.Second)) {
		t.Fatal("holds after a late answer")
	}
	if k.Granted(at(13*time.Second), at(13*time.Second)) || k.Holds(at(13*time.Second)) {
		t.Fatal("a fenced keeper was granted again")
	}
}

func TestKeeperRefusedFencesAtOnce(t *testing.T) {
	k := lease.NewKeeper(timing)
	k.Granted(at(0), at(0))
	k.Refused()
	if k.Holds(at(time.Second)) {
		t.Fatal("holds after a refusal")
	}
	if k.Granted(at(2*time.Second), at(2*time.Second)) {
		t.Fatal("granted after a refusal")
	}
}

func TestSettingsValidate(t *testing.T) {
	if err := lease.DefaultSettings().Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	d := lease.DefaultSettings()
	// Two renewals start before the fence time, so that one can fail
	// (docs/DESIGN.md, "Cluster and leases", asks for at most a third; the default renews every
	// quarter, which gives each renewal longer to answer).
	if n := d.Node; 2*n.RenewEvery >= n.Length-n.Margin || n.RenewEvery > n.Length/3 {
		t.Errorf("node RenewEvery %v: want at most Length/3 and two renewals before Length − Margin = %v", n.RenewEvery, n.Length-n.Margin)
	}
	for name, tm := range map[string]lease.Timing{
		"zero length":           {Margin: time.Second, RenewEvery: time.Second},
		"margin ≥ length":       {Length: time.Second, Margin: time.Second, RenewEvery: time.Millisecond},
		"no margin":             {Length: time.Second, RenewEvery: time.Millisecond},
		"renew after the fence": {Length: 10 * time.Second, Margin: 3 * time.Second, RenewEvery: 7 * time.Second},
		"no renewal":            {Length: 10 * time.Second, Margin: 3 * time.Second},
	} {
		s := lease.DefaultSettings()
		s.Coordinator = tm
		if err := s.Validate(); !errors.Is(err, cluster.ErrInvalidConfig) {
			t.Errorf("%s: %v, want ErrInvalidConfig", name, err)
		}
	}
}
