package runtime

import (
	"errors"
	"testing"
	"time"
)

// An entity told one message at a time keeps its mailbox's first buffer
// while idle, so the next message allocates none; a burst's buffer goes
// (to its type's spares).
func TestIdleCellKeepsASmallMailbox(t *testing.T) {
	sys, err := NewSystem(Config{NodeID: "n"})
	if err != nil {
		t.Fatal(err)
	}
	handled := make(chan int, 16)
	props := &Props[int]{Key: NewTypeKey[int]("T"), Create: func(Context[int]) Behavior[int] {
		return Receive(func(_ Context[int], m int) Behavior[int] { handled <- m; return Same[int]() })
	}}
	c := Spawn(sys, props, "e")
	idleBuffer := func() int {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			c.mu.Lock()
			idle, n := c.status&scheduled == 0, c.mailbox.Cap()
			c.mu.Unlock()
			if idle {
				return n
			}
			if time.Now().After(deadline) {
				t.Fatal("the cell never went idle")
			}
			time.Sleep(time.Millisecond)
		}
	}
	if err := c.Tell(1); err != nil {
		t.Fatal(err)
	}
	<-handled
	if n := idleBuffer(); n != idleMailbox {
		t.Fatalf("idle after one message: mailbox buffer of %d, want %d kept", n, idleMailbox)
	}
	c.mu.Lock()
	c.status |= suspended // hold the mailbox so that a burst piles up
	c.mu.Unlock()
	for i := range 8 {
		if err := c.Tell(i); err != nil {
			t.Fatal(err)
		}
	}
	c.mu.Lock()
	c.status &^= suspended
	c.mu.Unlock()
	c.post(func() {}) // schedule it again
	for range 8 {
		<-handled
	}
	if n := idleBuffer(); n > idleMailbox {
		t.Fatalf("idle after a burst: mailbox buffer of %d kept", n)
	}
}

// A tick an entity's owner armed for it, still in the mailbox or stash
// when the entity stops or told after it stopped, is dropped; any other
// message left there or told then is a dead letter.
func TestOwnTickLeftAtStopIsNoDeadLetter(t *testing.T) {
	type tick struct{ OwnTick }
	type note struct{}
	for _, tc := range []struct {
		name  string
		msg   any
		stash bool // the entity stashes it; else it stays in the mailbox
		want  uint64
	}{
		{"own tick", tick{}, false, 0},
		{"command", note{}, false, 1},
		{"stashed own tick", tick{}, true, 0},
		{"stashed command", note{}, true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sys, err := NewSystem(Config{NodeID: "n"})
			if err != nil {
				t.Fatal(err)
			}
			stashed := make(chan struct{}, 1)
			props := &Props[any]{Key: NewTypeKey[any]("T"), Create: func(Context[any]) Behavior[any] {
				return Receive(func(ctx Context[any], m any) Behavior[any] {
					if err := ctx.Stash().Stash(m); err != nil {
						t.Error(err)
					}
					stashed <- struct{}{}
					return Same[any]()
				})
			}}
			c := Spawn(sys, props, "e")
			if !tc.stash {
				c.mu.Lock()
				c.status |= suspended // the message stays in the mailbox
				c.mu.Unlock()
			}
			if err := c.Tell(tc.msg); err != nil {
				t.Fatal(err)
			}
			if tc.stash {
				<-stashed
			}
			c.StopNow()
			<-c.Done()
			if got := sys.Stats().DeadLetters; got != tc.want {
				t.Fatalf("left at the stop: %d dead letters, want %d", got, tc.want)
			}
			if err := c.Tell(tc.msg); !errors.Is(err, ErrStopped) {
				t.Fatalf("told after the stop: %v, want ErrStopped", err)
			}
			if got := sys.Stats().DeadLetters; got != 2*tc.want {
				t.Fatalf("told after the stop: %d dead letters, want %d", got, 2*tc.want)
			}
		})
	}
}

// A message an owner tells of its own (TellOwn) is delivered in mailbox
// order, even to a full mailbox; left there when the entity stops, or
// told after it stopped, it is dropped, not counted as a dead letter.
func TestTellOwnLeftAtStopIsNoDeadLetter(t *testing.T) {
	sys, err := NewSystem(Config{NodeID: "n"})
	if err != nil {
		t.Fatal(err)
	}
	handled := make(chan int, 4)
	props := &Props[int]{Key: NewTypeKey[int]("T"), MailboxCapacity: 1, Create: func(Context[int]) Behavior[int] {
		return Receive(func(_ Context[int], m int) Behavior[int] { handled <- m; return Same[int]() })
	}}
	c := Spawn(sys, props, "e")
	c.mu.Lock()
	c.status |= suspended // messages stay in the mailbox
	c.mu.Unlock()
	if err := c.Tell(1); err != nil {
		t.Fatal(err)
	}
	if err := c.Tell(2); !errors.Is(err, ErrMailboxFull) {
		t.Fatalf("told to a full mailbox: %v, want ErrMailboxFull", err)
	}
	if !TellOwn(c, 3) {
		t.Fatal("TellOwn refused by a running entity")
	}
	Resume(c)
	c.post(func() {}) // schedule it again
	if a, b := <-handled, <-handled; a != 1 || b != 3 {
		t.Fatalf("handled %d, %d; want 1, 3", a, b)
	}

	c.mu.Lock()
	c.status |= suspended
	c.mu.Unlock()
	TellOwn(c, 4)
	c.StopNow()
	<-c.Done()
	if got := sys.Stats().DeadLetters; got != 0 {
		t.Fatalf("left in the mailbox: %d dead letters, want 0", got)
	}
	if TellOwn(c, 5) {
		t.Fatal("TellOwn to a stopped entity reported true")
	}
	if got := sys.Stats().DeadLetters; got != 0 {
		t.Fatalf("told after the stop: %d dead letters, want 0", got)
	}
}
