package node_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/node"
	"github.com/shoal-dev/shoal/sharding"
	"github.com/shoal-dev/shoal/sharding/remote"
)

// Ping is answered at once by an echo entity, which persists nothing.
type Ping struct{ ReplyTo entity.ReplyTo[int] }

func (Ping) isCommand() {}

var echoKey = entity.NewTypeKey[Command]("Echo")

func echo(entity.Context[Command]) entity.Behavior[Command] {
	return entity.Receive(func(ctx entity.Context[Command], c Command) entity.Behavior[Command] {
		if p, ok := c.(Ping); ok {
			_ = entity.Reply(ctx, p.ReplyTo, 1)
		}
		return entity.Same[Command]()
	})
}

// BenchmarkAsk asks an echo entity through sharding from node a: one that
// lives on a ("local", the baseline) and one that lives on b ("remote":
// the command and the reply cross the loopback TCP transport).
//
//	go test -run '^$' -bench Ask -count 3 ./node
func BenchmarkAsk(b *testing.B) {
	dsn := pg.MigratedDSN(b)
	withEcho := func(c *node.Config) { codec.MustRegister[Ping](c.Codec, "test.Ping") }
	na := startNode(b, dsn, "bench-a", nil, withEcho)
	nb := startNode(b, dsn, "bench-b", []string{na.GossipAddr()}, withEcho)
	awaitUp(b, []*testNode{na, nb})
	var echoes []*sharding.Region[Command]
	for _, n := range []*testNode{na, nb} {
		r, err := sharding.Init(n.Sharding(), sharding.Entity[Command]{Key: echoKey, Create: echo,
			Settings: sharding.Settings{NumberOfShards: 10, MinMembers: 2}})
		if err != nil {
			b.Fatal(err)
		}
		echoes = append(echoes, r)
	}
	ctx := context.Background()
	ping := func(id string) (int, error) {
		return entity.Ask(ctx, echoes[0].EntityRefFor(id), func(to entity.ReplyTo[int]) Command { return Ping{ReplyTo: to} })
	}
	// One entity on each node, found by where its shard lives.
	ids := map[string]string{}
	for i := 0; len(ids) < 2 && i < 100; i++ {
		id := fmt.Sprintf("echo-%d", i)
		if _, err := ping(id); err != nil {
			b.Fatal(err)
		}
		home := echoes[0].Homes()[echoes[0].ShardID(id)]
		where := "remote"
		if home == remote.NodeName(na.Self()) {
			where = "local"
		}
		if ids[where] == "" {
			ids[where] = id
		}
	}
	for _, where := range []string{"local", "remote"} {
		b.Run(where, func(b *testing.B) {
			id := ids[where]
			if id == "" {
				b.Skipf("no %s entity found", where)
			}
			for b.Loop() {
				if _, err := ping(id); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
