package poll_test

import (
	"errors"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/internal/poll"
)

// Within returns once cond holds, having asked until then.
func TestWithinReturnsWhenCondHolds(t *testing.T) {
	calls := 0
	poll.Within(t, time.Minute, "third call", func() error {
		if calls++; calls < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if calls != 3 {
		t.Fatalf("cond called %d times, want 3", calls)
	}
}

// fatal records a Fatalf instead of ending the test.
type fatal struct {
	testing.TB
	msg string
}

func (f *fatal) Helper() {}
func (f *fatal) Fatalf(format string, args ...any) {
	f.msg = format
	panic(f)
}

// Within fails the test once the bound has passed and cond still fails.
func TestWithinFailsAfterTheBound(t *testing.T) {
	f := &fatal{TB: t}
	func() {
		defer func() {
			if r := recover(); r != f {
				t.Fatalf("recovered %v, want the Fatalf", r)
			}
		}()
		poll.Within(f, 0, "never", func() error { return errors.New("no") })
	}()
	if f.msg == "" {
		t.Fatal("no failure reported")
	}
}
