package main

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/eventsourced"
	"github.com/shoal-dev/shoal/sharding"
)

// The counter is a second, minimal entity type for the cluster's fault
// tests (-counter): an event-sourced integer with an add that answers the
// new value and a read. Payments answer only "done" or "failed", which
// says too little for a linearizability check; a counter's answers pin
// down the order in which its operations took effect.
//
//	POST /counter/{id}/add?by=N   200 {"value": V}  V is the value after the add
//	GET  /counter/{id}            200 {"value": V}
//
// A failed ask answers 503 (the entity is unavailable: nothing was done)
// or 500 (unknown: the add may or may not have taken effect).

// CounterKey is the counter entity type.
var CounterKey = entity.NewTypeKey[CounterCommand]("counter")

// CounterCommand is what a counter accepts.
type CounterCommand interface{ isCounterCommand() }

// CounterAdd adds By and answers the new value.
type CounterAdd struct {
	By      int64
	ReplyTo entity.ReplyTo[int64]
}

// CounterRead answers the value.
type CounterRead struct{ ReplyTo entity.ReplyTo[int64] }

// CounterStop is the counter's stop message (passivation, hand-off).
type CounterStop struct{}

func (CounterAdd) isCounterCommand()  {}
func (CounterRead) isCounterCommand() {}
func (CounterStop) isCounterCommand() {}

// CounterAdded is the counter's one event.
type CounterAdded struct{ By int64 }

// registerCounter binds the counter's messages to stable manifests.
func registerCounter(r *codec.Registry) {
	codec.MustRegister[CounterAdd](r, "counter.Add")
	codec.MustRegister[CounterRead](r, "counter.Read")
	codec.MustRegister[CounterStop](r, "counter.Stop")
	codec.MustRegister[CounterAdded](r, "counter.Added")
}

// InitCounters starts counter entities on sh; activations, when set,
// records their lifecycle.
func InitCounters(sh *sharding.Sharding, activations *ActivationLog, minMembers int) (*sharding.Region[CounterCommand], error) {
	return sharding.Init(sh, sharding.Entity[CounterCommand]{
		Key: CounterKey,
		Create: func(ec entity.Context[CounterCommand]) entity.Behavior[CounterCommand] {
			return eventsourced.New(eventsourced.Config[CounterCommand, CounterAdded, int64]{
				PersistenceID: eventsourced.PersistenceIDOf(CounterKey, ec.EntityID()),
				OnCommand:     counterCommand,
				OnEvent: func(_ eventsourced.Context[CounterCommand], s int64, e CounterAdded) int64 {
					return s + e.By
				},
				OnSignal: func(ctx eventsourced.Context[CounterCommand], _ int64, sig eventsourced.Signal) {
					activations.Observe(CounterKey.Name(), ctx.EntityID(), sig)
				},
			})
		},
		StopMessage: CounterStop{},
		// Remembered: a shard restarts its counters when it starts, so
		// tests can see remember-entities survive a full cluster restart.
		Settings: sharding.Settings{NumberOfShards: 20, PassivateIdleAfter: -1, MinMembers: minMembers, RememberEntities: true},
	})
}

func counterCommand(ctx eventsourced.CommandContext[CounterCommand, CounterAdded, int64], s int64, c CounterCommand) eventsourced.Effect[CounterAdded, int64] {
	switch c := c.(type) {
	case CounterAdd:
		return ctx.Persist(CounterAdded{By: c.By}).ThenReplyFrom(func(s int64) eventsourced.Answer { return eventsourced.To(c.ReplyTo, s) })
	case CounterRead:
		return ctx.Reply(eventsourced.To(c.ReplyTo, s))
	case CounterStop:
		return ctx.Stop()
	}
	return ctx.Unhandled()
}

// counterAPI serves the counter endpoints.
type counterAPI struct {
	counters   *sharding.Region[CounterCommand]
	askTimeout time.Duration
}

func (a counterAPI) register(mux *http.ServeMux) {
	mux.HandleFunc("POST /counter/{id}/add", a.add)
	mux.HandleFunc("GET /counter/{id}", a.read)
}

func (a counterAPI) add(w http.ResponseWriter, r *http.Request) {
	by, err := strconv.ParseInt(r.URL.Query().Get("by"), 10, 64)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, errorBody{Code: string(CodeValidation), Message: "by must be an integer"})
		return
	}
	a.ask(w, r, func(to entity.ReplyTo[int64]) CounterCommand { return CounterAdd{By: by, ReplyTo: to} })
}

func (a counterAPI) read(w http.ResponseWriter, r *http.Request) {
	a.ask(w, r, func(to entity.ReplyTo[int64]) CounterCommand { return CounterRead{ReplyTo: to} })
}

// counterBody is a counter's answer.
type counterBody struct {
	Value int64 `json:"value"`
}

func (a counterAPI) ask(w http.ResponseWriter, r *http.Request, build func(entity.ReplyTo[int64]) CounterCommand) {
	id := r.PathValue("id")
	if id == "" || len(id) > 64 || !alphanumeric(id) {
		writeFailure(w, ValidationFailure("counter id must be 1 to 64 alphanumeric characters"))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), a.askTimeout)
	defer cancel()
	v, err := entity.Ask(ctx, a.counters.EntityRefFor(id), build)
	if retryAfter, ok := unavailable(err); ok {
		writeUnavailable(w, retryAfter)
		return
	}
	if err != nil {
		writeFailure(w, Unpredictable())
		return
	}
	writeJSON(w, http.StatusOK, counterBody{Value: v})
}
