package entity_test

import (
	"context"
	"errors"
	"testing"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/internal/runtime"
)

// ReplyAddresses finds the asks a command waits on, at any depth; FailAsk
// fails one at once with the cause, and refuses addresses of other
// incarnations or asks that have ended.
func TestFailAskAndReplyAddresses(t *testing.T) {
	sys := newSystem(t, func(c *entity.Config) { c.NodeID, c.Incarnation = "a", 3 })
	got := make(chan quoteCmd, 1)
	result := make(chan error, 1)
	go func() {
		_, err := entity.Ask(context.Background(), captureRef{sys, got}, func(to entity.ReplyTo[quote]) quoteCmd {
			return askQuote{Symbol: "X", ReplyTo: to}
		})
		result <- err
	}()
	cmd := <-got
	nested := struct{ Inner []quoteCmd }{Inner: []quoteCmd{cmd, releaseQuote{}}}
	addrs := entity.ReplyAddresses(nested)
	if len(addrs) != 1 || addrs[0] != cmd.(askQuote).ReplyTo.Address() {
		t.Fatalf("ReplyAddresses: %v", addrs)
	}
	if entity.ReplyAddresses(releaseQuote{}) != nil {
		t.Fatal("a command without a ReplyTo has reply addresses")
	}
	to := addrs[0]
	other := to
	other.Incarnation++
	if err := runtime.FailAsk(sys, other, errors.New("x")); !errors.Is(err, entity.ErrStaleIncarnation) {
		t.Fatalf("FailAsk of another incarnation: %v", err)
	}
	cause := errors.New("refused over there")
	if err := runtime.FailAsk(sys, to, cause); err != nil {
		t.Fatal(err)
	}
	if err := <-result; !errors.Is(err, cause) {
		t.Fatalf("the ask: %v, want the cause", err)
	}
	if err := runtime.FailAsk(sys, to, cause); !errors.Is(err, entity.ErrAskEnded) {
		t.Fatalf("FailAsk twice: %v, want ErrAskEnded", err)
	}
}
