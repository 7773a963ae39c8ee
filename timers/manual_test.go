package timers_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/timers"
)

var epoch = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func TestManualClockRunsDueCallbacksInOrderAtTheirTime(t *testing.T) {
	c := timers.NewManualClock(epoch)
	var got []string
	at := func(name string) func() {
		return func() { got = append(got, fmt.Sprintf("%s@%v", name, c.Now().Sub(epoch))) }
	}
	c.AfterFunc(3*time.Second, at("c"))
	c.AfterFunc(time.Second, at("a"))
	c.AfterFunc(time.Second, at("a2")) // a tie: in scheduling order
	stopped := c.AfterFunc(2*time.Second, at("stopped"))
	c.AfterFunc(2*time.Second, func() {
		at("b")()
		c.AfterFunc(500*time.Millisecond, at("b+")) // due within this Advance
	})
	c.AfterFunc(time.Hour, at("later"))
	if !stopped.Stop() || stopped.Stop() {
		t.Fatalf("Stop reports true once, for a pending timer")
	}
	if n := c.Pending(); n != 5 {
		t.Fatalf("Pending = %d, want 5", n)
	}
	c.Advance(3 * time.Second)
	want := []string{"a@1s", "a2@1s", "b@2s", "b+@2.5s", "c@3s"}
	if !slices.Equal(got, want) {
		t.Fatalf("ran %v, want %v", got, want)
	}
	if now := c.Now(); !now.Equal(epoch.Add(3 * time.Second)) {
		t.Fatalf("Now = %v after Advance(3s)", now)
	}
	if n := c.Pending(); n != 1 {
		t.Fatalf("Pending = %d, want 1 (the one an hour away)", n)
	}
}

func ExampleManualClock() {
	clock := timers.NewManualClock(time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC))
	clock.AfterFunc(time.Minute, func() { fmt.Println("fired at", clock.Now().Format("15:04")) })
	clock.Advance(59 * time.Second)
	fmt.Println("pending:", clock.Pending())
	clock.Advance(time.Second)
	fmt.Println("pending:", clock.Pending())
	// Output:
	// pending: 1
	// fired at 12:01
	// pending: 0
}
