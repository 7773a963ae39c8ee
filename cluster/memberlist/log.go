package memberlist

import (
	"bytes"
	"context"
	"log"
	"log/slog"
)

// newLogLogger gives memberlist a *log.Logger whose lines reach logger at
// the level memberlist wrote in them ("[DEBUG] memberlist: …").
func newLogLogger(logger *slog.Logger) *log.Logger {
	return log.New(logWriter{logger}, "", 0)
}

type logWriter struct{ logger *slog.Logger }

var logLevels = []struct {
	prefix []byte
	level  slog.Level
}{
	{[]byte("[DEBUG] "), slog.LevelDebug},
	{[]byte("[INFO] "), slog.LevelInfo},
	{[]byte("[WARN] "), slog.LevelWarn},
	{[]byte("[ERR] "), slog.LevelError},
}

func (w logWriter) Write(p []byte) (int, error) {
	line := bytes.TrimSpace(p)
	level := slog.LevelInfo
	for _, l := range logLevels {
		if rest, ok := bytes.CutPrefix(line, l.prefix); ok {
			line, level = rest, l.level
			break
		}
	}
	if w.logger.Enabled(context.Background(), level) {
		w.logger.Log(context.Background(), level, string(line))
	}
	return len(p), nil
}
