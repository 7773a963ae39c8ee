package postgres_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/journal"
	"github.com/shoal-dev/shoal/journal/postgres"
	"github.com/shoal-dev/shoal/timers/reminder"
	reminders "github.com/shoal-dev/shoal/timers/reminder/postgres"
)

// BenchmarkWriteWithReminder measures the cost of setting a reminder
// inside a persist: one event per write, each writer waiting for its
// acknowledgement, plain (Write) against the same write carrying one
// reminder change (WriteWithSide, docs/DESIGN.md "Durable reminders"), on
// the same journal and server in one run:
//
//	go test -run '^$' -bench WriteWithReminder -count 3 ./journal/postgres
func BenchmarkWriteWithReminder(b *testing.B) {
	for _, writers := range []int{1, 64} {
		for _, side := range []bool{false, true} {
			name := fmt.Sprintf("writers=%d/plain", writers)
			if side {
				name = fmt.Sprintf("writers=%d/reminder", writers)
			}
			b.Run(name, func(b *testing.B) { benchWriteWithReminder(b, writers, side) })
		}
	}
}

func benchWriteWithReminder(b *testing.B, writers int, side bool) {
	pool, _ := benchPool(b)
	j := postgres.New(pool, postgres.Config{}, postgres.WithSideStore(reminders.New(pool)))
	b.Cleanup(func() { j.Close() })
	run := benchRun.Add(1)
	payload := make([]byte, benchPayload)
	var next atomic.Int64
	var seqs sync.Map
	ctx := context.Background()
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			pid := fmt.Sprintf("Bench|%d-%d", run, w)
			seq := uint64(0)
			for next.Add(1) <= int64(b.N) {
				seq++
				ev := []journal.Event{{PersistenceID: pid, SeqNr: seq, Manifest: "m", Payload: payload}}
				var err error
				if side {
					err = j.WriteWithSide(ctx, ev, reminder.Batch{Changes: []reminder.Change{{
						Key:     reminder.Key{EntityType: "Bench", EntityID: pid, Name: "timeout"},
						ShardID: "1", After: time.Hour, Manifest: "m", Payload: payload, Generation: reminder.NewGeneration(),
					}}})
				} else {
					err = j.Write(ctx, ev)
				}
				if err != nil {
					b.Error(err)
					return
				}
			}
			seqs.Store(w, seq)
		})
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "writes/s")
}
