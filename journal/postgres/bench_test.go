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

	"github.com/jackc/pgx/v5"
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
// one with the 10 000-writer run's keys (pids=10000). raw/writers=1 and
// raw/writers=100 are the latency floors of journal/writers=1 and 100:
// that many goroutines, each inserting one row per statement on the pool
// and waiting for it. BenchmarkWriteVsRaw compares the two at one time.
//
// The journal runs also report their batches' round trips (batch-p50-ms,
// batch-p99-ms), so that a write's latency can be split into queueing and
// the database's part. Measured on a shared 2-core machine, a write at 100
// writers waited about 1.5 batch round trips at the median (the batch in
// flight, then its own) and its p99 was about 1.1x the batch round trip's
// p99: the tail is the commit's, which raw/writers=1 shows alone.

const benchPayload = 100 // bytes per event

var benchRun atomic.Int64 // keeps persistence ids unique across benchmark invocations

// benchPool opens a pool on a fresh schema of the fsync-on server; its
// batchTimer times the journal's batch inserts. SHOAL_BENCH_FSYNC=off runs
// on the tests' server instead, which has fsync off: raw and journal alike
// then measure what is left of a write's latency when commits cost no disk
// flush (the settings are logged with the results).
func benchPool(b *testing.B) (*pgxpool.Pool, *batchTimer) {
	srv := pgBench
	if os.Getenv("SHOAL_BENCH_FSYNC") == "off" {
		srv = pg
	}
	bt := &batchTimer{}
	pool := pgtest.NewPool(b, srv.MigratedDSN(b), func(c *pgxpool.Config) {
		c.MaxConns = 16
		c.ConnConfig.Tracer = bt
	})
	return pool, bt
}

// batchTimer is a pgx tracer that times the journal's batch inserts, from
// the statement's start on its connection to its answer: the part of a
// write's latency spent in the database.
type batchTimer struct {
	mu  sync.Mutex
	rtt []time.Duration
}

type batchStart struct{}

func (t *batchTimer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	// The journal's inserts, fenced (WithFence) or not.
	if strings.HasPrefix(d.SQL, "INSERT INTO event_journal\n") || strings.HasPrefix(d.SQL, "WITH fence AS (") {
		return context.WithValue(ctx, batchStart{}, time.Now())
	}
	return ctx
}

func (t *batchTimer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryEndData) {
	if start, ok := ctx.Value(batchStart{}).(time.Time); ok {
		t.mu.Lock()
		t.rtt = append(t.rtt, time.Since(start))
		t.mu.Unlock()
	}
}

// take returns the round trips timed since the last take.
func (t *batchTimer) take() []time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	rtt := t.rtt
	t.rtt = nil
	return rtt
}

func BenchmarkWrite(b *testing.B) {
	pool, batches := benchPool(b)
	createRawTable(b, pool)
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
	// The latency floors of the journal runs: writers goroutines, each
	// inserting one row per statement on the pool and waiting for it.
	for _, writers := range []int{1, 100} {
		b.Run(fmt.Sprintf("raw/writers=%d", writers), func(b *testing.B) {
			lat, elapsed := closedLoop(b, writers, b.N, rawWriter(pool, payload))
			reportLatency(b, "", lat, elapsed)
		})
	}
	for _, writers := range []int{1, 100, 10000} {
		b.Run(fmt.Sprintf("journal/writers=%d", writers), func(b *testing.B) {
			j := postgres.New(pool, benchConfig())
			defer j.Close()
			before := j.Stats()
			batches.take()
			b.ResetTimer()
			lat, elapsed := closedLoop(b, writers, b.N, journalWriter(j, payload))
			b.StopTimer()
			reportLatency(b, "", lat, elapsed)
			reportBatches(b, before, j.Stats(), batches.take())
		})
	}
}

// BenchmarkWriteVsRaw compares the journal's write latency with its floor,
// raw one-row inserts, under the same conditions: at 1 and 100 writers it
// runs rounds of raw inserts and of journal writes in turn (raw first, then
// journal first, and so on), b.N of each in all, so that load coming and
// going on a shared machine falls on both alike. It reports the journal's
// p50-ms and p99-ms, raw's raw-p50-ms and raw-p99-ms, and the ratios
// p50-x-raw and p99-x-raw:
//
//	go test -run '^$' -bench WriteVsRaw -benchtime 4000x -count 3 ./journal/postgres
func BenchmarkWriteVsRaw(b *testing.B) {
	pool, batches := benchPool(b)
	createRawTable(b, pool)
	payload := bytes.Repeat([]byte{'x'}, benchPayload)
	for _, writers := range []int{1, 100} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			j := postgres.New(pool, benchConfig())
			defer j.Close()
			kinds := [2]writeFunc{rawWriter(pool, payload), journalWriter(j, payload)}
			var lat [2][]time.Duration
			var elapsed [2]time.Duration
			before := j.Stats()
			batches.take()
			const rounds = 4
			b.ResetTimer()
			for r := range rounds {
				n := b.N / rounds
				if r < b.N%rounds {
					n++
				}
				for k := range 2 {
					k ^= r % 2 // raw first in even rounds, journal first in odd ones
					l, e := closedLoop(b, writers, n, kinds[k])
					lat[k], elapsed[k] = append(lat[k], l...), elapsed[k]+e
				}
			}
			b.StopTimer()
			reportLatency(b, "raw-", lat[0], elapsed[0])
			reportLatency(b, "", lat[1], elapsed[1])
			reportBatches(b, before, j.Stats(), batches.take())
			if raw := percentileMillis(lat[0], 0.50); raw > 0 {
				b.ReportMetric(percentileMillis(lat[1], 0.50)/raw, "p50-x-raw")
			}
			if raw := percentileMillis(lat[0], 0.99); raw > 0 {
				b.ReportMetric(percentileMillis(lat[1], 0.99)/raw, "p99-x-raw")
			}
		})
	}
}

