package entity_test

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/internal/runtime"
	"github.com/shoal-dev/shoal/stash"
)

// stasher: while closed it stashes every number; "open" opens and unstashes
// (after waiting on gate, if set), "close" closes. In picky mode odd numbers
// are stashed again while redelivered, and "4" turns picky off and unstashes.
type stasher struct {
	gate     chan struct{}
	handled  *recorder[string]
	errs     *recorder[error]
	stashLen *recorder[int]
}

func (s *stasher) spawn(sys *entity.System, capacity int) *entity.Cell[string] {
	open, picky := true, false
	return spawnFunc(sys, "stasher", func(ctx entity.Context[string], m string) entity.Behavior[string] {
		switch m {
		case "close":
			open = false
			return entity.Same[string]()
		case "open", "picky-open":
			if s.gate != nil {
				<-s.gate
			}
			open, picky = true, m == "picky-open"
			ctx.Stash().UnstashAll()
			return entity.Same[string]()
		case "open-suspended": // open and unstash, but hold the mailbox first
			open = true
			runtime.Suspend(ctx.(*entity.Cell[string]))
			ctx.Stash().UnstashAll()
			return entity.Same[string]()
		case "unstash-closed": // hand everything back while still closed
			ctx.Stash().UnstashAll()
			return entity.Same[string]()
		case "len":
			s.stashLen.add(ctx.Stash().Len())
			return entity.Same[string]()
		case "stop": // stashed while closed, as a shard's stop message during work
			if open {
				return entity.Stopped[string]()
			}
		}
		n, _ := strconv.Atoi(m)
		if !open || picky && n%2 == 1 {
			if err := ctx.Stash().Stash(m); err != nil {
				s.errs.add(err)
			}
			return entity.Same[string]()
		}
		s.handled.add(m)
		if picky && m == "4" {
			picky = false
			ctx.Stash().UnstashAll() // nested: while earlier unstashed mail is still pending
		}
		return entity.Same[string]()
	}, func(p *entity.Props[string]) { p.StashCapacity = capacity })
}

func newStasher() *stasher {
	return &stasher{handled: &recorder[string]{}, errs: &recorder[error]{}, stashLen: &recorder[int]{}}
}

func tellAll(t *testing.T, c *entity.Cell[string], msgs ...string) {
	t.Helper()
	for _, m := range msgs {
		mustTell(t, c, m)
	}
}

// Messages that arrive while the entity is unstashing — already in the
// mailbox when UnstashAll runs — are handled after every unstashed one.
func TestUnstashedBeforeNewerMailbox(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sys := newSystem(t, func(c *entity.Config) { c.Throughput = 2 }) // yields in the middle of unstashing
		s := newStasher()
		s.gate = make(chan struct{})
		c := s.spawn(sys, 100)
		tellAll(t, c, "close", "1", "2", "3", "4", "5", "open")
		synctest.Wait() // "open" waits on the gate; newer mail arrives now
		tellAll(t, c, "6", "7")
		close(s.gate)
		synctest.Wait()
		if got, want := s.handled.get(), strings.Fields("1 2 3 4 5 6 7"); !slices.Equal(got, want) {
			t.Fatalf("handled %v, want %v", got, want)
		}
		c.StopNow()
		<-c.Done()
	})
}

func TestStashFullThroughEntity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sys := newSystem(t)
		s := newStasher()
		c := s.spawn(sys, 3)
		tellAll(t, c, "close", "1", "2", "3", "4", "5", "len", "open")
		synctest.Wait()
		errs := s.errs.get()
		if len(errs) != 2 {
			t.Fatalf("%d stash errors, want 2: %v", len(errs), errs)
		}
		for _, err := range errs {
			if !errors.Is(err, stash.ErrFull) {
				t.Fatalf("err = %v, want ErrFull", err)
			}
		}
		if got := s.stashLen.get(); !slices.Equal(got, []int{3}) {
			t.Fatalf("stash len %v, want [3]", got)
		}
		if got, want := s.handled.get(), strings.Fields("1 2 3"); !slices.Equal(got, want) {
			t.Fatalf("handled %v, want %v (earlier items kept)", got, want)
		}
		c.StopNow()
		<-c.Done()
	})
}

