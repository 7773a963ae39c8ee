package sharding_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/sharding"
)

// The default shard of an entity is FNV-1a (32 bit) of its id modulo the
// number of shards, 1000 unless set: stable across processes and releases.
func TestDefaultShardIDIsAStableHashModNumberOfShards(t *testing.T) {
	s := newSim(t, sharding.Settings{})
	n := s.join("a", "host")
	defer n.sh.Terminate()
	for id, want := range map[string]string{"counter-1": "641", "a": "220", "entity-000": "463", "42": "11"} {
		if got := n.region.ShardID(id); got != want {
			t.Errorf("ShardID(%q) = %s, want %s", id, got, want)
		}
	}
	s2 := newSim(t, sharding.Settings{NumberOfShards: 10})
	n2 := s2.join("a", "host")
	defer n2.sh.Terminate()
	for id, want := range map[string]string{"counter-1": "1", "a": "0", "entity-000": "3", "42": "1"} {
		if got := n2.region.ShardID(id); got != want {
			t.Errorf("10 shards: ShardID(%q) = %s, want %s", id, got, want)
		}
	}
	s3 := newSim(t, sharding.Settings{NumberOfShards: 200_000})
	n3 := s3.join("a", "host")
	defer n3.sh.Terminate()
	if got := n3.region.ShardID("counter-1"); got != "68641" {
		t.Errorf("200 000 shards: ShardID(counter-1) = %s, want 68641", got)
	}
}

// A node that crashed and is still listed as a member: the region that
// knows its shard lives there gets a typed error, not a silent loss.
func TestMessageToAStoppedNodeIsATypedError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, sharding.Settings{ShardID: func(id string) string { return id[:1] }})
		a := s.join("a", "host")
		b := s.join("b", "host")
		synctest.Wait()
		a.tell(t, "x1", note{Text: "1"}) // shard x: a (the older of two empty regions)
		synctest.Wait()
		a.tell(t, "y1", note{Text: "1"}) // shard y: b (fewer shards)
		synctest.Wait()
		if sharding.HomesOf(a.region)["y"] != addr("b") {
			t.Fatalf("homes %v", sharding.HomesOf(a.region))
		}
		b.crash()
		err := a.region.EntityRefFor("y2").Tell(note{Text: "lost"})
		if !errors.Is(err, sharding.ErrUnreachable) {
			t.Fatalf("tell to an entity on a crashed node: %v, want ErrUnreachable", err)
		}
		a.sh.Terminate()
	})
}

// The region buffer is bounded during a hand-off too; what it holds is
// delivered at the new home.
func TestBufferOverflowDuringHandOffIsATypedError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, sharding.Settings{NumberOfShards: 1, BufferSize: 3, HandOffTimeout: 10 * time.Second})
		a := s.join("a", "host")
		a.tell(t, "e", note{Text: "0"})
		a.tell(t, "e", slowStop{}) // the hand-off waits for e
		synctest.Wait()
		b := s.join("b", "host")
		synctest.Wait()
		done := make(chan error, 1)
		go func() { done <- a.sh.Shutdown(context.Background()) }()
		synctest.Wait()
		for i := 1; i <= 3; i++ {
			b.tell(t, "e", note{Text: fmt.Sprint(i)})
		}
		if err := b.region.EntityRefFor("e").Tell(note{Text: "4"}); !errors.Is(err, sharding.ErrBufferFull) {
			t.Fatalf("4th message during the hand-off: %v, want ErrBufferFull", err)
		}
		time.Sleep(10 * time.Second)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if got := b.ask(t, "e"); !slices.Equal(got, notes(0, 3)) {
			t.Fatalf("e got %v, want 0..3", got)
		}
		b.sh.Terminate()
	})
}

func TestInitErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, sharding.Settings{})
		n := s.join("a", "host")
		if _, err := sharding.Init(n.sh, sharding.Entity[msg]{Key: key, Create: s.log.create("a")}); err == nil {
			t.Fatal("second Init of one entity type succeeded")
		}
		if _, err := sharding.Init(n.sh, sharding.Entity[msg]{Key: entity.NewTypeKey[msg]("NoCreate")}); err == nil {
			t.Fatal("Init without Create succeeded")
		}
		if _, err := sharding.Lookup(n.sh, entity.NewTypeKey[msg]("Other")); !errors.Is(err, sharding.ErrUnknownEntityType) {
			t.Fatalf("Lookup of an unknown type: %v", err)
		}
		if err := (sharding.EntityRef[msg]{}).Tell(note{}); !errors.Is(err, sharding.ErrUnknownEntityType) {
			t.Fatalf("zero EntityRef: %v", err)
		}
		if err := n.sh.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		if _, err := sharding.Init(n.sh, sharding.Entity[msg]{Key: entity.NewTypeKey[msg]("Late"), Create: s.log.create("a")}); !errors.Is(err, sharding.ErrRegionStopped) {
			t.Fatalf("Init after Shutdown: %v, want ErrRegionStopped", err)
		}
		if err := n.region.StartEntity("x"); !errors.Is(err, sharding.ErrRegionStopped) {
			t.Fatalf("StartEntity after Shutdown: %v", err)
		}
	})
}
