// Package poll waits in tests for an outcome another goroutine or process
// brings about, with a bound the outcome meets much sooner on a working
// system: a bound on outcomes, generous for a busy machine, not a measure
// of speed.
package poll

import (
	"testing"
	"time"
)

// every is how often Within asks again.
const every = 50 * time.Millisecond

// Within calls cond until it returns nil, and fails t (naming what and
// cond's last error) when d has passed first.
func Within(t testing.TB, d time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %v", what, d, err)
		}
		time.Sleep(every)
	}
}
