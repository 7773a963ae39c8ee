package entity_test

import (
	"context"
	"fmt"
	"time"

	"github.com/shoal-dev/shoal/entity"
)

// A counter: Add is told, Get is asked. Its state lives in the closure of
// its incarnation (an event-sourced entity keeps it in its events instead).
type (
	CounterCommand interface{ isCounterCommand() }
	Add            struct{ N int }
	Get            struct{ ReplyTo entity.ReplyTo[int] }
)

func (Add) isCounterCommand() {}
func (Get) isCounterCommand() {}

var CounterKey = entity.NewTypeKey[CounterCommand]("Counter")

func NewCounter(entity.Context[CounterCommand]) entity.Behavior[CounterCommand] {
	total := 0
	return entity.Receive(func(ctx entity.Context[CounterCommand], c CounterCommand) entity.Behavior[CounterCommand] {
		switch c := c.(type) {
		case Add:
			total += c.N
		case Get:
			entity.Reply(ctx, c.ReplyTo, total)
		}
		return entity.Same[CounterCommand]()
	})
}

// One entity on a runtime of its own: messages are handled one at a time,
// in order, so the ask sees both adds. Under sharding, sharding.Init and
// EntityRefFor take the place of Spawn.
func Example() {
	sys, err := entity.NewSystem(entity.Config{})
	if err != nil {
		panic(err)
	}
	counter := entity.Spawn(sys, &entity.Props[CounterCommand]{Key: CounterKey, Create: NewCounter}, "counter-1")
	_ = counter.Tell(Add{N: 2})
	_ = counter.Tell(Add{N: 3})

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	total, err := entity.Ask(ctx, counter, func(r entity.ReplyTo[int]) CounterCommand { return Get{ReplyTo: r} })
	fmt.Println(total, err)

	counter.StopNow()
	<-counter.Done()
	// Output:
	// 5 <nil>
}