// createRawTable creates event_journal_raw, a table of the journal's shape
// (indexes and all; its raw inserts give entity type and slice, as the
// journal does) for the raw baselines, and logs the server settings
// that decide commit latency.
func createRawTable(b *testing.B, pool *pgxpool.Pool) {
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `CREATE TABLE event_journal_raw (LIKE event_journal INCLUDING ALL)`); err != nil {
		b.Fatal(err)
	}
	var settings []string
	for _, name := range []string{"fsync", "synchronous_commit", "wal_sync_method", "commit_delay", "full_page_writes", "shared_buffers", "max_wal_size"} {
		var v string
		if err := pool.QueryRow(ctx, `SELECT current_setting($1)`, name).Scan(&v); err != nil {
			b.Fatal(err)
		}
		settings = append(settings, name+"="+v)
	}
	b.Logf("server: %s; pool: %d connections", strings.Join(settings, " "), pool.Config().MaxConns)
}

// benchConfig is the default journal config, adjusted by the environment
// ($SHOAL_BENCH_WRITERS, $SHOAL_BENCH_BATCH) to try other settings without
// editing the code.
func benchConfig() postgres.Config {
	cfg := postgres.DefaultConfig()
	if v, err := strconv.Atoi(os.Getenv("SHOAL_BENCH_WRITERS")); err == nil {
		cfg.Writers = v
	}
	if v, err := strconv.Atoi(os.Getenv("SHOAL_BENCH_BATCH")); err == nil {
		cfg.MaxBatchEvents = v
	}
	return cfg
}

// writeFunc stores event seq of persistence id pid and waits for it.
type writeFunc func(ctx context.Context, pid string, seq uint64) error

// rawWriter inserts one row per statement on the pool, as a client without
// the journal would.
func rawWriter(pool *pgxpool.Pool, payload []byte) writeFunc {
	const stmt = `INSERT INTO event_journal_raw (persistence_id, seq_nr, write_timestamp, manifest, payload, tags, writer_id, entity_type, slice) VALUES ($1,$2,$3,$4,$5,'{}',$6,$7,$8)`
	return func(ctx context.Context, pid string, seq uint64) error {
		_, err := pool.Exec(ctx, stmt, pid, int64(seq), time.Now(), "bench.Event", payload, "w", journal.EntityTypeOf(pid), journal.SliceOf(pid))
		return err
	}
}

func journalWriter(j *postgres.Journal, payload []byte) writeFunc {
	return func(ctx context.Context, pid string, seq uint64) error {
		return j.Write(ctx, []journal.Event{{PersistenceID: pid, SeqNr: seq, Manifest: "bench.Event", Payload: payload, WriterID: "w", Timestamp: time.Now()}})
	}
}

