package remote_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"

	"github.com/shoal-dev/shoal/entity/codec"
)

// Add is a user command the tests send across.
type Add struct{ N int }

// Count is a reply.
type Count struct {
	N    int
	Node string
}

func newCodec() *codec.Registry {
	reg := codec.NewRegistry()
	codec.MustRegister[Add](reg, "test.Add")
	codec.MustRegister[Count](reg, "test.Count")
	return reg
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// recorder counts Warn records by message and remembers them.
type recorder struct {
	mu    sync.Mutex
	warns []string
}

func (r *recorder) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	b.WriteString(rec.Message)
	rec.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	r.warns = append(r.warns, b.String())
	return nil
}
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *recorder) WithGroup(string) slog.Handler      { return r }

func (r *recorder) count(sub string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, w := range r.warns {
		if strings.Contains(w, sub) {
			n++
		}
	}
	return n
}
