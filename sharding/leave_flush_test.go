package sharding_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shoal-dev/shoal/sharding"
)

// A leaving node's Shutdown returns only once the home it forwarded to
// has everything it forwarded there (docs/DESIGN.md, "Graceful leave"):
// with no hand-off running, it returned while its forwards were still on
// a slow link, and a home that handed the shard off or left before they
// came, no longer waiting for a node gone from its view, lost them.
func TestLeaveWaitsUntilItsForwardsArrived(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, sharding.Settings{})
		a := s.join("a", "host")
		p := s.join("p") // a proxy: it forwards every message
		synctest.Wait()
		p.tell(t, "e1", note{Text: "0"}) // the shard's home is placed
		synctest.Wait()

		s.net.Hold(addr("p"), addr("a")) // a slow link, which delivers late rather than never
		for i := 1; i <= 3; i++ {
			p.tell(t, "e1", note{Text: fmt.Sprint(i)})
		}
		returned := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			returned <- p.sh.Shutdown(ctx)
		}()
		time.Sleep(10 * time.Second) // several retry ticks
		synctest.Wait()
		select {
		case err := <-returned:
			t.Fatalf("Shutdown returned (%v) with its forwards still on the link", err)
		default:
		}

		s.net.Release(addr("p"), addr("a"))
		if err := <-returned; err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
		if got := a.ask(t, "e1"); !slices.Equal(got, notes(0, 3)) {
			t.Fatalf("e1 got %v, want %v", got, notes(0, 3))
		}
	})
}
