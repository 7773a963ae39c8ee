package reminders_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/internal/pgtest"
	"github.com/shoal-dev/shoal/journal"
	"github.com/shoal-dev/shoal/journal/memory"
	journalpg "github.com/shoal-dev/shoal/journal/postgres"
	"github.com/shoal-dev/shoal/sharding"
	"github.com/shoal-dev/shoal/sharding/reminders"
	"github.com/shoal-dev/shoal/timers/reminder"
	reminderstore "github.com/shoal-dev/shoal/timers/reminder/memory"
	reminderpg "github.com/shoal-dev/shoal/timers/reminder/postgres"
)

var pg = pgtest.New()

func TestMain(m *testing.M) { os.Exit(pg.Run(m)) }

// BenchmarkHeldMemory stores 1,000,000 reminders of one type over 1000
// shards, due evenly over the next 1000 minutes (1000 a minute), and starts
// one node's firing for all 1000 shards with windows of 1, 10 and 100
// minutes: it holds only what falls due within its window. Reported: the
// reminders held, the live heap the firing holds after its first load
// (after GC, against before it started), that heap per held reminder, and
// the load's duration.
//
//	go test -run '^$' -bench HeldMemory -benchtime 1x -count 3 ./sharding/reminders
func BenchmarkHeldMemory(b *testing.B) {
	pool := pg.Pool(b)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `INSERT INTO reminders (entity_type, entity_id, name, shard_id, due_at, period_us, manifest, payload, generation)
		SELECT 'B', 'e' || i, 'r', (i % 1000)::text, now() + interval '1 hour' + interval '60 ms' * i, 0, 'ping', '\x7b7d', i
		FROM generate_series(1, 1000000) i`); err != nil {
		b.Fatal(err)
	}
	shards := make([]string, 1000)
	for i := range shards {
		shards[i] = strconv.Itoa(i)
	}
	sys, err := entity.NewSystem(entity.Config{Codec: codec.NewRegistry()})
	if err != nil {
		b.Fatal(err)
	}
	store := reminderpg.New(pool)
	for _, minutes := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("window=%dm", minutes), func(b *testing.B) {
			for range b.N {
				runtime.GC()
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				start := time.Now()
				// The reminders are due an hour from their insert on: the
				// window starts an hour ahead, so nothing fires.
				f, err := reminders.StartWith("B", sys, reminders.Config{Store: store, Window: time.Hour + time.Duration(minutes)*time.Minute,
					LoadEvery: time.Hour, MaxHeld: 1_000_000}, func() []string { return shards }, func(string, any) error { return nil })
				if err != nil {
					b.Fatal(err)
				}
				for f.Stats().Loads == 0 {
					time.Sleep(time.Millisecond) // waits on a condition: the first load
				}
				took := time.Since(start)
				runtime.GC()
				runtime.ReadMemStats(&after)
				held := f.Stats().Held
				heap := float64(int64(after.HeapAlloc) - int64(before.HeapAlloc))
				runtime.KeepAlive(f)
				f.Stop()
				b.ReportMetric(float64(held), "held")
				b.ReportMetric(heap/(1<<20), "heap-MB")
				b.ReportMetric(heap/float64(max(held, 1)), "heap-B/held")
				b.ReportMetric(took.Seconds()*1000, "load-ms")
			}
		})
	}
}

// BenchmarkFired measures reminders fired per second end to end on one
// node: 10,000 reminders due now, one per entity over 100 shards, none of
// the entities running; the firing places the shards, loads the due
// reminders, delivers each through sharding (which starts the entity: it
// recovers from the journal), and the entity persists an event with the
// acknowledgement in its transaction. Timed from the firing's start until
// the store holds no reminder. journal=memory is the framework's own
// cost; journal=postgres stores events and reminders in Postgres (group
// commit, the tests' server).
//
//	go test -run '^$' -bench Fired -benchtime 1x -count 3 ./sharding/reminders
func BenchmarkFired(b *testing.B) {
	for _, kind := range []string{"memory", "postgres"} {
		b.Run("journal="+kind, func(b *testing.B) {
			for range b.N {
				benchFired(b, kind == "postgres", 10_000)
			}
		})
	}
}

