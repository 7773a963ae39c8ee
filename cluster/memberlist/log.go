package memberlist

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
)

// logWriter carries memberlist's lines to slog (memberlist's *log.Logger
// writes to it), at the level memberlist wrote in them ("[DEBUG]
// memberlist: …"). memberlist logs at [ERR]
// what a graceful leave makes happen: the leaving node's own gossip and
// push/pull racing its shutdown, and the others' exchanges with it cut
// short. Those are expected, so once this node leaves (selfLeaving), or
// when a line names a member that left gracefully (memberLeft), an [ERR]
// line is logged at INFO. A crash still logs at ERROR: only a member that
// announced its leave is remembered.
type logWriter struct {
	logger  *slog.Logger
	leaving atomic.Bool

	mu   sync.Mutex
	gone []string // names and gossip addresses of members that left gracefully, newest last
}

// maxGone bounds the members remembered as gone gracefully.
const maxGone = 64

func newLogWriter(logger *slog.Logger) *logWriter { return &logWriter{logger: logger} }

// selfLeaving: this node leaves gracefully from now on.
func (w *logWriter) selfLeaving() { w.leaving.Store(true) }

// memberLeft: the member name at addr left gracefully.
func (w *logWriter) memberLeft(name, addr string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, k := range []string{name, addr} {
		if k != "" {
			w.gone = append(w.gone, k)
		}
	}
	if over := len(w.gone) - maxGone; over > 0 {
		w.gone = append(w.gone[:0], w.gone[over:]...)
	}
}

// expected reports whether an [ERR] line is the effect of a graceful leave.
func (w *logWriter) expected(line []byte) bool {
	if w.leaving.Load() {
		return true
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, k := range w.gone {
		if bytes.Contains(line, []byte(k)) {
			return true
		}
	}
	return false
}

var logLevels = []struct {
	prefix []byte
	level  slog.Level
}{
	{[]byte("[DEBUG] "), slog.LevelDebug},
	{[]byte("[INFO] "), slog.LevelInfo},
	{[]byte("[WARN] "), slog.LevelWarn},
	{[]byte("[ERR] "), slog.LevelError},
}

func (w *logWriter) Write(p []byte) (int, error) {
	line := bytes.TrimSpace(p)
	level := slog.LevelInfo
	for _, l := range logLevels {
		if rest, ok := bytes.CutPrefix(line, l.prefix); ok {
			line, level = rest, l.level
			break
		}
	}
	var attrs []any
	if level == slog.LevelError && w.expected(line) {
		level, attrs = slog.LevelInfo, []any{"cause", "graceful leave"}
	}
	if w.logger.Enabled(context.Background(), level) {
		w.logger.Log(context.Background(), level, string(line), attrs...)
	}
	return len(p), nil
}
