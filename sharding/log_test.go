package sharding_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/shoal-dev/shoal/sharding"
)

// syncBuffer is a bytes.Buffer safe for the goroutines that log.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) records(t *testing.T) []map[string]any {
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

// A sharding log line about an entity names the node, the entity type,
// the shard and the entity as attributes of their own.
func TestLogLinesNameNodeTypeShardAndEntity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var out syncBuffer
		s := newSim(t, sharding.Settings{})
		s.logger = slog.New(slog.NewJSONHandler(&out, nil))
		n := s.join("a", "host")
		n.tell(t, "e", crash{})
		synctest.Wait()
		var found map[string]any
		for _, r := range out.records(t) {
			if r["msg"] == "sharding: entity failed; restarting after back-off" {
				found = r
			}
		}
		if found == nil {
			t.Fatalf("no back-off line in %v", out.records(t))
		}
		want := map[string]any{"node": "a", "entity_type": "Test", "shard_id": n.region.ShardID("e"), "entity_id": "e"}
		for k, v := range want {
			if found[k] != v {
				t.Errorf("back-off line %v: %s = %v, want %v", found, k, found[k], v)
			}
		}
		_ = n.sh.Shutdown(context.Background())
	})
}
