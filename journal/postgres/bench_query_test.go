package postgres_test

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shoal-dev/shoal/journal"
	"github.com/shoal-dev/shoal/journal/postgres"
)

// BenchmarkQueryVsRaw reads the same stored events, in turn, through a
// Current EventsBySlices over all slices (paged, below the watermark, in
// (tx_id, ordering) order) and through one raw streaming SELECT ... ORDER
// BY ordering scanned with pgx: the floor of any reader. It reports both
// rates and query-x-raw, the query's rate as a fraction of raw's:
//
//	go test -run '^$' -bench QueryVsRaw -benchtime 10x -count 3 ./journal/postgres
func BenchmarkQueryVsRaw(b *testing.B) {
	const events, perStatement = 100_000, 1000 // one transaction per 1000 events
	pool, _ := benchPool(b)
	ctx := context.Background()
	payload := bytes.Repeat([]byte{'x'}, benchPayload)
	for first := 0; first < events; first += perStatement {
		if _, err := pool.Exec(ctx, `INSERT INTO event_journal (persistence_id, seq_nr, write_timestamp, manifest, payload, writer_id, entity_type, slice)
			SELECT 'Bench|e-' || (i / 10), i % 10 + 1, now(), 'bench.Event', $1, 'w', 'Bench',
				('x' || substr(md5('Bench|e-' || (i / 10)), 1, 4))::bit(16)::int % 1024
			FROM generate_series($2::int, $3::int) i ORDER BY i`, payload, first, first+perStatement-1); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE event_journal`); err != nil {
		b.Fatal(err)
	}
	j := postgres.New(pool, postgres.DefaultConfig())
	defer j.Close()
	var elapsed [2]time.Duration
	b.ResetTimer()
	for i := range b.N {
		for k := range 2 {
			k ^= i % 2 // each goes first in every other round
			start := time.Now()
			var n int
			var err error
			if k == 0 {
				n, err = readRaw(ctx, pool)
			} else {
				err = j.EventsBySlices(ctx, "Bench", journal.AllSlices, journal.Offset{}, journal.Current, func(journal.QueriedEvent) error {
					n++
					return nil
				})
			}
			elapsed[k] += time.Since(start)
			if err != nil {
				b.Fatal(err)
			}
			if n != events {
				b.Fatalf("read %d events, want %d", n, events)
			}
		}
	}
	b.StopTimer()
	raw := float64(b.N*events) / elapsed[0].Seconds()
	query := float64(b.N*events) / elapsed[1].Seconds()
	b.ReportMetric(raw, "raw-events/s")
	b.ReportMetric(query, "query-events/s")
	b.ReportMetric(query/raw, "query-x-raw")
}

// readRaw scans every event row into journal.Event values, as a reader
// without the journal would.
func readRaw(ctx context.Context, pool *pgxpool.Pool) (int, error) {
	rows, err := pool.Query(ctx, `SELECT persistence_id, seq_nr, ordering, write_timestamp, manifest, payload, tags, writer_id FROM event_journal ORDER BY ordering`)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var e journal.Event
		var seq int64
		if err := rows.Scan(&e.PersistenceID, &seq, &e.Ordering, &e.Timestamp, &e.Manifest, &e.Payload, &e.Tags, &e.WriterID); err != nil {
			return n, err
		}
		n++
	}
	return n, rows.Err()
}

// BenchmarkLiveLag measures how long after its commit a Live query
// delivers an event while the journal takes a steady 10 000 events/s (one
// event per write, WriteAsync, open loop): the lag from a write's
// acknowledgement to its delivery, at the median and the 99th percentile,
// for a query on the writing journal (lag-p50-ms, lag-p99-ms: woken in
// process) and on a second journal with its own pool (remote-lag-…: woken
// by LISTEN/NOTIFY, as on another node). A delivery that comes before the
// writer's acknowledgement counts as 0. The batches' round trips are
// reported too (batch-p50-ms, batch-p99-ms): a row waits for every batch
// that began before it to commit, so the lag's tail follows theirs.
//
//	go test -run '^$' -bench LiveLag -benchtime 30000x -count 3 ./journal/postgres
func BenchmarkLiveLag(b *testing.B) {
	const rate = 10_000 // events/s
	pool, batches := benchPool(b)
	other := pgtestPoolLike(b, pool)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	j := postgres.New(pool, postgres.DefaultConfig())
	defer j.Close()
	remote := postgres.New(other, postgres.DefaultConfig())
	defer remote.Close()
	typ := fmt.Sprintf("Lag%d", benchRun.Add(1))

	var mu sync.Mutex
	acked := make(map[string]time.Time, b.N)
	delivered := [2]map[string]time.Time{make(map[string]time.Time, b.N), make(map[string]time.Time, b.N)}
	done := [2]chan struct{}{make(chan struct{}), make(chan struct{})}
	for k, q := range []*postgres.Journal{j, remote} {
		go func() {
			_ = q.EventsBySlices(ctx, typ, journal.AllSlices, journal.Offset{}, journal.Live, func(e journal.QueriedEvent) error {
				now := time.Now()
				mu.Lock()
				delivered[k][e.PersistenceID] = now
				n := len(delivered[k])
				mu.Unlock()
				if n == b.N {
					close(done[k])
				}
				return nil
			})
		}()
	}
	payload := bytes.Repeat([]byte{'x'}, benchPayload)
	var wg sync.WaitGroup
	wg.Add(b.N)
	before := j.Stats()
	batches.take()
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; {
		due := int(time.Since(start).Seconds() * rate) // open loop: catch up, never burst ahead
		for ; i < b.N && i <= due; i++ {
			pid := fmt.Sprintf("%s|%d", typ, i)
			j.WriteAsync(context.Background(), []journal.Event{{PersistenceID: pid, SeqNr: 1, Manifest: "bench.Event", Payload: payload, WriterID: "w", Timestamp: time.Now()}}, func(err error) {
				if err != nil {
					b.Error(err)
				}
				now := time.Now()
				mu.Lock()
				acked[pid] = now
				mu.Unlock()
				wg.Done()
			})
		}
		time.Sleep(time.Millisecond)
	}
	wg.Wait()
	took := time.Since(start)
	for k := range done {
		select {
		case <-done[k]:
		case <-time.After(time.Minute):
			b.Fatalf("query %d delivered %d of %d events", k, len(delivered[k]), b.N)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/took.Seconds(), "events/s")
	reportBatches(b, before, j.Stats(), batches.take())
	for k, prefix := range []string{"", "remote-"} {
		lag := make([]time.Duration, 0, b.N)
		mu.Lock()
		for pid, at := range delivered[k] {
			lag = append(lag, max(0, at.Sub(acked[pid])))
		}
		mu.Unlock()
		b.ReportMetric(percentileMillis(lag, 0.50), prefix+"lag-p50-ms")
		b.ReportMetric(percentileMillis(lag, 0.99), prefix+"lag-p99-ms")
	}
}

// pgtestPoolLike opens a second pool on pool's database and schema.
func pgtestPoolLike(b *testing.B, pool *pgxpool.Pool) *pgxpool.Pool {
	cfg := pool.Config().Copy()
	cfg.ConnConfig.Tracer = nil
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(p.Close)
	return p
}
