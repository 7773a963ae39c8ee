package sharding_test

import (
	"errors"
	"slices"
	"testing"
	"testing/synctest"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/sharding"
)

// With forced serialization, sharding's own protocol stays local while
// every entity message makes a codec round trip; one that cannot fails
// the sender's Tell with the codec's error instead of waiting in a buffer.
func TestShardingUnderForcedSerialization(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := codec.NewRegistry()
		codec.MustRegister[note](reg, "note")
		codec.MustRegister[get](reg, "get")
		sys, err := entity.NewSystem(entity.Config{NodeID: "a", Codec: reg, ForceSerialization: true, Logger: quiet()})
		if err != nil {
			t.Fatal(err)
		}
		sh, err := sharding.New(sys, sharding.Config{})
		if err != nil {
			t.Fatal(err)
		}
		defer sh.Terminate()
		log := newJournal()
		r, err := sharding.Init(sh, sharding.Entity[msg]{Key: key, Create: log.create("a"), StopMessage: stop{}})
		if err != nil {
			t.Fatal(err)
		}
		n := &node{name: "a", sys: sys, sh: sh, region: r}
		n.tell(t, "e", note{Text: "1"})
		synctest.Wait()
		if err := r.EntityRefFor("e").Tell(passivate{}); !errors.Is(err, codec.ErrUnregisteredType) {
			t.Fatalf("Tell of an unregistered type to a running entity: %v, want ErrUnregisteredType", err)
		}
		n.tell(t, "e", note{Text: "2"})
		if got := n.ask(t, "e"); !slices.Equal(got, []string{"1", "2"}) {
			t.Fatalf("entity got %v", got)
		}
	})
}
