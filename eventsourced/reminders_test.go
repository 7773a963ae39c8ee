package eventsourced_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/eventsourced"
	"github.com/shoal-dev/shoal/internal/poll"
	"github.com/shoal-dev/shoal/journal"
	"github.com/shoal-dev/shoal/journal/memory"
	"github.com/shoal-dev/shoal/timers/reminder"
	reminders "github.com/shoal-dev/shoal/timers/reminder/memory"
)

// The alarm entity sets, cancels and handles reminders.
type alarmCmd interface{ isAlarmCmd() }

type (
	arm struct {
		Name    string
		After   time.Duration
		Every   time.Duration
		ReplyTo entity.ReplyTo[int]
	}
	disarm struct {
		Name    string
		ReplyTo entity.ReplyTo[int]
	}
	// ring is what the reminder delivers; it persists an event.
	ring struct {
		reminder.Delivery
		Name string
	}
	// peek is delivered too, and handled without an event.
	peek struct {
		reminder.Delivery
	}
	alarmCount struct{ ReplyTo entity.ReplyTo[int] }
)

func (arm) isAlarmCmd()        {}
func (disarm) isAlarmCmd()     {}
func (ring) isAlarmCmd()       {}
func (peek) isAlarmCmd()       {}
func (alarmCount) isAlarmCmd() {}

type (
	armed struct{ Name string }
	rang  struct{ Name string }
)

var alarmKey = entity.NewTypeKey[alarmCmd]("Alarm")

func alarmCodec() *codec.Registry {
	r := codec.NewRegistry()
	codec.MustRegister[arm](r, "arm")
	codec.MustRegister[disarm](r, "disarm")
	codec.MustRegister[ring](r, "ring")
	codec.MustRegister[peek](r, "peek")
	codec.MustRegister[alarmCount](r, "alarmCount")
	codec.MustRegister[armed](r, "armed")
	codec.MustRegister[rang](r, "rang")
	return r
}

func alarmEntity(ctx entity.Context[alarmCmd]) entity.Behavior[alarmCmd] {
	type E = any
	return eventsourced.New(eventsourced.Config[alarmCmd, E, int]{
		PersistenceID: eventsourced.PersistenceIDOf(alarmKey, ctx.EntityID()),
		OnCommand: func(ctx eventsourced.CommandContext[alarmCmd, E, int], n int, c alarmCmd) eventsourced.Effect[E, int] {
			switch c := c.(type) {
			case arm:
				r := ctx.RemindAfter(c.Name, c.After, ring{Name: c.Name})
				if c.Every > 0 {
					r = ctx.RemindEvery(c.Name, c.After, c.Every, ring{Name: c.Name})
				}
				return ctx.Persist(armed{Name: c.Name}).WithReminders(r).ThenReply(eventsourced.To(c.ReplyTo, n))
			case disarm:
				return ctx.None().WithReminders(ctx.CancelReminder(c.Name)).ThenReply(eventsourced.To(c.ReplyTo, n))
			case ring:
				return ctx.Persist(rang{Name: c.Name})
			case peek:
				return ctx.None()
			case alarmCount:
				return ctx.Reply(eventsourced.To(c.ReplyTo, n))
			}
			return ctx.Unhandled()
		},
		OnEvent: func(_ eventsourced.Context[alarmCmd], n int, e E) int {
			if _, ok := e.(rang); ok {
				return n + 1
			}
			return n
		},
	})
}

// shardOwner is the owner of an entity in shard "7".
type shardOwner struct{}

func (shardOwner) Passivate(c *entity.Cell[alarmCmd])    { c.Stop() }
func (shardOwner) Stopped(*entity.Cell[alarmCmd], error) {}
func (shardOwner) ShardID() string                       { return "7" }
func (shardOwner) String() string                        { return "shard 7" }
func alarmProps() *entity.Props[alarmCmd] {
	return &entity.Props[alarmCmd]{Key: alarmKey, Create: alarmEntity, Owner: shardOwner{}}
}
func alarmSystem(t *testing.T, j journal.Journal, store reminder.Store) *entity.System {
	t.Helper()
	sys, err := entity.NewSystem(entity.Config{Codec: alarmCodec(), Journal: j, Reminders: store, Logger: quietLogger(), ForceSerialization: true})
	if err != nil {
		t.Fatal(err)
	}
	return sys
}

