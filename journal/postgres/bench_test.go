package postgres_test

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shoal-dev/shoal/internal/pgtest"
	"github.com/shoal-dev/shoal/journal"
	"github.com/shoal-dev/shoal/journal/postgres"
)

// The benchmarks run against a container with fsync on, as in production:
//
//	go test -run '^$' -bench . -benchtime 5s ./journal/postgres
//
// BenchmarkWrite measures, in one run and on one server, a raw pgx
// multi-row INSERT baseline into a table of the journal's shape and the
// journal with 1, 100 and 10 000 concurrently writing persistence ids (one
// event per Write, each writer waiting for its acknowledgement). Report the
// journal's events/s as a fraction of the raw figures: the best one (rows
// of four persistence ids, appended at the end of the primary key), and the
// one with the 10 000-writer run's keys (pids=10000).

const benchPayload = 100 // bytes per event

var benchRun atomic.Int64 // keeps persistence ids unique across benchmark invocations

func benchPool(b *testing.B) *pgxpool.Pool {
	return pgtest.NewPool(b, pgBench.MigratedDSN(b), func(c *pgxpool.Config) { c.MaxConns = 16 })
}

func BenchmarkWrite(b *testing.B) {
	pool := benchPool(b)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `CREATE TABLE event_journal_raw (LIKE event_journal INCLUDING ALL)`); err != nil {
		b.Fatal(err)
	}
	payload := bytes.Repeat([]byte{'x'}, benchPayload)
	for _, rows := range []int{100, 1000} {
		b.Run(fmt.Sprintf("raw/rows=%d/clients=4", rows), func(b *testing.B) {
			benchRaw(b, pool, rows, 4, 4, payload)
		})
	}
	// The same statements with the keys of the 10 000-writer journal run:
	// each row a different persistence id of 10 000, so index inserts land
	// all over the primary key instead of at the end of four ids' ranges.
	b.Run("raw/rows=1000/clients=4/pids=10000", func(b *testing.B) {
		benchRaw(b, pool, 1000, 4, 10000, payload)
	})
	// The latency floor for journal/writers=1: one client inserting one
	// row per statement and waiting for it.
	b.Run("raw/rows=1/clients=1", func(b *testing.B) {
		benchRawSingle(b, pool, payload)
	})
	for _, writers := range []int{1, 100, 10000} {
		b.Run(fmt.Sprintf("journal/writers=%d", writers), func(b *testing.B) {
			benchJournal(b, pool, writers, payload)
		})
	}
}

// benchRaw inserts b.N rows with multi-row INSERT ... VALUES statements of
// rows rows from clients connections at once, spread round-robin over pids
// persistence ids (each client its share, seq nrs ascending per id).
func benchRaw(b *testing.B, pool *pgxpool.Pool, rows, clients, pids int, payload []byte) {
	var sql strings.Builder
	sql.WriteString(`INSERT INTO event_journal_raw (persistence_id, seq_nr, write_timestamp, manifest, payload, tags, writer_id) VALUES `)
	for r := range rows {
		if r > 0 {
			sql.WriteByte(',')
		}
		p := r*6 + 1
		fmt.Fprintf(&sql, "($%d,$%d,$%d,$%d,$%d,'{}',$%d)", p, p+1, p+2, p+3, p+4, p+5)
	}
	stmt := sql.String()
	run := benchRun.Add(1)
	var left, inserted atomic.Int64
	left.Store(int64(b.N))
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	b.ResetTimer()
	start := time.Now()
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := make([]string, max(1, pids/clients))
			for k := range mine {
				mine[k] = fmt.Sprintf("raw-%d-%d", run, c+k*clients)
			}
			next := 0
			args := make([]any, 0, rows*6)
			// Whole statements until b.N rows are claimed; the last may overshoot.
			for left.Add(-int64(rows)) > -int64(rows) {
				args = args[:0]
				for range rows {
					pid, seq := mine[next%len(mine)], int64(next/len(mine)+1)
					next++
					args = append(args, pid, seq, time.Now(), "bench.Event", payload, "w")
				}
				if _, err := pool.Exec(context.Background(), stmt, args...); err != nil {
					errs <- err
					return
				}
				inserted.Add(int64(rows))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	b.ReportMetric(float64(inserted.Load())/elapsed.Seconds(), "events/s")
}

// benchRawSingle inserts b.N rows one statement at a time from one client
// and reports the latency of each round trip.
func benchRawSingle(b *testing.B, pool *pgxpool.Pool, payload []byte) {
	const stmt = `INSERT INTO event_journal_raw (persistence_id, seq_nr, write_timestamp, manifest, payload, tags, writer_id) VALUES ($1,$2,$3,$4,$5,'{}',$6)`
	pid := fmt.Sprintf("raw1-%d", benchRun.Add(1))
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		t0 := time.Now()
		if _, err := pool.Exec(context.Background(), stmt, pid, int64(i+1), time.Now(), "bench.Event", payload, "w"); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "events/s")
	b.ReportMetric(percentileMillis(lat, 0.50), "p50-ms")
	b.ReportMetric(percentileMillis(lat, 0.99), "p99-ms")
}

