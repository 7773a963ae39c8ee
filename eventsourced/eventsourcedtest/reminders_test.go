package eventsourcedtest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/eventsourced"
	"github.com/shoal-dev/shoal/eventsourced/eventsourcedtest"
	"github.com/shoal-dev/shoal/timers"
	"github.com/shoal-dev/shoal/timers/reminder"
)

type remCmd interface{ isRemCmd() }
type (
	hold    struct{}
	expired struct{ reminder.Delivery }
)

func (hold) isRemCmd()    {}
func (expired) isRemCmd() {}

type remEvent struct{ Expired bool }

var remKey = entity.NewTypeKey[remCmd]("Hold")

func remConfig(ec entity.Context[remCmd]) eventsourced.Config[remCmd, remEvent, bool] {
	return eventsourced.Config[remCmd, remEvent, bool]{
		PersistenceID: eventsourced.PersistenceIDOf(remKey, ec.EntityID()),
		OnCommand: func(ctx eventsourced.CommandContext[remCmd, remEvent, bool], _ bool, c remCmd) eventsourced.Effect[remEvent, bool] {
			switch c.(type) {
			case hold:
				return ctx.Persist(remEvent{}).WithReminders(ctx.RemindAfter("expiry", 15*time.Minute, expired{}))
			case expired:
				return ctx.Persist(remEvent{Expired: true})
			}
			return ctx.Unhandled()
		},
		OnEvent: func(_ eventsourced.Context[remCmd], _ bool, e remEvent) bool { return e.Expired },
	}
}

// The kit runs entities that set reminders: its journal writes them with
// the events into Reminders, which a test inspects; a failed persist sets
// none; a delivery handled is acknowledged.
func TestKitStoresRemindersWithTheEvents(t *testing.T) {
	reg := codec.NewRegistry()
	codec.MustRegister[hold](reg, "hold")
	codec.MustRegister[expired](reg, "expired")
	codec.MustRegister[remEvent](reg, "remEvent")
	codec.MustRegister[bool](reg, "bool")
	clock := timers.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	kit := eventsourcedtest.NewFromConfig(t, remKey, remConfig, eventsourcedtest.Options{Codec: reg, Clock: clock})
	key := reminder.Key{EntityType: "Hold", EntityID: "test-entity", Name: "expiry"}

	kit.Journal().FailNextPersist(errors.New("database gone"))
	kit.ExpectStop()
	kit.RunCommand(hold{})
	if r, ok, _ := kit.Reminders().Get(context.Background(), key); ok {
		t.Fatalf("a failed persist set a reminder: %+v", r)
	}
	kit.Restart()
	kit.RunCommand(hold{})
	r, ok, _ := kit.Reminders().Get(context.Background(), key)
	if !ok || r.ShardID != eventsourcedtest.KitShard || !r.Due.Equal(clock.Now().Add(15*time.Minute)) {
		t.Fatalf("stored %+v %v, want due in 15 minutes on the kit's clock", r, ok)
	}
	res := kit.RunCommand(expired{Delivery: reminder.Delivery{Reminder: key, Generation: r.Generation, Due: r.Due}})
	if !res.State {
		t.Fatalf("state after the delivery: %v, want expired", res.State)
	}
	if r, ok, _ := kit.Reminders().Get(context.Background(), key); ok {
		t.Fatalf("handled one-shot reminder still stored: %+v", r)
	}
}