func ask(t *testing.T, ref entity.Ref[alarmCmd], build func(entity.ReplyTo[int]) alarmCmd) (int, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return entity.Ask(ctx, ref, build)
}

func getReminder(t *testing.T, s reminder.Store, id, name string) (reminder.Reminder, bool) {
	t.Helper()
	r, ok, err := s.Get(context.Background(), reminder.Key{EntityType: "Alarm", EntityID: id, Name: name})
	if err != nil {
		t.Fatal(err)
	}
	return r, ok
}

func TestEffectSetsReminderWithItsEvents(t *testing.T) {
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	store := reminders.New(reminders.WithClock(func() time.Time { return clock }))
	sys := alarmSystem(t, memory.New(memory.WithSideStore(store)), store)
	a := entity.Spawn(sys, alarmProps(), "a")
	if _, err := ask(t, a, func(r entity.ReplyTo[int]) alarmCmd { return arm{Name: "wake", After: time.Minute, ReplyTo: r} }); err != nil {
		t.Fatal(err)
	}
	r, ok := getReminder(t, store, "a", "wake")
	if !ok || r.ShardID != "7" || !r.Due.Equal(clock.Add(time.Minute)) || r.Manifest != "ring" || r.Period != 0 {
		t.Fatalf("stored reminder %+v %v, want ring due a minute after the store's now in shard 7", r, ok)
	}
	cmd, err := codec.DecodeAs[ring](sys.Codec(), r.Manifest, r.Payload)
	if err != nil || cmd.Name != "wake" {
		t.Fatalf("the reminder's command decodes to %+v (%v)", cmd, err)
	}
	// Setting the name again replaces it.
	if _, err := ask(t, a, func(r entity.ReplyTo[int]) alarmCmd { return arm{Name: "wake", After: time.Hour, ReplyTo: r} }); err != nil {
		t.Fatal(err)
	}
	if r2, _ := getReminder(t, store, "a", "wake"); !r2.Due.Equal(clock.Add(time.Hour)) || r2.Generation == r.Generation {
		t.Fatalf("set again: %+v, want due in an hour with a new generation", r2)
	}
	// Cancelled by an effect without events.
	if _, err := ask(t, a, func(r entity.ReplyTo[int]) alarmCmd { return disarm{Name: "wake", ReplyTo: r} }); err != nil {
		t.Fatal(err)
	}
	if r, ok := getReminder(t, store, "a", "wake"); ok {
		t.Fatalf("cancelled reminder still stored: %+v", r)
	}
}

// A delivery handled with events is acknowledged in their transaction: a
// one-shot reminder is gone, a periodic one advanced, once.
func TestDeliveryIsAcknowledgedWithTheHandlersEvents(t *testing.T) {
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	store := reminders.New(reminders.WithClock(func() time.Time { return clock }))
	sys := alarmSystem(t, memory.New(memory.WithSideStore(store)), store)
	a := entity.Spawn(sys, alarmProps(), "a")
	for _, c := range []arm{{Name: "once", After: time.Second}, {Name: "tick", After: time.Second, Every: time.Minute}} {
		if _, err := ask(t, a, func(r entity.ReplyTo[int]) alarmCmd { c.ReplyTo = r; return c }); err != nil {
			t.Fatal(err)
		}
	}
	once, _ := getReminder(t, store, "a", "once")
	tick, _ := getReminder(t, store, "a", "tick")
	clock = clock.Add(3 * time.Minute) // the periodic one missed three ticks
	deliver := func(r reminder.Reminder) {
		_ = a.Tell(ring{Delivery: reminder.Delivery{Reminder: r.Key, Generation: r.Generation, Due: r.Due}, Name: r.Name})
	}
	deliver(once)
	deliver(tick)
	deliver(tick) // delivered twice: at least once
	n, err := ask(t, a, func(r entity.ReplyTo[int]) alarmCmd { return alarmCount{ReplyTo: r} })
	if err != nil || n != 3 {
		t.Fatalf("handled %d deliveries (%v), want 3", n, err)
	}
	if r, ok := getReminder(t, store, "a", "once"); ok {
		t.Fatalf("handled one-shot reminder still stored: %+v", r)
	}
	r, _ := getReminder(t, store, "a", "tick")
	if want := tick.Due.Add(3 * time.Minute); !r.Due.Equal(want) || r.Generation == tick.Generation {
		t.Fatalf("periodic reminder after its delivery was handled twice: %+v, want due %v (advanced once, past the missed ticks)", r, want)
	}
	// Handled without events: acknowledged right after.
	clock = clock.Add(time.Hour)
	_ = a.Tell(peek{Delivery: reminder.Delivery{Reminder: r.Key, Generation: r.Generation, Due: r.Due}})
	poll.Within(t, 10*time.Second, "the acknowledgement of a delivery handled without events", func() error {
		if r2, _ := getReminder(t, store, "a", "tick"); r2.Generation == r.Generation {
			return errors.New("not acknowledged")
		}
		return nil
	})
}

