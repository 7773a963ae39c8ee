package sharding_test

import (
	"context"
	"fmt"
	"time"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/sharding"
)

// The entity: a greeter that remembers the last name it was told.
type (
	GreeterCommand interface{ isGreeterCommand() }
	SetName        struct {
		Name    string
		ReplyTo entity.ReplyTo[string] // answered once the name is set
	}
	Greet struct{ ReplyTo entity.ReplyTo[string] }
)

func (SetName) isGreeterCommand() {}
func (Greet) isGreeterCommand()   {}

var GreeterKey = entity.NewTypeKey[GreeterCommand]("Greeter")

func NewGreeter(ec entity.Context[GreeterCommand]) entity.Behavior[GreeterCommand] {
	name := "nobody"
	return entity.Receive(func(ctx entity.Context[GreeterCommand], c GreeterCommand) entity.Behavior[GreeterCommand] {
		switch c := c.(type) {
		case SetName:
			name = c.Name
			entity.Reply(ctx, c.ReplyTo, "set")
		case Greet:
			entity.Reply(ctx, c.ReplyTo, fmt.Sprintf("hello %s, from %s", name, ctx.EntityID()))
		}
		return entity.Same[GreeterCommand]()
	})
}

// Two nodes in one process: a name set through one node and a greeting
// asked through the other reach the same entity, wherever its shard lives
// (sys.NodeID() in the entity would say where). Messages sent through
// different nodes are not ordered with each other, so the name is asked
// for, not told: the greeting goes once the name is known to be set.
func ExampleInProcessCluster() {
	cluster := sharding.NewInProcessCluster()
	// What crosses between nodes is encoded, as over a network: the
	// commands, and the replies (strings).
	reg := codec.NewRegistry()
	codec.MustRegister[SetName](reg, "example.SetName")
	codec.MustRegister[Greet](reg, "example.Greet")
	codec.MustRegister[string](reg, "example.string")
	var nodes []*sharding.Sharding
	for _, name := range []string{"a", "b"} {
		// Event-sourced entities would also share a journal here (entity.Config.Journal).
		sys, err := entity.NewSystem(entity.Config{NodeID: name, Codec: reg})
		if err != nil {
			panic(err)
		}
		node, err := cluster.Join(sys)
		if err != nil {
			panic(err)
		}
		if _, err := sharding.Init(node, sharding.Entity[GreeterCommand]{Key: GreeterKey, Create: NewGreeter}); err != nil {
			panic(err)
		}
		nodes = append(nodes, node)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	onA, _ := sharding.EntityRefFor(nodes[0], GreeterKey, "greeter-1")
	if _, err := entity.Ask(ctx, onA, func(r entity.ReplyTo[string]) GreeterCommand { return SetName{Name: "Ada", ReplyTo: r} }); err != nil {
		panic(err)
	}
	onB, _ := sharding.EntityRefFor(nodes[1], GreeterKey, "greeter-1")
	greeting, err := entity.Ask(ctx, onB, func(r entity.ReplyTo[string]) GreeterCommand { return Greet{ReplyTo: r} })
	if err != nil {
		panic(err)
	}
	fmt.Println(greeting)

	for _, n := range nodes {
		if err := n.Shutdown(ctx); err != nil {
			panic(err)
		}
	}
	// Output:
	// hello Ada, from greeter-1
}