func benchFired(b *testing.B, onPostgres bool, n int) {
	ctx := context.Background()
	var store interface {
		reminder.Store
		Observe(reminder.Observer)
	}
	var j journal.Journal
	if onPostgres {
		pool := pgtest.NewPool(b, pg.MigratedDSN(b), func(c *pgxpool.Config) { c.MaxConns = 16 })
		s := reminderpg.New(pool)
		pj := journalpg.New(pool, journalpg.Config{}, journalpg.WithSideStore(s))
		b.Cleanup(func() { pj.Close() })
		store, j = s, pj
	} else {
		s := reminderstore.New()
		store, j = s, memory.New(memory.WithSideStore(s))
	}
	sys, err := entity.NewSystem(entity.Config{Codec: alarmCodec(), Journal: j, Reminders: store, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	s, err := sharding.New(sys, sharding.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Terminate()
	rec := &rings{}
	r, err := sharding.Init(s, sharding.Entity[alarmCmd]{Key: alarmKey, Create: alarmEntity(rec), Settings: sharding.Settings{NumberOfShards: 100}})
	if err != nil {
		b.Fatal(err)
	}
	manifest, payload, err := sys.Codec().Encode(ring{Name: "wake"})
	if err != nil {
		b.Fatal(err)
	}
	var batch reminder.Batch
	for i := range n {
		id := "e" + strconv.Itoa(i)
		batch.Changes = append(batch.Changes, reminder.Change{
			Key: reminder.Key{EntityType: "Alarm", EntityID: id, Name: "wake"}, ShardID: r.ShardID(id),
			Manifest: manifest, Payload: payload, Generation: reminder.NewGeneration(),
		})
	}
	if err := store.Apply(ctx, batch); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	f, err := reminders.Start(r, sys, reminders.Config{Store: store, RedeliverAfter: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	defer f.Stop()
	for {
		st, err := store.Stats(ctx, "Alarm", 0)
		if err != nil {
			b.Fatal(err)
		}
		left := 0
		for _, s := range st {
			left += s.Total
		}
		if left == 0 {
			break
		}
		time.Sleep(5 * time.Millisecond) // polls a condition: every reminder acknowledged
	}
	took := time.Since(start)
	b.ReportMetric(float64(n)/took.Seconds(), "fired/s")
	b.ReportMetric(float64(f.Stats().Delivered-n), "redelivered")
}

// BenchmarkLateness measures how late reminders fire at 10,000 due per
// second: 50,000 reminders (10 each for 5,000 entities, one node) due
// evenly over 5 s starting 2 s (on Postgres 15 s) after they are set;
// lateness is when the entity handles the delivery minus its due time;
// each delivery is acknowledged (a transaction of its own). store=memory
// is the framework's own cost; store=postgres keeps the reminders in
// Postgres (the tests' server), due times on its clock. Reported: p50, p99
// and max in milliseconds.
//
//	go test -run '^$' -bench Lateness -benchtime 1x -count 3 ./sharding/reminders
func BenchmarkLateness(b *testing.B) {
	for _, kind := range []string{"memory", "postgres"} {
		b.Run("store="+kind, func(b *testing.B) {
			for range b.N {
				benchLateness(b, kind == "postgres", 50_000, 10_000)
			}
		})
	}
}

func benchLateness(b *testing.B, onPostgres bool, n, perSecond int) {
	ctx := context.Background()
	var store interface {
		reminder.Store
		Observe(reminder.Observer)
	}
	var j journal.Journal
	if onPostgres {
		pool := pgtest.NewPool(b, pg.MigratedDSN(b), func(c *pgxpool.Config) { c.MaxConns = 16 })
		s := reminderpg.New(pool)
		pj := journalpg.New(pool, journalpg.Config{}, journalpg.WithSideStore(s))
		b.Cleanup(func() { pj.Close() })
		store, j = s, pj
	} else {
		s := reminderstore.New()
		store, j = s, memory.New(memory.WithSideStore(s))
	}
	sys, err := entity.NewSystem(entity.Config{Codec: alarmCodec(), Journal: j, Reminders: store,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	s, err := sharding.New(sys, sharding.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Terminate()
	late := make(chan time.Duration, n)
	create := func(ctx entity.Context[alarmCmd]) entity.Behavior[alarmCmd] {
		return entity.Receive(func(ctx entity.Context[alarmCmd], c alarmCmd) entity.Behavior[alarmCmd] {
			if r, ok := c.(ring); ok {
				late <- time.Since(r.Due)
				h, _ := reminders.For(ctx)
				ctx.PipeToSelf(func(bg context.Context) alarmCmd { _ = h.Acknowledge(bg, r.Delivery); return nil })
			}
			return entity.Same[alarmCmd]()
		})
	}
	r, err := sharding.Init(s, sharding.Entity[alarmCmd]{Key: alarmKey, Create: create, Settings: sharding.Settings{NumberOfShards: 100}})
	if err != nil {
		b.Fatal(err)
	}
	f, err := reminders.Start(r, sys, reminders.Config{Store: store})
	if err != nil {
		b.Fatal(err)
	}
	defer f.Stop()
	manifest, payload, err := sys.Codec().Encode(ring{Name: "r"})
	if err != nil {
		b.Fatal(err)
	}
	// Setting 50,000 takes a while on Postgres: the first falls due after.
	lead := 2 * time.Second
	if onPostgres {
		lead = 15 * time.Second
	}
	start := time.Now().Add(lead)
	var batch reminder.Batch
	for i := range n {
		id := "e" + strconv.Itoa(i%(n/10))
		batch.Changes = append(batch.Changes, reminder.Change{
			Key: reminder.Key{EntityType: "Alarm", EntityID: id, Name: "r" + strconv.Itoa(i)}, ShardID: r.ShardID(id),
			At: start.Add(time.Duration(i) * time.Second / time.Duration(perSecond)), Manifest: manifest, Payload: payload,
			Generation: reminder.NewGeneration(),
		})
	}
	if err := store.Apply(ctx, batch); err != nil {
		b.Fatal(err)
	}
	lat := make([]time.Duration, 0, n)
	timeout := time.After(time.Minute)
	for len(lat) < n {
		select {
		case d := <-late:
			lat = append(lat, d)
		case <-timeout:
			b.Fatalf("%d of %d delivered within a minute", len(lat), n)
		}
	}
	slices.Sort(lat)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(lat[len(lat)/2]), "p50-ms")
	b.ReportMetric(ms(lat[len(lat)*99/100]), "p99-ms")
	b.ReportMetric(ms(lat[len(lat)-1]), "max-ms")
}
