package eventsourced_test

import (
	"context"
	"fmt"
	"time"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/eventsourced"
	"github.com/shoal-dev/shoal/journal/memory"
)

// A Counter: the commands are a sealed interface, the reply address is a
// field of the command that expects one.
type (
	CounterCommand interface{ isCounterCommand() }
	Increment      struct{ By int }
	Get            struct{ ReplyTo entity.ReplyTo[int] }
	Incremented    struct{ By int }
	Counter        struct{ Value int }
)

func (Increment) isCounterCommand() {}
func (Get) isCounterCommand()       {}

var CounterKey = entity.NewTypeKey[CounterCommand]("Counter")

// counterCommand builds effects with the CommandContext's methods: no type
// arguments, and a reply is eventsourced.To(address, value).
func counterCommand(ctx eventsourced.CommandContext[CounterCommand, Incremented, Counter], s Counter, c CounterCommand) eventsourced.Effect[Incremented, Counter] {
	switch c := c.(type) {
	case Increment:
		return ctx.Persist(Incremented{By: c.By})
	case Get:
		return ctx.Reply(eventsourced.To(c.ReplyTo, s.Value))
	}
	return ctx.Unhandled()
}

func NewCounter(ec entity.Context[CounterCommand]) entity.Behavior[CounterCommand] {
	return eventsourced.New(eventsourced.Config[CounterCommand, Incremented, Counter]{
		PersistenceID:   eventsourced.PersistenceIDOf(CounterKey, ec.EntityID()),
		EnforcedReplies: true, // every Get must be answered
		OnCommand:       counterCommand,
		OnEvent: func(_ eventsourced.Context[CounterCommand], s Counter, e Incremented) Counter {
			s.Value += e.By
			return s
		},
	})
}

// A counter persists its increments, answers from its state, and gets its
// state back from the journal when it starts again.
func Example() {
	reg := codec.NewRegistry()
	codec.MustRegister[Incremented](reg, "counter.Incremented")
	sys, err := entity.NewSystem(entity.Config{Codec: reg, Journal: memory.New()})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	get := func(r entity.ReplyTo[int]) CounterCommand { return Get{ReplyTo: r} }
	props := &entity.Props[CounterCommand]{Key: CounterKey, Create: NewCounter}

	counter := entity.Spawn(sys, props, "c1")
	_ = counter.Tell(Increment{By: 2})
	_ = counter.Tell(Increment{By: 3})
	n, err := entity.Ask(ctx, counter, get)
	fmt.Println("value:", n, err)

	counter.StopNow() // a new incarnation recovers from the journal
	<-counter.Done()
	counter = entity.Spawn(sys, props, "c1")
	n, err = entity.Ask(ctx, counter, get)
	fmt.Println("after restart:", n, err)
	// Output:
	// value: 5 <nil>
	// after restart: 5 <nil>
}

// Effects are plain data: a command handler can be checked without running
// an entity, by looking at the effect it returns.
func ExampleEffect() {
	var ctx eventsourced.CommandContext[CounterCommand, Incremented, Counter]
	eff := counterCommand(ctx, Counter{Value: 1}, Increment{By: 2})
	fmt.Println(eff.Kind(), eff.Events(), eff.SideEffects(), eff.DecidesReply())

	eff = counterCommand(ctx, Counter{Value: 1}, Get{})
	fmt.Println(eff.Kind(), eff.Events(), eff.SideEffects(), eff.DecidesReply())

	// Chaining returns a new effect; the one chained from is unchanged.
	base := ctx.Persist(Incremented{By: 1})
	stopping := base.ThenStop()
	fmt.Println(base.SideEffects(), stopping.SideEffects())
	// Output:
	// Persist [{2}] [] false
	// None [] [Reply] true
	// [] [Stop]
}