// closedLoop runs writers goroutines, each writing one event at a time to a
// persistence id of its own and waiting for it, n writes in all. It returns
// the latency of each write and the time they all took; it fails b on an
// error.
func closedLoop(b *testing.B, writers, n int, write writeFunc) ([]time.Duration, time.Duration) {
	run := benchRun.Add(1)
	var left atomic.Int64
	left.Store(int64(n))
	lat := make([][]time.Duration, writers)
	errs := make(chan error, writers)
	var wg sync.WaitGroup
	start := time.Now()
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pid := fmt.Sprintf("bench-%d-%d", run, w)
			for seq := uint64(1); left.Add(-1) >= 0; seq++ {
				t0 := time.Now()
				if err := write(context.Background(), pid, seq); err != nil {
					errs <- err
					return
				}
				lat[w] = append(lat[w], time.Since(t0))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	return slices.Concat(lat...), elapsed
}

// reportLatency reports the throughput and the p50 and p99 latencies of
// lat, each metric's unit prefixed with prefix.
func reportLatency(b *testing.B, prefix string, lat []time.Duration, elapsed time.Duration) {
	if elapsed > 0 {
		b.ReportMetric(float64(len(lat))/elapsed.Seconds(), prefix+"events/s")
	}
	b.ReportMetric(percentileMillis(lat, 0.50), prefix+"p50-ms")
	b.ReportMetric(percentileMillis(lat, 0.99), prefix+"p99-ms")
}

// reportBatches reports the mean batch size between two Stats and the
// p50 and p99 of the batches' round trips (batch-p50-ms, batch-p99-ms).
func reportBatches(b *testing.B, before, after postgres.Stats, rtt []time.Duration) {
	if batches := after.Batches - before.Batches; batches > 0 {
		b.ReportMetric(float64(after.Events-before.Events)/float64(batches), "events/batch")
	}
	if len(rtt) > 0 {
		b.ReportMetric(percentileMillis(rtt, 0.50), "batch-p50-ms")
		b.ReportMetric(percentileMillis(rtt, 0.99), "batch-p99-ms")
	}
}

// percentileMillis is the p-th percentile of lat, in milliseconds; it sorts lat.
func percentileMillis(lat []time.Duration, p float64) float64 {
	if len(lat) == 0 {
		return 0
	}
	slices.Sort(lat)
	return float64(lat[int(math.Ceil(p*float64(len(lat))))-1].Microseconds()) / 1000
}

// benchRaw inserts b.N rows with multi-row INSERT ... VALUES statements of
// rows rows from clients connections at once, spread round-robin over pids
// persistence ids (each client its share, seq nrs ascending per id).
func benchRaw(b *testing.B, pool *pgxpool.Pool, rows, clients, pids int, payload []byte) {
	var sql strings.Builder
	sql.WriteString(`INSERT INTO event_journal_raw (persistence_id, seq_nr, write_timestamp, manifest, payload, tags, writer_id, entity_type, slice) VALUES `)
	for r := range rows {
		if r > 0 {
			sql.WriteByte(',')
		}
		p := r*8 + 1
		fmt.Fprintf(&sql, "($%d,$%d,$%d,$%d,$%d,'{}',$%d,$%d,$%d)", p, p+1, p+2, p+3, p+4, p+5, p+6, p+7)
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
			args := make([]any, 0, rows*8)
			// Whole statements until b.N rows are claimed; the last may overshoot.
			for left.Add(-int64(rows)) > -int64(rows) {
				args = args[:0]
				for range rows {
					pid, seq := mine[next%len(mine)], int64(next/len(mine)+1)
					next++
					args = append(args, pid, seq, time.Now(), "bench.Event", payload, "w", journal.EntityTypeOf(pid), journal.SliceOf(pid))
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

// BenchmarkReplay replays one persistence id's history (1 000 000 events by
// default, $SHOAL_BENCH_REPLAY_EVENTS to change) per iteration and reports
// events/s and the peak heap seen while replaying: the history is streamed
// in pages, never held whole.
func BenchmarkReplay(b *testing.B) {
	history := 1_000_000
	if v, err := strconv.Atoi(os.Getenv("SHOAL_BENCH_REPLAY_EVENTS")); err == nil && v > 0 {
		history = v
	}
	pool, _ := benchPool(b)
	ctx := context.Background()
	const pid = "replay-bench"
	payload := bytes.Repeat([]byte{'x'}, benchPayload)
	const chunk = 10_000
	for first := 1; first <= history; first += chunk {
		n := min(chunk, history-first+1)
		if _, err := pool.Exec(ctx, `INSERT INTO event_journal (persistence_id, seq_nr, write_timestamp, manifest, payload, writer_id, entity_type, slice)
			SELECT $1, s, now(), 'bench.Event', $2, 'w', $5, $6 FROM generate_series($3::bigint, $4::bigint) s`,
			pid, payload, first, first+n-1, journal.EntityTypeOf(pid), journal.SliceOf(pid)); err != nil {
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

// BenchmarkWriteFenced measures what the node lease fence (WithFence: the
// holder's check, and the lease row read and locked FOR KEY SHARE in every
// statement) costs the journal: at 1 and 100 writers, the same run without
// and with it, one after the other on the same pool.
//
//	go test -run '^$' -bench WriteFenced -benchtime 4000x -count 3 ./journal/postgres
func BenchmarkWriteFenced(b *testing.B) {
	pool, batches := benchPool(b)
	payload := bytes.Repeat([]byte{'x'}, benchPayload)
	node := fmt.Sprintf("bench-%d", time.Now().UnixNano())
	if _, err := pool.Exec(context.Background(), `INSERT INTO node_leases (node_id, incarnation, expires_at)
		VALUES ($1, 1, clock_timestamp() + interval '1 day')`, node); err != nil {
		b.Fatal(err)
	}
	for _, writers := range []int{1, 100} {
		for _, fenced := range []bool{false, true} {
			b.Run(fmt.Sprintf("writers=%d/fenced=%v", writers, fenced), func(b *testing.B) {
				var opts []postgres.Option
				if fenced {
					opts = append(opts, postgres.WithFence(postgres.Fence{NodeID: node, Incarnation: 1, Holds: func() bool { return true }}))
				}
				j := postgres.New(pool, benchConfig(), opts...)
				defer j.Close()
				before := j.Stats()
				batches.take()
				b.ResetTimer()
				lat, elapsed := closedLoop(b, writers, b.N, journalWriter(j, payload))
				b.StopTimer()
				reportLatency(b, "", lat, elapsed)
				reportBatches(b, before, j.Stats(), batches.take())
			})
		}
	}
}
