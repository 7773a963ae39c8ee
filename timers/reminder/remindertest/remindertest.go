// Package remindertest is the conformance suite every reminder.Store
// passes.
//
//	func TestConformance(t *testing.T) {
//		remindertest.Run(t, func(t *testing.T) reminder.Store { return memory.New() })
//	}
//
// The constructor is called once per subtest; it may return a shared store
// (every subtest uses entity types of its own).
package remindertest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/timers/reminder"
)

// Run runs the suite as subtests of t.
func Run(t *testing.T, newStore func(t *testing.T) reminder.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s reminder.Store, typ string)
	}{
		{"SetGetReplace", testSetGetReplace},
		{"Cancel", testCancel},
		{"RelativeDueOnStoreClock", testRelativeDue},
		{"DueWindowByShard", testDueWindow},
		{"AckOneShotRemoves", testAckOneShot},
		{"AckStaleGenerationChangesNothing", testAckStale},
		{"AckPeriodicAdvancesOnceForMissedTicks", testAckPeriodic},
		{"ConcurrentAcksAdvanceOnce", testConcurrentAcks},
		{"InvalidBatchStoresNothing", testInvalidBatch},
		{"LaterChangeOfAKeyWins", testLaterChangeWins},
		{"Stats", testStats},
		{"DueShards", testDueShards},
		{"Observer", testObserver},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t)
			tc.fn(t, s, fmt.Sprintf("%s-%d", tc.name, time.Now().UnixNano()))
		})
	}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// set is a one-shot change of (typ, id, name) in shard "1", due at at.
func set(typ, id, name string, at time.Time, payload string) reminder.Change {
	return reminder.Change{
		Key:     reminder.Key{EntityType: typ, EntityID: id, Name: name},
		ShardID: "1", At: at, Manifest: "cmd", Payload: []byte(payload),
		Generation: reminder.NewGeneration(),
	}
}

func apply(t *testing.T, s reminder.Store, b reminder.Batch) {
	t.Helper()
	if err := s.Apply(ctx(t), b); err != nil {
		t.Fatalf("Apply: %v", err)
	}
}

func get(t *testing.T, s reminder.Store, k reminder.Key) (reminder.Reminder, bool) {
	t.Helper()
	r, ok, err := s.Get(ctx(t), k)
	if err != nil {
		t.Fatalf("Get %s: %v", k, err)
	}
	return r, ok
}

func now(t *testing.T, s reminder.Store) time.Time {
	t.Helper()
	n, err := s.Now(ctx(t))
	if err != nil {
		t.Fatalf("Now: %v", err)
	}
	return n
}

func testSetGetReplace(t *testing.T, s reminder.Store, typ string) {
	at := now(t, s).Add(time.Hour).Truncate(time.Microsecond)
	c := set(typ, "a", "r", at, "one")
	c.Period = time.Minute
	apply(t, s, reminder.Batch{Changes: []reminder.Change{c}})
	r, ok := get(t, s, c.Key)
	if !ok || r.ShardID != "1" || !r.Due.Equal(at) || r.Period != time.Minute || r.Manifest != "cmd" || string(r.Payload) != "one" || r.Generation != c.Generation {
		t.Fatalf("got %+v %v, want the change %+v", r, ok, c)
	}
	again := set(typ, "a", "r", at.Add(time.Hour), "two")
	again.ShardID = "2"
	apply(t, s, reminder.Batch{Changes: []reminder.Change{again}})
	r, _ = get(t, s, c.Key)
	if string(r.Payload) != "two" || r.Generation != again.Generation || r.Period != 0 || r.ShardID != "2" || !r.Due.Equal(at.Add(time.Hour)) {
		t.Fatalf("set again: got %+v, want it replaced by %+v", r, again)
	}
	w, err := s.Due(ctx(t), reminder.Query{EntityType: typ, Shards: []string{"1", "2"}, Within: 3 * time.Hour})
	if err != nil || len(w.Reminders) != 1 {
		t.Fatalf("Due after replacing: %v %v, want the one reminder", w.Reminders, err)
	}
	// Names are per entity.
	other := set(typ, "b", "r", at, "b's")
	apply(t, s, reminder.Batch{Changes: []reminder.Change{other}})
	if r, _ := get(t, s, c.Key); string(r.Payload) != "two" {
		t.Fatalf("another entity's reminder of the same name replaced a's: %+v", r)
	}
}

