package postgres_test

import (
	"context"
	"fmt"
	"math"
	"runtime"
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

// queryLog is a pgx tracer that records the journal's statements: the
// replay queries (rows returned) and the batch inserts (rows sent).
type queryLog struct {
	replayStarted atomic.Int64

	mu         sync.Mutex
	replayRows []int64 // rows returned by each finished replay query
	insertRows []int   // rows sent by each batch insert
	oneRow     int     // inserts sent as the one-row statement
}

type queryKind struct{}

func (q *queryLog) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	switch {
	case strings.Contains(d.SQL, "FROM event_journal") && strings.Contains(d.SQL, "LIMIT"):
		q.replayStarted.Add(1)
		return context.WithValue(ctx, queryKind{}, "replay")
	case strings.HasPrefix(d.SQL, "INSERT INTO event_journal") && len(d.Args) > 0:
		switch pids := d.Args[0].(type) {
		case []string: // a batch
			q.mu.Lock()
			q.insertRows = append(q.insertRows, len(pids))
			q.mu.Unlock()
		case string: // one event
			q.mu.Lock()
			q.insertRows = append(q.insertRows, 1)
			q.oneRow++
			q.mu.Unlock()
		}
	}
	return ctx
}

func (q *queryLog) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryEndData) {
	if ctx.Value(queryKind{}) == "replay" && d.Err == nil {
		q.mu.Lock()
		q.replayRows = append(q.replayRows, d.CommandTag.RowsAffected())
		q.mu.Unlock()
	}
}

func tracedPool(t *testing.T, q *queryLog) *pgxpool.Pool {
	return pgtest.NewPool(t, pg.MigratedDSN(t), func(c *pgxpool.Config) { c.ConnConfig.Tracer = q })
}

// TestReplayStreamsMillionEvents replays a history of 1 000 000 events and
// shows it is streamed: it is read in queries of at most one page, the
// journal never runs more than two pages ahead of the callback, and the
// heap grows by a few megabytes while the history takes hundreds.
func TestReplayStreamsMillionEvents(t *testing.T) {
	history := 1_000_000
	if testing.Short() {
		history = 50_000
	}
	const page, payloadSize = 2000, 64
	q := &queryLog{}
	pool := tracedPool(t, q)
	ctx := context.Background()
	const pid = "stream"
	for first := 1; first <= history; first += 100_000 {
		last := min(first+100_000-1, history)
		if _, err := pool.Exec(ctx, `INSERT INTO event_journal (persistence_id, seq_nr, write_timestamp, manifest, payload, writer_id, entity_type, slice)
			SELECT $1, s, now(), 'bench.Event', convert_to(lpad(s::text, $4, '0'), 'UTF8'), 'w', $5, $6 FROM generate_series($2::bigint, $3::bigint) s`,
			pid, first, last, payloadSize, journal.EntityTypeOf(pid), journal.SliceOf(pid)); err != nil {
			t.Fatal(err)
		}
	}
	j := postgres.New(pool, postgres.Config{ReplayPageSize: page})
	defer j.Close()

	runtime.GC()
	var base, m runtime.MemStats
	runtime.ReadMemStats(&base)
	peak := base.HeapAlloc
	var n int64
	start := time.Now()
	err := j.Replay(ctx, pid, 1, math.MaxUint64, func(e journal.Event) error {
		n++
		if e.SeqNr != uint64(n) || len(e.Payload) != payloadSize {
			return fmt.Errorf("event %d: seq %d, %d bytes", n, e.SeqNr, len(e.Payload))
		}
		// Queries started so far, each of at most a page: the current
		// page and the one being fetched, no more.
		if ahead := q.replayStarted.Load()*page - (n - 1); ahead > 2*page {
			return fmt.Errorf("at event %d the journal has asked for %d events beyond it", n, ahead)
		}
		if n%50_000 == 0 {
			// Live heap, not garbage a starved collector has not reached yet.
			runtime.GC()
			runtime.ReadMemStats(&m)
			peak = max(peak, m.HeapAlloc)
		}
		return nil
	})
	elapsed := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(history) {
		t.Fatalf("replayed %d events, want %d", n, history)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if want := history/page + 1; len(q.replayRows) != want { // the last, empty page ends it
		t.Errorf("%d replay queries, want %d", len(q.replayRows), want)
	}
	for i, rows := range q.replayRows {
		if rows > page {
			t.Fatalf("replay query %d returned %d rows, more than a page (%d)", i, rows, page)
		}
	}
	growth := float64(peak-base.HeapAlloc) / (1 << 20)
	// Held at once, the events would take history × (Event header + payload).
	whole := float64(history) * float64(payloadSize+136) / (1 << 20)
	t.Logf("replayed %d events in %v (%.0f/s) with %d queries; heap grew by %.1f MiB at most (the whole history: ~%.0f MiB)",
		history, elapsed.Round(time.Millisecond), float64(history)/elapsed.Seconds(), len(q.replayRows), growth, whole)
	if growth > whole/4 {
		t.Errorf("heap grew by %.1f MiB during replay; the whole history is ~%.0f MiB", growth, whole)
	}
}

// TestBatchSizeBounded: many concurrent writers are grouped into batches,
// none larger than MaxBatchEvents.
func TestBatchSizeBounded(t *testing.T) {
	q := &queryLog{}
	j := postgres.New(tracedPool(t, q), postgres.Config{Writers: 1, MaxBatchEvents: 10})
	defer j.Close()
	const writers = 200
	start := make(chan struct{})
	errs := make([]error, writers)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs[w] = j.Write(context.Background(), evs(fmt.Sprintf("bounded-%d", w), 1, 1, "w"))
		}()
	}
	close(start)
	wg.Wait()
	for w, err := range errs {
		if err != nil {
			t.Fatalf("writer %d: %v", w, err)
		}
	}
	st := j.Stats()
	q.mu.Lock()
	defer q.mu.Unlock()
	total := 0
	for i, rows := range q.insertRows {
		total += rows
		if rows > 10 {
			t.Errorf("batch %d holds %d events, more than MaxBatchEvents (10)", i, rows)
		}
	}
	if total != writers || st.Events != writers || st.Batches != uint64(len(q.insertRows)) {
		t.Fatalf("%d rows in %d inserts; stats %+v", total, len(q.insertRows), st)
	}
	if st.Batches > writers/2 {
		t.Errorf("%d writers went out in %d batches: not grouped", writers, st.Batches)
	}
	t.Logf("%d writers in %d batches", writers, st.Batches)
}

// TestBatchWaitBounded: a lone write waits MaxBatchWait for company, then
// goes out in a batch that is not full.
func TestBatchWaitBounded(t *testing.T) {
	const wait = 200 * time.Millisecond
	j := newJournal(t, postgres.Config{Writers: 1, MaxBatchEvents: 1000, MaxBatchWait: wait})
	begin := time.Now()
	mustWrite(t, j, evs("lonely", 1, 1, "w"))
	// A lower bound the code guarantees; how much longer a loaded machine
	// took says nothing about the journal.
	if elapsed := time.Since(begin); elapsed < wait {
		t.Fatalf("a lone write took %v with MaxBatchWait %v: it did not wait for company", elapsed, wait)
	}
	if st := j.Stats(); st.Batches != 1 || st.Events != 1 {
		t.Fatalf("stats %+v, want one batch of one event", st)
	}
}