// failingJournal fails every write, as a database that went away would.
type failingJournal struct{ *memory.Journal }

func (failingJournal) WriteAsyncWithSide(_ []journal.Event, _ journal.Side, done func(error)) {
	done(errors.New("database gone"))
}

// A failed persist sets nothing: the reminder goes with the events.
func TestFailedPersistSetsNoReminder(t *testing.T) {
	store := reminders.New()
	sys := alarmSystem(t, failingJournal{memory.New(memory.WithSideStore(store))}, store)
	a := entity.Spawn(sys, alarmProps(), "a")
	if _, err := ask(t, a, func(r entity.ReplyTo[int]) alarmCmd { return arm{Name: "wake", After: time.Minute, ReplyTo: r} }); err == nil {
		t.Fatal("the ask of a failed persist succeeded")
	}
	<-a.Done()
	if !errors.Is(a.Err(), eventsourced.ErrPersistFailed) {
		t.Fatalf("stopped with %v, want ErrPersistFailed", a.Err())
	}
	if r, ok := getReminder(t, store, "a", "wake"); ok {
		t.Fatalf("a failed persist set a reminder: %+v", r)
	}

	// A write conflict (another incarnation wrote first) sets nothing either.
	j := memory.New(memory.WithSideStore(store))
	sys = alarmSystem(t, j, store)
	b := entity.Spawn(sys, alarmProps(), "b")
	if _, err := ask(t, b, func(r entity.ReplyTo[int]) alarmCmd { return alarmCount{ReplyTo: r} }); err != nil {
		t.Fatal(err)
	}
	if err := j.Write(context.Background(), []journal.Event{{PersistenceID: "Alarm|b", SeqNr: 1, Manifest: "armed", Payload: []byte(`{}`)}}); err != nil {
		t.Fatal(err)
	}
	_ = b.Tell(arm{Name: "wake", After: time.Minute})
	<-b.Done()
	if !errors.Is(b.Err(), eventsourced.ErrWriteConflict) {
		t.Fatalf("stopped with %v, want ErrWriteConflict", b.Err())
	}
	if r, ok := getReminder(t, store, "b", "wake"); ok {
		t.Fatalf("a conflicting persist set a reminder: %+v", r)
	}
}

// An effect with reminders on a journal that cannot write them in its
// transaction is refused, not written half.
func TestRemindersNeedASideWritingJournal(t *testing.T) {
	store := reminders.New()
	sys := alarmSystem(t, memory.New(), store) // no side store
	a := entity.Spawn(sys, alarmProps(), "a")
	_, _ = ask(t, a, func(r entity.ReplyTo[int]) alarmCmd { return arm{Name: "wake", After: time.Minute, ReplyTo: r} })
	<-a.Done()
	if !errors.Is(a.Err(), eventsourced.ErrNoReminderStore) || !errors.Is(a.Err(), eventsourced.ErrPersistRejected) {
		t.Fatalf("stopped with %v, want ErrNoReminderStore, rejected", a.Err())
	}
	if _, ok := getReminder(t, store, "a", "wake"); ok {
		t.Fatal("reminder stored without its events")
	}
	// Outside a shard the reminder has no home to fire from: refused.
	sys = alarmSystem(t, memory.New(memory.WithSideStore(store)), store)
	b := entity.Spawn(sys, &entity.Props[alarmCmd]{Key: alarmKey, Create: alarmEntity}, "b")
	_ = b.Tell(arm{Name: "wake", After: time.Minute})
	<-b.Done()
	if !errors.Is(b.Err(), reminder.ErrInvalid) {
		t.Fatalf("unsharded entity stopped with %v, want reminder.ErrInvalid", b.Err())
	}
}