func testCancel(t *testing.T, s reminder.Store, typ string) {
	c := set(typ, "a", "r", now(t, s).Add(time.Hour), "x")
	apply(t, s, reminder.Batch{Changes: []reminder.Change{c}})
	apply(t, s, reminder.Batch{Changes: []reminder.Change{{Key: c.Key, Cancel: true}}})
	if r, ok := get(t, s, c.Key); ok {
		t.Fatalf("cancelled reminder still stored: %+v", r)
	}
	// Cancelling what is not there is no error.
	apply(t, s, reminder.Batch{Changes: []reminder.Change{{Key: c.Key, Cancel: true}}})
}

func testRelativeDue(t *testing.T, s reminder.Store, typ string) {
	before := now(t, s)
	c := set(typ, "a", "r", time.Time{}, "x")
	c.After = 10 * time.Minute
	apply(t, s, reminder.Batch{Changes: []reminder.Change{c}})
	after := now(t, s)
	r, _ := get(t, s, c.Key)
	if r.Due.Before(before.Add(c.After).Add(-time.Millisecond)) || r.Due.After(after.Add(c.After).Add(time.Millisecond)) {
		t.Fatalf("due %v, want %v after the store's now, between %v and %v", r.Due, c.After, before, after)
	}
}

func testDueWindow(t *testing.T, s reminder.Store, typ string) {
	n := now(t, s)
	in := func(id, shard string, d time.Duration) reminder.Change {
		c := set(typ, id, "r", n.Add(d), id)
		c.ShardID = shard
		return c
	}
	apply(t, s, reminder.Batch{Changes: []reminder.Change{
		in("late", "1", -time.Hour),
		in("soon", "1", time.Minute),
		in("sooner", "2", 30*time.Second),
		in("far", "1", 2*time.Hour),
		in("other-shard", "3", time.Second),
	}})
	// Another type in the same shard is not this type's.
	o := in("x", "1", 0)
	o.EntityType = typ + "-other"
	apply(t, s, reminder.Batch{Changes: []reminder.Change{o}})

	w, err := s.Due(ctx(t), reminder.Query{EntityType: typ, Shards: []string{"1", "2"}, Within: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range w.Reminders {
		ids = append(ids, r.EntityID)
	}
	if fmt.Sprint(ids) != "[late sooner soon]" {
		t.Fatalf("due within the hour in shards 1 and 2: %v, want [late sooner soon] (earliest first)", ids)
	}
	if w.Now.Before(n) {
		t.Fatalf("window's now %v before the store's now %v", w.Now, n)
	}
	w, err = s.Due(ctx(t), reminder.Query{EntityType: typ, Shards: []string{"1", "2"}, Within: time.Hour, Limit: 2})
	if err != nil || len(w.Reminders) != 2 || w.Reminders[1].EntityID != "sooner" {
		t.Fatalf("limit 2: %v %v, want late and sooner", w.Reminders, err)
	}
	w, err = s.Due(ctx(t), reminder.Query{EntityType: typ, Shards: nil, Within: time.Hour})
	if err != nil || len(w.Reminders) != 0 {
		t.Fatalf("no shards: %v %v, want nothing", w.Reminders, err)
	}
}

func testAckOneShot(t *testing.T, s reminder.Store, typ string) {
	c := set(typ, "a", "r", now(t, s).Add(-time.Second), "x")
	apply(t, s, reminder.Batch{Changes: []reminder.Change{c}})
	d := reminder.Delivery{Reminder: c.Key, Generation: c.Generation}
	if err := reminder.Acknowledge(ctx(t), s, d); err != nil {
		t.Fatal(err)
	}
	if r, ok := get(t, s, c.Key); ok {
		t.Fatalf("acknowledged one-shot still stored: %+v", r)
	}
	// Acknowledged twice: nothing left to change, no error.
	if err := reminder.Acknowledge(ctx(t), s, d); err != nil {
		t.Fatal(err)
	}
}

func testAckStale(t *testing.T, s reminder.Store, typ string) {
	n := now(t, s)
	c := set(typ, "a", "r", n.Add(-time.Second), "old")
	apply(t, s, reminder.Batch{Changes: []reminder.Change{c}})
	again := set(typ, "a", "r", n.Add(time.Hour), "new")
	apply(t, s, reminder.Batch{Changes: []reminder.Change{again}})
	if err := reminder.Acknowledge(ctx(t), s, reminder.Delivery{Reminder: c.Key, Generation: c.Generation}); err != nil {
		t.Fatal(err)
	}
	r, ok := get(t, s, c.Key)
	if !ok || r.Generation != again.Generation || string(r.Payload) != "new" {
		t.Fatalf("a late acknowledgement of the replaced reminder changed the new one: %+v %v", r, ok)
	}
}

func testAckPeriodic(t *testing.T, s reminder.Store, typ string) {
	n := now(t, s)
	// Due 3.5 periods ago: three ticks were missed.
	c := set(typ, "a", "r", n.Add(-35*time.Minute).Truncate(time.Microsecond), "x")
	c.Period = 10 * time.Minute
	apply(t, s, reminder.Batch{Changes: []reminder.Change{c}})
	next := reminder.NewGeneration()
	if err := s.Apply(ctx(t), reminder.Batch{Acks: []reminder.Ack{{Key: c.Key, Generation: c.Generation, Next: next}}}); err != nil {
		t.Fatal(err)
	}
	r, ok := get(t, s, c.Key)
	want := c.At.Add(40 * time.Minute) // the first tick after now: fire once for everything missed
	if !ok || !r.Due.Equal(want) || r.Generation != next {
		t.Fatalf("advanced periodic reminder: %+v %v, want due %v (the first tick after now) and generation %d", r, ok, want, next)
	}
	// The stale delivery's acknowledgement does not advance it again.
	if err := s.Apply(ctx(t), reminder.Batch{Acks: []reminder.Ack{{Key: c.Key, Generation: c.Generation, Next: reminder.NewGeneration()}}}); err != nil {
		t.Fatal(err)
	}
	if r2, _ := get(t, s, c.Key); !r2.Due.Equal(want) || r2.Generation != next {
		t.Fatalf("acknowledged twice: %+v, want it unchanged", r2)
	}
}

func testConcurrentAcks(t *testing.T, s reminder.Store, typ string) {
	c := set(typ, "a", "r", now(t, s).Add(-time.Second).Truncate(time.Microsecond), "x")
	c.Period = time.Hour
	apply(t, s, reminder.Batch{Changes: []reminder.Change{c}})
	var wg sync.WaitGroup
	nexts := make([]uint64, 8)
	for i := range nexts {
		nexts[i] = reminder.NewGeneration()
		wg.Go(func() {
			if err := s.Apply(ctx(t), reminder.Batch{Acks: []reminder.Ack{{Key: c.Key, Generation: c.Generation, Next: nexts[i]}}}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	r, _ := get(t, s, c.Key)
	if !r.Due.Equal(c.At.Add(time.Hour)) {
		t.Fatalf("due %v after 8 acknowledgements of one delivery, want one period later (%v)", r.Due, c.At.Add(time.Hour))
	}
	found := false
	for _, n := range nexts {
		found = found || n == r.Generation
	}
	if !found {
		t.Fatalf("generation %d is none of the acknowledgements' next", r.Generation)
	}
}

func testInvalidBatch(t *testing.T, s reminder.Store, typ string) {
	good := set(typ, "a", "r", now(t, s), "x")
	bad := set(typ, "b", "", now(t, s), "x")
	err := s.Apply(ctx(t), reminder.Batch{Changes: []reminder.Change{good, bad}})
	if !errors.Is(err, reminder.ErrInvalid) {
		t.Fatalf("batch with an unnamed reminder: %v, want ErrInvalid", err)
	}
	if r, ok := get(t, s, good.Key); ok {
		t.Fatalf("the valid change of a refused batch was stored: %+v", r)
	}
	noShard := set(typ, "c", "r", now(t, s), "x")
	noShard.ShardID = ""
	if err := s.Apply(ctx(t), reminder.Batch{Changes: []reminder.Change{noShard}}); !errors.Is(err, reminder.ErrInvalid) {
		t.Fatalf("change without a shard: %v, want ErrInvalid", err)
	}
}

func testLaterChangeWins(t *testing.T, s reminder.Store, typ string) {
	n := now(t, s)
	first := set(typ, "a", "r", n.Add(time.Hour), "first")
	second := set(typ, "a", "r", n.Add(2*time.Hour), "second")
	apply(t, s, reminder.Batch{Changes: []reminder.Change{first, second}})
	if r, _ := get(t, s, first.Key); string(r.Payload) != "second" {
		t.Fatalf("got %q, want the later change", r.Payload)
	}
	apply(t, s, reminder.Batch{Changes: []reminder.Change{{Key: first.Key, Cancel: true}, first}})
	if r, ok := get(t, s, first.Key); !ok || string(r.Payload) != "first" {
		t.Fatalf("cancel then set: %+v %v, want set", r, ok)
	}
	// An acknowledgement goes before the batch's changes: acknowledging
	// the delivery and setting the reminder again in one batch keeps the
	// new one.
	again := set(typ, "a", "r", n.Add(3*time.Hour), "again")
	apply(t, s, reminder.Batch{
		Acks:    []reminder.Ack{{Key: first.Key, Generation: first.Generation, Next: reminder.NewGeneration()}},
		Changes: []reminder.Change{again},
	})
	if r, ok := get(t, s, first.Key); !ok || string(r.Payload) != "again" {
		t.Fatalf("acknowledge and set again: %+v %v, want the new one", r, ok)
	}
}

func testStats(t *testing.T, s reminder.Store, typ string) {
	n := now(t, s)
	in := func(id, shard string, d time.Duration) reminder.Change {
		c := set(typ, id, "r", n.Add(d), id)
		c.ShardID = shard
		return c
	}
	apply(t, s, reminder.Batch{Changes: []reminder.Change{
		in("a", "1", -time.Hour), in("b", "1", -time.Second), in("c", "1", time.Hour), in("d", "2", time.Hour),
	}})
	st, err := s.Stats(ctx(t), typ, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	want := "[{1 3 2 1} {2 1 0 0}]"
	if got := fmt.Sprint(st); got != want {
		t.Fatalf("stats %s, want %s (shard, total, due, late a minute)", got, want)
	}
}

func testDueShards(t *testing.T, s reminder.Store, typ string) {
	n := now(t, s)
	in := func(id, shard string, d time.Duration) reminder.Change {
		c := set(typ, id, "r", n.Add(d), id)
		c.ShardID = shard
		return c
	}
	apply(t, s, reminder.Batch{Changes: []reminder.Change{
		in("a", "1", time.Minute), in("b", "1", -time.Minute), in("c", "2", time.Hour), in("d", "3", 30*time.Second),
	}})
	got, err := s.DueShards(ctx(t), typ, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != "map[1:b 3:d]" {
		t.Fatalf("due shards %v, want shard 1 (earliest b) and 3 (d); 2 is due later", got)
	}
}

func testObserver(t *testing.T, s reminder.Store, typ string) {
	o, ok := s.(interface{ Observe(reminder.Observer) })
	if !ok {
		t.Skip("the store takes no observers")
	}
	got := make(chan reminder.Batch, 4)
	o.Observe(func(b reminder.Batch, _ time.Time) {
		if len(b.Changes) > 0 && b.Changes[0].EntityType == typ {
			got <- b
		}
	})
	c := set(typ, "a", "r", now(t, s), "x")
	apply(t, s, reminder.Batch{Changes: []reminder.Change{c}})
	select {
	case b := <-got:
		if b.Changes[0].Generation != c.Generation {
			t.Fatalf("observed %+v, want %+v", b, c)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the observer never learned of the applied batch")
	}
}
