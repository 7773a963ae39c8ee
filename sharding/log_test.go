package sharding_test

import (
	"context"
	"log/slog"
	"testing"
	"testing/synctest"

	"github.com/shoal-dev/shoal/internal/logtest"
	"github.com/shoal-dev/shoal/sharding"
)

// A sharding log line about an entity names the node, the entity type,
// the shard and the entity as attributes of their own.
func TestLogLinesNameNodeTypeShardAndEntity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var out logtest.Buffer
		s := newSim(t, sharding.Settings{})
		s.logger = slog.New(slog.NewJSONHandler(&out, nil))
		n := s.join("a", "host")
		n.tell(t, "e", crash{})
		synctest.Wait()
		var found map[string]any
		for _, r := range out.Records(t) {
			if r["msg"] == "sharding: entity failed; restarting after back-off" {
				found = r
			}
		}
		if found == nil {
			t.Fatalf("no back-off line in %v", out.Records(t))
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
