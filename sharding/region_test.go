package sharding_test

import (
	"context"
	"testing"
	"testing/synctest"

	"github.com/shoal-dev/shoal/sharding"
)

// A region asks for shard homes only once the coordinator has its
// registration, so a message sent the moment a node starts is not placed
// as if that node did not exist.
func TestRegionAsksForHomesOnlyOnceRegistered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, sharding.Settings{ShardID: func(id string) string { return id[:1] }})
		a := s.join("a", "host")
		a.tell(t, "x1", note{Text: "1"}) // a hosts one shard
		synctest.Wait()
		b := s.join("b", "host")
		b.tell(t, "y1", note{Text: "1"}) // at once: b's registration is still on its way
		synctest.Wait()
		if home := b.region.Homes()["y"]; home != "b" {
			t.Fatalf("shard y placed on %q, want b (the region with fewer shards)", home)
		}
		_ = b.sh.Shutdown(context.Background())
		_ = a.sh.Shutdown(context.Background())
	})
}
