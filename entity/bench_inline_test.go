package entity_test

import (
	"context"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/entity"
)

// inlineRef answers a get as it is told, on the asker's goroutine.
type inlineRef struct{ sys *entity.System }

func (r inlineRef) Tell(m cmd) error {
	if g, ok := m.(get); ok {
		entity.Reply(r.sys, g.ReplyTo, 1)
	}
	return nil
}

func (r inlineRef) System() *entity.System { return r.sys }

// BenchmarkAskInline measures an Ask's own bookkeeping (register, build
// the address, reply, deliver, unregister) without the scheduling of an
// entity, whose wake-ups dominate BenchmarkAsk and make it noisy.
func BenchmarkAskInline(b *testing.B) {
	for name, ctx := range map[string]func() (context.Context, context.CancelFunc){
		"deadline=none": func() (context.Context, context.CancelFunc) { return context.Background(), func() {} },
		"deadline=1h": func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), time.Hour)
		},
	} {
		b.Run(name, func(b *testing.B) {
			ref := inlineRef{sys: newSystem(b)}
			ctx, cancel := ctx()
			defer cancel()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := entity.Ask(ctx, ref, func(r entity.ReplyTo[int]) cmd { return get{ReplyTo: r} }); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
