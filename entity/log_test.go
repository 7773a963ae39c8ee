package entity_test

import (
	"bytes"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/shoal-dev/shoal/entity"
)

// countingHandler counts the handlers derived from it with WithAttrs.
type countingHandler struct {
	slog.Handler
	derived *atomic.Int64
}

func (h countingHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	h.derived.Add(1)
	return countingHandler{h.Handler.WithAttrs(attrs), h.derived}
}

// An entity's logger writes what Logger.With would, the node, then the
// entity's type and id; taking it without logging asks nothing of the handler, so an
// entity that keeps its logger for a failure that never comes does not pay
// for formatting the two attributes.
func TestEntityLogNamesTheEntityAndCostsNothingUntilUsed(t *testing.T) {
	var out bytes.Buffer
	derived := new(atomic.Int64)
	text := slog.NewTextHandler(&out, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	})
	sys := newSystem(t, func(c *entity.Config) { c.Logger, c.NodeID = slog.New(countingHandler{text, derived}), "n1" })
	derived.Store(0) // the System's own, which names the node

	took := make(chan *slog.Logger, 2)
	handled := make(chan struct{}, 2)
	logs := entity.Spawn(sys, &entity.Props[cmd]{Key: counterKey, Create: func(ctx entity.Context[cmd]) entity.Behavior[cmd] {
		took <- ctx.Log()
		return entity.Receive(func(ctx entity.Context[cmd], c cmd) entity.Behavior[cmd] {
			ctx.Log().Info("one", "n", 1)
			ctx.Log().With("k", "v").WithGroup("g").Warn("two", "n", 2)
			handled <- struct{}{}
			return entity.Same[cmd]()
		})
	}}, "e-1")
	silent := entity.Spawn(sys, &entity.Props[cmd]{Key: counterKey, Create: func(ctx entity.Context[cmd]) entity.Behavior[cmd] {
		took <- ctx.Log()
		return entity.Receive(func(entity.Context[cmd], cmd) entity.Behavior[cmd] {
			handled <- struct{}{}
			return entity.Same[cmd]()
		})
	}}, "e-2")
	<-took
	<-took
	if n := derived.Load(); n != 0 {
		t.Fatalf("taking two loggers derived %d handlers, want 0", n)
	}
	for _, c := range []*entity.Cell[cmd]{logs, silent} {
		_ = c.Tell(add{N: 1})
		<-handled
		c.StopNow()
		<-c.Done()
	}
	want := []string{
		`level=INFO msg=one node=n1 entity_type=counter entity_id=e-1 n=1`,
		`level=WARN msg=two node=n1 entity_type=counter entity_id=e-1 k=v g.n=2`,
	}
	if got := strings.Split(strings.TrimSpace(out.String()), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("log:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if n := derived.Load(); n != 2 { // the entity's attributes once, then k=v
		t.Fatalf("%d handlers derived, want 2", n)
	}
}
