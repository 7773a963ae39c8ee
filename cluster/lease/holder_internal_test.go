package lease

import (
	"context"
	"strings"
	"testing"
	"time"
)

// hasMonotonic reports whether t carries a monotonic clock reading, which
// Time.String shows as "m=±seconds".
func hasMonotonic(t time.Time) bool { return strings.Contains(t.String(), " m=") }

// A grant time without a monotonic reading (here stripped by UTC, as a
// clock interface or a database driver would) must not leave the fence on
// the wall clock, where a step of the system clock would move it. Outside
// a synctest bubble on purpose: inside one, time.Now has no monotonic
// reading at all.
func TestHoldKeepsTheFenceOnTheMonotonicClock(t *testing.T) {
	if !hasMonotonic(time.Now()) {
		t.Skip("time.Now has no monotonic reading here")
	}
	tm := Timing{Length: time.Hour, RenewEvery: 20 * time.Minute, Margin: time.Minute}
	granted := time.Now().UTC()
	if hasMonotonic(granted) {
		t.Fatal("UTC kept the monotonic reading: the test shows nothing")
	}
	h, err := Hold(tm, granted, func(context.Context) error { return nil }, func(error) {})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Stop()
	h.mu.Lock()
	fenceAt, renewAt := h.keeper.FenceAt(), h.keeper.RenewAt()
	h.mu.Unlock()
	if !hasMonotonic(fenceAt) || !hasMonotonic(renewAt) {
		t.Fatalf("fence at %v, renew at %v: on the wall clock", fenceAt, renewAt)
	}
	if d := fenceAt.Sub(granted); d != tm.Length-tm.Margin {
		t.Fatalf("fence %v after the grant, want %v", d, tm.Length-tm.Margin)
	}
}
