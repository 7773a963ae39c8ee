package reminders_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/journal/memory"
	"github.com/shoal-dev/shoal/sharding"
	"github.com/shoal-dev/shoal/sharding/reminders"
	"github.com/shoal-dev/shoal/timers/reminder"
	reminderstore "github.com/shoal-dev/shoal/timers/reminder/memory"
)

// lateSampling is a store whose loads reach the database late (a busy
// pool, a loaded machine): it reads its clock wait after the load began,
// and answers at once.
type lateSampling struct {
	*reminderstore.Store
	wait time.Duration
}

func (s lateSampling) Due(ctx context.Context, q reminder.Query) (reminder.Window, error) {
	time.Sleep(s.wait)
	return s.Store.Due(ctx, q)
}

// The database's time is estimated from each load's answer; however late
// in the load the database read its clock, the estimate is never ahead of
// it, so a reminder never fires before it is due.
func TestFiringNeverEarlyWhenTheStoreAnswersLate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := reminderstore.New()
		sys, err := entity.NewSystem(entity.Config{Codec: alarmCodec(), Journal: memory.New(memory.WithSideStore(store)), Reminders: store,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		s, err := sharding.New(sys, sharding.Config{})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Terminate()
		rec := &rings{}
		r, err := sharding.Init(s, sharding.Entity[alarmCmd]{Key: alarmKey, Create: alarmEntity(rec), Settings: sharding.Settings{NumberOfShards: 4}})
		if err != nil {
			t.Fatal(err)
		}
		f, err := reminders.Start(r, sys, reminders.Config{Store: lateSampling{Store: store, wait: 2 * time.Second}})
		if err != nil {
			t.Fatal(err)
		}
		defer f.Stop()
		manifest, payload, err := sys.Codec().Encode(ring{Name: "wake"})
		if err != nil {
			t.Fatal(err)
		}
		due := time.Now().Add(30 * time.Second)
		if err := store.Apply(context.Background(), reminder.Batch{Changes: []reminder.Change{{
			Key: reminder.Key{EntityType: "Alarm", EntityID: "e1", Name: "wake"}, ShardID: r.ShardID("e1"),
			At: due, Manifest: manifest, Payload: payload, Generation: reminder.NewGeneration(),
		}}}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Until(due) - time.Millisecond)
		synctest.Wait()
		if got := rec.list(); len(got) != 0 {
			t.Fatalf("fired before due: %v", got)
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if got := rec.list(); len(got) != 1 {
			t.Fatalf("deliveries %v after due, want one", got)
		}
	})
}
