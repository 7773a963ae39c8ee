// Package logtest collects the JSON log records a test's code writes, so a
// test can assert on their attributes.
package logtest

import (
	"bytes"
	"encoding/json"
	"sync"
	"testing"
)

// Buffer is an io.Writer for slog.NewJSONHandler, safe for the goroutines
// that log.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// Records decodes every record written so far; a line that is not JSON
// fails the test.
func (b *Buffer) Records(t testing.TB) []map[string]any {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	dec := json.NewDecoder(bytes.NewReader(b.buf.Bytes()))
	for dec.More() {
		var r map[string]any
		if err := dec.Decode(&r); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}
