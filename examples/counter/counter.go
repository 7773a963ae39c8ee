package main

import (
	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/eventsourced"
)

// Command is what a Counter accepts: a sealed set, switched on by type.
type Command interface{ isCommand() }

// Increment adds By to the counter.
type Increment struct{ By int }

// Get asks for the current value.
type Get struct{ ReplyTo entity.ReplyTo[int] }

// Stop is the Counter's stop message.
type Stop struct{}

func (Increment) isCommand() {}
func (Get) isCommand()       {}
func (Stop) isCommand()      {}

// Event is what a Counter persists.
type Event interface{ isEvent() }

// Incremented records one Increment.
type Incremented struct{ By int }

func (Incremented) isEvent() {}

// State is the Counter's value.
type State struct{ Value int }

// CounterKey is the Counter entity type.
var CounterKey = entity.NewTypeKey[Command]("Counter")

// NewCounter builds a Counter incarnation.
func NewCounter(ec entity.Context[Command]) entity.Behavior[Command] {
	return eventsourced.New(eventsourced.Config[Command, Event, State]{
		PersistenceID: eventsourced.PersistenceIDOf(CounterKey, ec.EntityID()),
		EmptyState:    State{},
		OnCommand: func(ctx eventsourced.CommandContext[Command, Event, State], s State, c Command) eventsourced.Effect[Event, State] {
			switch c := c.(type) {
			case Increment:
				return ctx.Persist(Incremented{By: c.By})
			case Get:
				return ctx.Reply(eventsourced.To(c.ReplyTo, s.Value))
			case Stop:
				return ctx.Stop()
			}
			return ctx.Unhandled()
		},
		OnEvent: func(ctx eventsourced.Context[Command], s State, e Event) State {
			switch e := e.(type) {
			case Incremented:
				s.Value += e.By
			}
			return s
		},
	})
}

// Register binds the Counter's messages, events and state to stable names.
func Register(r *codec.Registry) {
	codec.MustRegister[Increment](r, "counter.Increment")
	codec.MustRegister[Get](r, "counter.Get")
	codec.MustRegister[Stop](r, "counter.Stop")
	codec.MustRegister[Incremented](r, "counter.Incremented")
	codec.MustRegister[State](r, "counter.State")
}
