package eventsourcedtest

import (
	"context"
	"reflect"
	"time"

	"github.com/shoal-dev/shoal/entity"
)

// ReplyProbe is a ReplyTo whose reply the test can wait for after the
// command that carries it has been handled: for replies that come later,
// from a timer, a piped result or another command. One probe takes one reply.
type ReplyProbe[R any] struct {
	t       T
	to      entity.ReplyTo[R]
	answer  chan probeAnswer[R]
	timeout time.Duration
	got     *probeAnswer[R]
}

type probeAnswer[R any] struct {
	r   R
	err error
}

// NewReplyProbe returns a probe for a reply of type R on k's runtime; it
// stops waiting when the test ends.
func NewReplyProbe[R, C, E, S any](k *Kit[C, E, S]) *ReplyProbe[R] {
	k.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	k.t.Cleanup(cancel)
	p := &ReplyProbe[R]{t: k.t, answer: make(chan probeAnswer[R], 1), timeout: k.opts.Timeout}
	addressed := make(chan entity.ReplyTo[R], 1)
	ref := noSend[C]{sys: k.sys}
	go func() {
		// Ask registers the address and waits; the command it would send
		// is dropped: the test sends its own, carrying Ref.
		r, err := entity.Ask(ctx, ref, func(to entity.ReplyTo[R]) C {
			addressed <- to
			var zero C
			return zero
		})
		p.answer <- probeAnswer[R]{r, err}
	}()
	p.to = <-addressed
	return p
}

// noSend is a Ref that accepts a command and drops it.
type noSend[C any] struct{ sys *entity.System }

func (noSend[C]) Tell(C) error             { return nil }
func (r noSend[C]) System() *entity.System { return r.sys }

// Ref is the address to put in a command's ReplyTo.
func (p *ReplyProbe[R]) Ref() entity.ReplyTo[R] { return p.to }

// Replied returns the reply if it has arrived, without waiting.
func (p *ReplyProbe[R]) Replied() (R, bool) {
	if p.got == nil {
		select {
		case a := <-p.answer:
			p.got = &a
		default:
			var zero R
			return zero, false
		}
	}
	return p.got.r, p.got.err == nil
}

// Expect waits for the reply, up to Options.Timeout, and fails the test
// if none comes. Inside a synctest bubble the wait is on the bubble's clock.
func (p *ReplyProbe[R]) Expect() R {
	p.t.Helper()
	if r, ok := p.Replied(); ok {
		return r
	}
	if p.got != nil {
		p.t.Fatalf("eventsourcedtest: reply probe for %v: %v", reflect.TypeFor[R](), p.got.err)
	}
	select {
	case a := <-p.answer:
		p.got = &a
		if a.err != nil {
			p.t.Fatalf("eventsourcedtest: reply probe for %v: %v", reflect.TypeFor[R](), a.err)
		}
		return a.r
	case <-time.After(p.timeout):
		p.t.Fatalf("eventsourcedtest: no %v reply within %v", reflect.TypeFor[R](), p.timeout)
		var zero R
		return zero
	}
}