// Everything handed back while still closed is stashed again, in order,
// and comes out in the original order when the entity opens.
func TestRestashDuringUnstashKeepsOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sys := newSystem(t, func(c *entity.Config) { c.Throughput = 3 })
		s := newStasher()
		c := s.spawn(sys, 100)
		tellAll(t, c, "close", "1", "2", "3", "4", "unstash-closed", "len", "5", "len", "open", "6")
		synctest.Wait()
		if got := s.stashLen.get(); !slices.Equal(got, []int{4, 5}) {
			t.Fatalf("stash len %v, want [4 5]", got)
		}
		if got, want := s.handled.get(), strings.Fields("1 2 3 4 5 6"); !slices.Equal(got, want) {
			t.Fatalf("handled %v, want %v", got, want)
		}
		c.StopNow()
		<-c.Done()
	})
}

// While unstashing 1..6 in picky mode, odd numbers are stashed again; 4
// unstashes them again (nested) while 5 and 6 are still pending. The
// re-stashed 1 and 3 come back in their original order, ahead of the
// still-pending 5 and 6, and all of them before newer mail.
func TestNestedUnstashAllKeepsOriginalOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sys := newSystem(t, func(c *entity.Config) { c.Throughput = 2 })
		s := newStasher()
		s.gate = make(chan struct{})
		c := s.spawn(sys, 100)
		tellAll(t, c, "close", "1", "2", "3", "4", "5", "6", "picky-open")
		synctest.Wait()
		tellAll(t, c, "7", "8")
		close(s.gate)
		synctest.Wait()
		if got, want := s.handled.get(), strings.Fields("2 4 1 3 5 6 7 8"); !slices.Equal(got, want) {
			t.Fatalf("handled %v, want %v", got, want)
		}
		c.StopNow()
		<-c.Done()
	})
}

// Unstashed messages are held, like the mailbox, while the entity is
// suspended; runtime work posted meanwhile still runs.
func TestUnstashedMessagesWaitWhileSuspended(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sys := newSystem(t)
		s := newStasher()
		c := s.spawn(sys, 100)
		tellAll(t, c, "close", "1", "2", "open-suspended", "3")
		synctest.Wait()
		ran := false
		runtime.Post(c, func() { ran = true })
		synctest.Wait()
		if !ran {
			t.Fatal("posted work did not run while suspended")
		}
		if got := s.handled.get(); len(got) != 0 {
			t.Fatalf("handled %v while suspended", got)
		}
		runtime.Post(c, func() { runtime.Resume(c) })
		synctest.Wait()
		if got, want := s.handled.get(), strings.Fields("1 2 3"); !slices.Equal(got, want) {
			t.Fatalf("handled %v after Resume, want %v", got, want)
		}
		c.StopNow()
		<-c.Done()
	})
}

// Messages handed back by UnstashAll but not yet handled when the entity
// stops are, like mail left in the mailbox, dead letters.
func TestUnstashedButUnhandledAtStopAreDeadLetters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sys := newSystem(t)
		s := newStasher()
		c := s.spawn(sys, 100)
		tellAll(t, c, "close", "stop", "1", "2", "3", "open")
		synctest.Wait()
		<-c.Done()
		if got := sys.DeadLetters(); got != 3 {
			t.Fatalf("dead letters %d, want 3 (1, 2, 3 were unstashed behind stop)", got)
		}
	})
}

func TestStashUnstashLarge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sys := newSystem(t, func(c *entity.Config) { c.Throughput = 7 })
		s := newStasher()
		c := s.spawn(sys, 0) // default capacity
		mustTell(t, c, "close")
		var want []string
		for i := range 1000 {
			m := fmt.Sprint(i * 2) // even: not affected by picky mode
			want = append(want, m)
			mustTell(t, c, m)
		}
		mustTell(t, c, "open")
		for i := range 10 {
			m := fmt.Sprint(2000 + i*2)
			want = append(want, m)
			mustTell(t, c, m)
		}
		synctest.Wait()
		if got := s.handled.get(); !slices.Equal(got, want) {
			t.Fatalf("handled %d messages, order broken (first %v)", len(got), got[:min(10, len(got))])
		}
		c.StopNow()
		<-c.Done()
	})
}
