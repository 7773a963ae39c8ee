package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shoal-dev/shoal/internal/pgtest"
	"github.com/shoal-dev/shoal/journal"
	"github.com/shoal-dev/shoal/journal/postgres"
)

// The environment of TestGapFreeWriterProcess, which the gap tests start as
// a separate OS process (the test binary re-executed) writing into their
// schema.
const (
	writerDSNEnv    = "SHOAL_QUERY_WRITER_DSN"
	writerPrefixEnv = "SHOAL_QUERY_WRITER_PREFIX"
	writerCountEnv  = "SHOAL_QUERY_WRITER_COUNT"
	writerTagEnv    = "SHOAL_QUERY_WRITER_TAG"
)

// TestGapFreeWriterProcess writes through a journal of its own when started
// by writerProcess; run alone, it does nothing.
func TestGapFreeWriterProcess(t *testing.T) {
	dsn := os.Getenv(writerDSNEnv)
	if dsn == "" {
		t.Skip("a helper process of the gap-free query tests")
	}
	n, _ := strconv.Atoi(os.Getenv(writerCountEnv))
	pool := pgtest.NewPool(t, dsn, nil)
	j := postgres.New(pool, postgres.Config{})
	defer j.Close()
	writeMany(t, j, os.Getenv(writerPrefixEnv), 4, n, os.Getenv(writerTagEnv))
}

// writerProcess runs TestGapFreeWriterProcess in a child process writing
// 4×n events of pids prefix0..3, tagged with tag, into dsn's schema.
func writerProcess(t *testing.T, dsn, prefix, tag string, n int) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestGapFreeWriterProcess$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), writerDSNEnv+"="+dsn, writerPrefixEnv+"="+prefix, writerCountEnv+"="+strconv.Itoa(n), writerTagEnv+"="+tag)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start writer process: %v", err)
	}
	return cmd
}