// percentileMillis is the p-th percentile of lat, in milliseconds; it sorts lat.
func percentileMillis(lat []time.Duration, p float64) float64 {
	if len(lat) == 0 {
		return 0
	}
	slices.Sort(lat)
	return float64(lat[int(math.Ceil(p*float64(len(lat))))-1].Microseconds()) / 1000
}

// benchJournal runs writers goroutines, each appending one event at a time
// to its own persistence id, for b.N writes in all.
func benchJournal(b *testing.B, pool *pgxpool.Pool, writers int, payload []byte) {
	cfg := postgres.DefaultConfig()
	// Tuning aids: try other settings without editing the code.
	if v, err := strconv.Atoi(os.Getenv("SHOAL_BENCH_WRITERS")); err == nil {
		cfg.Writers = v
	}
	if v, err := strconv.Atoi(os.Getenv("SHOAL_BENCH_BATCH")); err == nil {
		cfg.MaxBatchEvents = v
	}
	j := postgres.New(pool, cfg)
	defer j.Close()
	run := benchRun.Add(1)
	var left atomic.Int64
	left.Store(int64(b.N))
	var (
		mu  sync.Mutex
		lat []time.Duration
		wg  sync.WaitGroup
	)
	errs := make(chan error, writers)
	before := j.Stats()
	b.ResetTimer()
	start := time.Now()
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pid := fmt.Sprintf("bench-%d-%d", run, w)
			var mine []time.Duration
			for seq := uint64(1); left.Add(-1) >= 0; seq++ {
				ev := []journal.Event{{PersistenceID: pid, SeqNr: seq, Manifest: "bench.Event", Payload: payload, WriterID: "w", Timestamp: time.Now()}}
				t0 := time.Now()
				if err := j.Write(context.Background(), ev); err != nil {
					errs <- err
					return
				}
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	st := j.Stats()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "events/s")
	b.ReportMetric(percentileMillis(lat, 0.50), "p50-ms")
	b.ReportMetric(percentileMillis(lat, 0.99), "p99-ms")
	if batches := st.Batches - before.Batches; batches > 0 {
		b.ReportMetric(float64(st.Events-before.Events)/float64(batches), "events/batch")
	}
}

// BenchmarkReplay replays one persistence id's history (1 000 000 events by
// default, $SHOAL_BENCH_REPLAY_EVENTS to change) per iteration and reports
// events/s and the peak heap seen while replaying: the history is streamed
// in pages, never held whole.
func BenchmarkReplay(b *testing.B) {
	history := 1_000_000
	if v, err := strconv.Atoi(os.Getenv("SHOAL_BENCH_REPLAY_EVENTS")); err == nil && v > 0 {
		history = v
	}
	pool := benchPool(b)
	ctx := context.Background()
	const pid = "replay-bench"
	payload := bytes.Repeat([]byte{'x'}, benchPayload)
	const chunk = 10_000
	for first := 1; first <= history; first += chunk {
		n := min(chunk, history-first+1)
		if _, err := pool.Exec(ctx, `INSERT INTO event_journal (persistence_id, seq_nr, write_timestamp, manifest, payload, writer_id)
			SELECT $1, s, now(), 'bench.Event', $2, 'w' FROM generate_series($3::bigint, $4::bigint) s`,
			pid, payload, first, first+n-1); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE event_journal`); err != nil {
		b.Fatal(err)
	}
	cfg := postgres.DefaultConfig()
	if v, err := strconv.Atoi(os.Getenv("SHOAL_BENCH_PAGE")); err == nil {
		cfg.ReplayPageSize = v
	}
	j := postgres.New(pool, cfg)
	defer j.Close()

	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)
	var peak atomic.Uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() { // sample the heap while replaying
		defer close(sampled)
		var m runtime.MemStats
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				runtime.ReadMemStats(&m)
				if m.HeapAlloc > peak.Load() {
					peak.Store(m.HeapAlloc)
				}
			}
		}
	}()
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		var n int
		var last uint64
		err := j.Replay(ctx, pid, 1, math.MaxUint64, func(e journal.Event) error {
			if e.SeqNr != last+1 {
				return fmt.Errorf("seq %d after %d", e.SeqNr, last)
			}
			last = e.SeqNr
			n++
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		if n != history {
			b.Fatalf("replayed %d events, want %d", n, history)
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	close(stop)
	<-sampled
	b.ReportMetric(float64(b.N*history)/elapsed.Seconds(), "events/s")
	if p := peak.Load(); p > base.HeapAlloc {
		b.ReportMetric(float64(p-base.HeapAlloc)/(1<<20), "peak-heap-MB")
	}
}
