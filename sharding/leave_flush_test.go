package sharding_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shoal-dev/shoal/sharding"
)

// heldLink is a node's transport whose messages to other nodes' regions
// wait, in order, while it is held: a slow link, which delivers late
// rather than never. What goes to coordinators passes.
type heldLink struct {
	sharding.Transport
	mu     sync.Mutex
	held   bool
	queued []func() error
}

func (l *heldLink) Send(to sharding.Address, m sharding.Message) error {
	l.mu.Lock()
	if l.held && !to.Coordinator {
		l.queued = append(l.queued, func() error { return l.Transport.Send(to, m) })
		l.mu.Unlock()
		return nil
	}
	l.mu.Unlock()
	return l.Transport.Send(to, m)
}

func (l *heldLink) hold() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.held = true
}

// release delivers what waited, in order, and lets the link go on.
func (l *heldLink) release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for len(l.queued) > 0 {
		send := l.queued[0]
		l.queued = l.queued[1:]
		_ = send()
	}
	l.held = false
}

// A leaving node's Shutdown returns only once the home it forwarded to
// has everything it forwarded there (docs/DESIGN.md, "Graceful leave"):
// with no hand-off running, it returned while its forwards were still on
// a slow link, and a home that handed the shard off or left before they
// came, no longer waiting for a node gone from its view, lost them.
func TestLeaveWaitsUntilItsForwardsArrived(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, sharding.Settings{})
		links := map[string]*heldLink{}
		s.wrap = func(name string, tr sharding.Transport) sharding.Transport {
			links[name] = &heldLink{Transport: tr}
			return links[name]
		}
		a := s.join("a", "host")
		p := s.join("p") // a proxy: it forwards every message
		synctest.Wait()
		p.tell(t, "e1", note{Text: "0"}) // the shard's home is placed
		synctest.Wait()

		links["p"].hold()
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

		links["p"].release()
		if err := <-returned; err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
		if got := a.ask(t, "e1"); !slices.Equal(got, notes(0, 3)) {
			t.Fatalf("e1 got %v, want %v", got, notes(0, 3))
		}
	})
}