// writeMany writes n events to each of goroutines pids prefix<k>, one Write
// per event, from one goroutine per pid, all at once.
func writeMany(t testing.TB, j journal.Journal, prefix string, goroutines, n int, tag string) {
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pid := fmt.Sprintf("%s%d", prefix, g)
			for s := 1; s <= n; s++ {
				e := journal.Event{PersistenceID: pid, SeqNr: uint64(s), Manifest: "m", Payload: []byte(pid), WriterID: "w", Timestamp: time.Now()}
				if tag != "" {
					e.Tags = []string{tag}
				}
				if err := j.Write(context.Background(), []journal.Event{e}); err != nil {
					t.Errorf("write %s seq %d: %v", pid, s, err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// reader is a Live query collecting what it delivers.
type reader struct {
	name   string
	mu     sync.Mutex
	got    []journal.QueriedEvent
	early  []journal.QueriedEvent // delivered while released was false
	more   chan struct{}          // a signal per delivery
	done   chan error
	cancel context.CancelFunc
}

func startReader(t *testing.T, name string, released *atomic.Bool, run func(ctx context.Context, fn func(journal.QueriedEvent) error) error) *reader {
	ctx, cancel := context.WithCancel(context.Background())
	r := &reader{name: name, more: make(chan struct{}, 1), done: make(chan error, 1), cancel: cancel}
	t.Cleanup(cancel)
	go func() {
		r.done <- run(ctx, func(e journal.QueriedEvent) error {
			r.mu.Lock()
			r.got = append(r.got, e)
			if released != nil && !released.Load() {
				r.early = append(r.early, e)
			}
			r.mu.Unlock()
			select {
			case r.more <- struct{}{}:
			default:
			}
			return nil
		})
	}()
	return r
}

// wait waits until r delivered n events and returns them.
func (r *reader) wait(t *testing.T, n int, timeout time.Duration) []journal.QueriedEvent {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		got := append([]journal.QueriedEvent(nil), r.got...)
		r.mu.Unlock()
		if len(got) >= n {
			return got
		}
		select {
		case <-r.more:
		case err := <-r.done:
			t.Fatalf("%s ended: %v", r.name, err)
		case <-deadline.C:
			t.Fatalf("%s delivered %d of %d events in %v", r.name, len(got), n, timeout)
		}
	}
}

// checkStream asserts offset order, each event once, per-pid seq order.
func checkStream(t *testing.T, name string, got []journal.QueriedEvent) map[string]uint64 {
	t.Helper()
	last := map[string]uint64{}
	for i, e := range got {
		if e.SeqNr != last[e.PersistenceID]+1 {
			t.Fatalf("%s: %s seq %d delivered after seq %d", name, e.PersistenceID, e.SeqNr, last[e.PersistenceID])
		}
		last[e.PersistenceID] = e.SeqNr
		if i > 0 && !got[i-1].Offset.Less(e.Offset) {
			t.Fatalf("%s: offset %v after %v", name, e.Offset, got[i-1].Offset)
		}
	}
	return last
}

func current(t *testing.T, j journal.Queries, typ string) []journal.QueriedEvent {
	t.Helper()
	var got []journal.QueriedEvent
	if err := j.EventsBySlices(context.Background(), typ, journal.AllSlices, journal.Offset{}, journal.Current, func(e journal.QueriedEvent) error {
		got = append(got, e)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return got
}

// TestQueriesDoNotPassAnOpenTransaction is the read side's promise: one
// transaction holds its row uncommitted while the journal's group commit
// (many goroutines), a second journal on its own pool and a separate OS
// process commit later rows. No query, live or current, in this process or
// woken from another, delivers any of those rows while the slow one is
// open; once it commits, every query delivers every event exactly once,
// the slow one first, each persistence id in order.
func TestQueriesDoNotPassAnOpenTransaction(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dsn := pg.MigratedDSN(t)
	typ := fmt.Sprintf("G%d", time.Now().UnixNano())
	tag := typ + "-all"
	// Polling is off (an hour): the live queries must be woken by writes.
	cfg := postgres.Config{QueryPageSize: 7, QueryPollInterval: time.Hour}
	j1 := postgres.New(pgtest.NewPool(t, dsn, nil), cfg)
	defer j1.Close()
	j2 := postgres.New(pgtest.NewPool(t, dsn, nil), cfg)
	defer j2.Close()
	j3 := postgres.New(pgtest.NewPool(t, dsn, nil), cfg) // never writes: woken by NOTIFY alone
	defer j3.Close()

	slow, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close(context.Background())
	tx, err := slow.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	slowPid := typ + "|slow"
	var slowXid int64
	if err := tx.QueryRow(ctx, `INSERT INTO event_journal (persistence_id, seq_nr, write_timestamp, manifest, payload, tags, writer_id, entity_type, slice)
		VALUES ($1, 1, now(), 'm', '\x00', ARRAY[$2], 'slow', $3, $4) RETURNING tx_id::text::int8`,
		slowPid, tag, typ, journal.SliceOf(slowPid)).Scan(&slowXid); err != nil {
		t.Fatal(err)
	}

	var released atomic.Bool // set just before the slow transaction commits
	halves, _ := journal.SplitSlices(2)
	bySlices := func(j *postgres.Journal, r journal.SliceRange) func(context.Context, func(journal.QueriedEvent) error) error {
		return func(ctx context.Context, fn func(journal.QueriedEvent) error) error {
			return j.EventsBySlices(ctx, typ, r, journal.Offset{}, journal.Live, fn)
		}
	}
	readers := []*reader{
		startReader(t, "j1 all slices", &released, bySlices(j1, journal.AllSlices)),
		startReader(t, "j1 low half", &released, bySlices(j1, halves[0])),
		startReader(t, "j1 high half", &released, bySlices(j1, halves[1])),
		startReader(t, "j1 by tag", &released, func(ctx context.Context, fn func(journal.QueriedEvent) error) error {
			return j1.EventsByTag(ctx, tag, journal.Offset{}, journal.Live, fn)
		}),
		startReader(t, "j2 all slices", &released, bySlices(j2, journal.AllSlices)),
		startReader(t, "j3 all slices (notified only)", &released, bySlices(j3, journal.AllSlices)),
	}

	const each = 30
	proc := writerProcess(t, dsn, typ+"|proc", tag, each)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); writeMany(t, j1, typ+"|j1-", 8, each, tag) }()
	go func() { defer wg.Done(); writeMany(t, j2, typ+"|j2-", 4, each, tag) }()
	wg.Wait()
	if err := proc.Wait(); err != nil {
		t.Fatalf("writer process: %v", err)
	}
	later := (8 + 4 + 4) * each
	var stored int
	if err := connect(t, dsn).QueryRow(ctx, `SELECT count(*) FROM event_journal WHERE entity_type = $1`, typ).Scan(&stored); err != nil || stored != later {
		t.Fatalf("%d later rows committed (%v), want %d", stored, err, later)
	}
	// Every later row is committed, and none may be read yet.
	for _, j := range []*postgres.Journal{j1, j2} {
		if got := current(t, j, typ); len(got) != 0 {
			t.Fatalf("a Current query delivered %d events past the open transaction (first %s seq %d)", len(got), got[0].PersistenceID, got[0].SeqNr)
		}
	}

	released.Store(true)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	for _, r := range readers {
		r.mu.Lock()
		early := r.early
		r.mu.Unlock()
		if len(early) > 0 {
			t.Fatalf("%s delivered %d events while the slow transaction (xid %d) was open, first %s seq %d (tx %d)", r.name, len(early), slowXid, early[0].PersistenceID, early[0].SeqNr, early[0].Offset.Tx)
		}
	}
	// The raw commit notifies nobody; a journal write after it does.
	after := journal.Event{PersistenceID: typ + "|after", SeqNr: 1, Manifest: "m", Tags: []string{tag}, WriterID: "w", Timestamp: time.Now()}
	if err := j1.Write(ctx, []journal.Event{after}); err != nil {
		t.Fatal(err)
	}
	total := later + 2

	all := readers[0].wait(t, total, 2*time.Minute)
	inHalf := [2]int{}
	for _, e := range all {
		if halves[0].Contains(e.Slice) {
			inHalf[0]++
		} else {
			inHalf[1]++
		}
	}
	for _, r := range readers {
		n := total
		switch r {
		case readers[1]:
			n = inHalf[0]
		case readers[2]:
			n = inHalf[1]
		}
		got := r.wait(t, n, 2*time.Minute)
		if len(got) != n {
			t.Fatalf("%s delivered %d events, want %d", r.name, len(got), n)
		}
		checkStream(t, r.name, got)
	}
	last := checkStream(t, "j1 all slices", all)
	if len(all) != total || len(last) != 8+4+4+2 {
		t.Fatalf("delivered %d events of %d pids, want %d of %d", len(all), len(last), total, 8+4+4+2)
	}
	if all[0].PersistenceID != slowPid || all[0].Offset.Tx != uint64(slowXid) {
		t.Fatalf("first delivered %s (tx %d), want the slow transaction's %s (tx %d)", all[0].PersistenceID, all[0].Offset.Tx, slowPid, slowXid)
	}
	// Each half delivers its slices only.
	for i, half := range [][]journal.QueriedEvent{readers[1].wait(t, 0, 0), readers[2].wait(t, 0, 0)} {
		for _, e := range half {
			if !halves[i].Contains(e.Slice) {
				t.Fatalf("slice %d delivered by the reader of %v", e.Slice, halves[i])
			}
		}
	}
	// A Current query now reads the same stream.
	cur := current(t, j2, typ)
	if len(cur) != total {
		t.Fatalf("Current delivered %d events, want %d", len(cur), total)
	}
	for i := range cur {
		if cur[i].Offset != all[i].Offset {
			t.Fatalf("Current's event %d at %v, the live query's at %v", i, cur[i].Offset, all[i].Offset)
		}
	}
	for _, r := range readers {
		r.cancel()
		if err := <-r.done; !errors.Is(err, context.Canceled) {
			t.Fatalf("%s ended with %v, want context.Canceled", r.name, err)
		}
	}
}

func connect(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// TestQueriesSkipAnAbortedTransaction: rows of a transaction that rolls
// back never appear, and the rows committed after it are delivered once it
// has ended; nothing wakes the query then but its poll.
func TestQueriesSkipAnAbortedTransaction(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dsn := pg.MigratedDSN(t)
	typ := fmt.Sprintf("A%d", time.Now().UnixNano())
	j := postgres.New(pgtest.NewPool(t, dsn, nil), postgres.Config{QueryPollInterval: 20 * time.Millisecond})
	defer j.Close()

	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, pid := range []string{typ + "|aborted", typ + "|w0"} { // w0 seq 1 too: the journal's write of it waits, then wins
		if _, err := tx.Exec(ctx, `INSERT INTO event_journal (persistence_id, seq_nr, write_timestamp, manifest, payload, writer_id, entity_type, slice)
			VALUES ($1, 1, now(), 'aborted', '\x00', 'aborted', $2, $3)`, pid, typ, journal.SliceOf(pid)); err != nil {
			t.Fatal(err)
		}
	}
	var released atomic.Bool
	r := startReader(t, "live", &released, func(ctx context.Context, fn func(journal.QueriedEvent) error) error {
		return j.EventsBySlices(ctx, typ, journal.AllSlices, journal.Offset{}, journal.Live, fn)
	})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); writeMany(t, j, typ+"|w", 3, 10, "") }() // w1, w2 commit; w0 waits on the open row's lock
	// w1 and w2 committed, yet nothing is visible.
	poll(t, "w1 and w2 committed", time.Minute, func() bool {
		var n int
		_ = connect(t, dsn).QueryRow(ctx, `SELECT count(*) FROM event_journal WHERE persistence_id IN ($1, $2)`, typ+"|w1", typ+"|w2").Scan(&n)
		return n == 20
	})
	if got := current(t, j, typ); len(got) != 0 {
		t.Fatalf("a Current query delivered %d events past the open transaction", len(got))
	}
	released.Store(true)
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	got := r.wait(t, 30, time.Minute)
	if len(r.early) > 0 {
		t.Fatalf("%d events delivered while the transaction was open", len(r.early))
	}
	checkStream(t, "live", got)
	for _, e := range append(got, current(t, j, typ)...) {
		if e.PersistenceID == typ+"|aborted" || e.Manifest == "aborted" {
			t.Fatalf("the aborted transaction's row %s seq %d was delivered", e.PersistenceID, e.SeqNr)
		}
	}
	if n := len(current(t, j, typ)); n != 30 {
		t.Fatalf("Current delivered %d events, want 30", n)
	}
}
