package logtest

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
)

// Recorder is a slog.Handler that keeps the Warn (and higher) records as
// text, "message key=value ...", for tests that count warnings. It is
// safe for the goroutines that log.
type Recorder struct {
	mu    sync.Mutex
	warns []string
}

// Enabled implements slog.Handler: Warn and above.
func (r *Recorder) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }

// Handle implements slog.Handler.
func (r *Recorder) Handle(_ context.Context, rec slog.Record) error {
	var b strings.Builder
	b.WriteString(rec.Message)
	rec.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	r.warns = append(r.warns, b.String())
	return nil
}

// WithAttrs implements slog.Handler; the attributes are not kept.
func (r *Recorder) WithAttrs([]slog.Attr) slog.Handler { return r }

// WithGroup implements slog.Handler; the group is not kept.
func (r *Recorder) WithGroup(string) slog.Handler { return r }

// Warns returns the records kept so far.
func (r *Recorder) Warns() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.warns...)
}

// Containing returns the records kept so far that contain sub.
func (r *Recorder) Containing(sub string) []string {
	var out []string
	for _, w := range r.Warns() {
		if strings.Contains(w, sub) {
			out = append(out, w)
		}
	}
	return out
}

// Count returns how many records kept so far contain sub.
func (r *Recorder) Count(sub string) int { return len(r.Containing(sub)) }
