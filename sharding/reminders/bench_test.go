package reminders_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/internal/pgtest"
	"github.com/shoal-dev/shoal/sharding/reminders"
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
