package sharding_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/sharding"
)

func TestInProcessClusterRefusesATakenNodeName(t *testing.T) {
	c := sharding.NewInProcessCluster()
	for i, want := range []error{nil, sharding.ErrNodeNameTaken} {
		sys, err := entity.NewSystem(entity.Config{NodeID: "a", Logger: quiet()})
		if err != nil {
			t.Fatal(err)
		}
		sh, err := c.Join(sys)
		if !errors.Is(err, want) {
			t.Fatalf("join %d: err %v, want %v", i, err, want)
		}
		if sh != nil {
			t.Cleanup(func() { _ = sh.Shutdown(t.Context()) })
		}
	}
}

// Commands of the entity that TestInProcessClusterEncodesWhatCrossesNodes
// asks: where registered in the nodes' codec, and one that is not.
type (
	whereCmd interface{ isWhereCmd() }
	whereAsk struct{ ReplyTo entity.ReplyTo[string] }
	// unknownToCodec is registered nowhere.
	unknownToCodec struct{ N int }
)

func (whereAsk) isWhereCmd()       {}
func (unknownToCodec) isWhereCmd() {}

var whereKey = entity.NewTypeKey[whereCmd]("Where")

// The nodes of an InProcessCluster talk over a cluster/inproc network:
// what crosses from one node to another is encoded as over a socket, so a
// command the codec does not know fails its Tell with
// codec.ErrUnregisteredType instead of slipping through as a value, while
// one it knows arrives and is answered; within a node, values pass as
// they are.
func TestInProcessClusterEncodesWhatCrossesNodes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := sharding.NewInProcessCluster()
		reg := codec.NewRegistry()
		codec.MustRegister[whereAsk](reg, "test.WhereAsk")
		codec.MustRegister[string](reg, "test.string")
		var regions []*sharding.Region[whereCmd]
		for _, name := range []string{"a", "b"} {
			sys, err := entity.NewSystem(entity.Config{NodeID: name, Codec: reg, Logger: quiet()})
			if err != nil {
				t.Fatal(err)
			}
			sh, err := c.Join(sys)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = sh.Shutdown(context.Background()) })
			r, err := sharding.Init(sh, sharding.Entity[whereCmd]{Key: whereKey, Create: func(entity.Context[whereCmd]) entity.Behavior[whereCmd] {
				return entity.Receive(func(ctx entity.Context[whereCmd], m whereCmd) entity.Behavior[whereCmd] {
					if a, ok := m.(whereAsk); ok {
						_ = entity.Reply(ctx, a.ReplyTo, name)
					}
					return entity.Same[whereCmd]()
				})
			}})
			if err != nil {
				t.Fatal(err)
			}
			regions = append(regions, r)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		where := func(id string) string {
			got, err := entity.Ask(ctx, regions[0].EntityRefFor(id), func(to entity.ReplyTo[string]) whereCmd { return whereAsk{ReplyTo: to} })
			if err != nil {
				t.Fatalf("ask %s: %v", id, err)
			}
			return got
		}
		var onA, onB string
		for i := 0; onA == "" || onB == ""; i++ {
			if i == 200 {
				t.Fatalf("no entity found on both nodes (a: %q, b: %q)", onA, onB)
			}
			id := fmt.Sprintf("w%d", i)
			switch where(id) {
			case "a":
				onA = id
			case "b":
				onB = id
			}
		}
		if err := regions[0].EntityRefFor(onB).Tell(unknownToCodec{N: 1}); !errors.Is(err, codec.ErrUnregisteredType) {
			t.Fatalf("tell of an unregistered type to an entity on the other node: %v, want codec.ErrUnregisteredType", err)
		}
		if err := regions[0].EntityRefFor(onA).Tell(unknownToCodec{N: 1}); err != nil {
			t.Fatalf("tell of an unregistered type within the node: %v", err)
		}
	})
}
