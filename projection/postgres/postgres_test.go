package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/internal/pgtest"
	"github.com/shoal-dev/shoal/journal"
	"github.com/shoal-dev/shoal/projection"
	"github.com/shoal-dev/shoal/projection/postgres"
	"github.com/shoal-dev/shoal/projection/projectiontest"
)

var (
	pg      = pgtest.New()
	pgBench = pgtest.New(pgtest.WithFsync())
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m, pg, pgBench)) }

func TestStore(t *testing.T) {
	projectiontest.RunStore(t, func(t *testing.T) projection.Store { return postgres.NewStore(pg.Pool(t)) })
}

type Added struct{ N int }

// counters is a read model: per persistence id, the sum of its Added
// events and how many were applied. Its fold from the source is what an
// exactly-once projection must leave.
type counters struct {
	t     testing.TB
	pool  *pgxpool.Pool
	store *postgres.Store
	src   *projectiontest.Source
	reg   *codec.Registry
	seqs  map[string]uint64
	fold  map[string][2]int64 // pid -> total, events
}

func newCounters(t testing.TB, pool *pgxpool.Pool) *counters {
	t.Helper()
	if _, err := pool.Exec(context.Background(), `CREATE TABLE counters (id text PRIMARY KEY, total bigint NOT NULL, events bigint NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	reg := codec.NewRegistry()
	codec.MustRegister[Added](reg, "added")
	return &counters{t: t, pool: pool, store: postgres.NewStore(pool), src: projectiontest.NewSource(), reg: reg,
		seqs: map[string]uint64{}, fold: map[string][2]int64{}}
}

func (c *counters) add(pid string, n int) journal.Offset {
	c.t.Helper()
	pid = "Counter|" + pid
	m, payload, err := c.reg.Encode(Added{N: n})
	if err != nil {
		c.t.Fatal(err)
	}
	c.seqs[pid]++
	f := c.fold[pid]
	c.fold[pid] = [2]int64{f[0] + int64(n), f[1] + 1}
	return c.src.Append(journal.Event{PersistenceID: pid, SeqNr: c.seqs[pid], Manifest: m, Payload: payload, Timestamp: time.Now(), WriterID: "w"})
}

// apply is the exactly-once handler's body: one UPDATE (or INSERT) per event.
func apply(ctx context.Context, tx pgx.Tx, env projection.Envelope[Added]) error {
	_, err := tx.Exec(ctx, `INSERT INTO counters (id, total, events) VALUES ($1, $2, 1)
		ON CONFLICT (id) DO UPDATE SET total = counters.total + excluded.total, events = counters.events + 1`,
		env.PersistenceID, env.Event.N)
	return err
}

func clearCounters(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `DELETE FROM counters`)
	return err
}

func (c *counters) config(s projection.Settings) projection.Config {
	return projection.Config{Name: "counters", EntityType: "Counter", Slices: journal.AllSlices, Source: c.src, Codec: c.reg, Settings: s}
}

func (c *counters) project(s projection.Settings, handle func(context.Context, pgx.Tx, projection.Envelope[Added]) error) *projection.Projection {
	c.t.Helper()
	if handle == nil {
		handle = apply
	}
	p, err := projection.New(c.config(s), postgres.ExactlyOnce(c.store, handle, clearCounters))
	if err != nil {
		c.t.Fatal(err)
	}
	return p
}

// check compares the read model with the fold of the events.
func (c *counters) check(fold map[string][2]int64) {
	c.t.Helper()
	rows, err := c.pool.Query(context.Background(), `SELECT id, total, events FROM counters`)
	if err != nil {
		c.t.Fatal(err)
	}
	got := map[string][2]int64{}
	for rows.Next() {
		var id string
		var total, events int64
		if err := rows.Scan(&id, &total, &events); err != nil {
			c.t.Fatal(err)
		}
		got[id] = [2]int64{total, events}
	}
	if err := rows.Err(); err != nil {
		c.t.Fatal(err)
	}
	if len(got) != len(fold) {
		c.t.Errorf("read model has %d rows, the fold %d", len(got), len(fold))
	}
	for id, want := range fold {
		if got[id] != want {
			c.t.Errorf("%s: read model (total, events) %v, fold %v", id, got[id], want)
		}
	}
}

func settings() projection.Settings {
	s := projection.DefaultSettings()
	s.Retry = projection.Retry{InitialInterval: 10 * time.Millisecond, MaxInterval: 200 * time.Millisecond, Multiplier: 2, MaxRetries: 2}
	return s
}

// poll waits for cond, failing t at the deadline.
func poll(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

type running struct {
	cancel context.CancelFunc
	err    error
	ended  chan struct{} // closed once err holds Run's result
}

func run(p *projection.Projection) *running {
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, ended: make(chan struct{})}
	go func() {
		r.err = p.Run(ctx)
		close(r.ended)
	}()
	return r
}

// stop cancels the run and returns Run's result.
func (r *running) stop() error {
	r.cancel()
	<-r.ended
	return r.err
}

func TestExactlyOnceFold(t *testing.T) {
	c := newCounters(t, pg.Pool(t))
	for i := range 200 {
		c.add(fmt.Sprintf("c%d", i%7), i)
	}
	s := settings()
	s.StopAtEnd = true
	if err := c.project(s, nil).Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	c.check(c.fold)
	off, _, err := c.store.Offset(context.Background(), projection.Instance{Name: "counters", Slices: journal.AllSlices})
	if err != nil || off != c.src.Events()[199].Offset {
		t.Fatalf("stored offset %v, %v", off, err)
	}
}

func TestExactlyOnceGroupedAndRebuild(t *testing.T) {
	ctx := context.Background()
	c := newCounters(t, pg.Pool(t))
	for i := range 100 {
		c.add(fmt.Sprintf("c%d", i%5), 1)
	}
	groups := 0
	p, err := projection.New(c.config(settings()), postgres.ExactlyOnceGrouped(c.store, 16,
		func(ctx context.Context, tx pgx.Tx, envs []projection.Envelope[Added]) error {
			groups++
			for _, e := range envs {
				if err := apply(ctx, tx, e); err != nil {
					return err
				}
			}
			return nil
		}, clearCounters))
	if err != nil {
		t.Fatal(err)
	}
	r := run(p)
	defer r.stop()
	last := c.src.Events()[99].Offset
	poll(t, "the events handled", func() bool { return p.Status().Offset == last })
	c.check(c.fold)
	if groups >= 100 {
		t.Errorf("%d transactions for 100 events in groups of up to 16", groups)
	}
	// Rebuild: the read model is cleared with the offset's reset, then
	// folded again: the same result, not twice it.
	if err := p.Rebuild(ctx); err != nil {
		t.Fatal(err)
	}
	poll(t, "the rebuild", func() bool { return p.Status().Offset == last && p.Status().Handled == 200 })
	c.check(c.fold)
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
}

// TestHandlerFailureRollsBack: a handler that wrote, then failed, leaves
// nothing of that event behind; the dead letter and the offset commit
// together.
func TestHandlerFailureRollsBack(t *testing.T) {
	ctx := context.Background()
	c := newCounters(t, pg.Pool(t))
	c.add("a", 1)
	bad := c.add("b", 10)
	c.add("a", 100)
	delete(c.fold, "Counter|b")
	s := settings()
	s.StopAtEnd, s.OnFailure = true, projection.DeadLetterOnFailure
	p := c.project(s, func(ctx context.Context, tx pgx.Tx, env projection.Envelope[Added]) error {
		if err := apply(ctx, tx, env); err != nil {
			return err
		}
		if env.Event.N == 10 {
			return errors.New("rejected after writing")
		}
		return nil
	})
	if err := p.Run(ctx); err != nil {
		t.Fatal(err)
	}
	c.check(c.fold)
	dead, err := c.store.DeadLetters(ctx, p.Instance())
	if err != nil || len(dead) != 1 || dead[0].PersistenceID != "Counter|b" || dead[0].Offset != bad || dead[0].Error != "rejected after writing" {
		t.Fatalf("dead letters %+v, %v", dead, err)
	}
}

// TestKilledBeforeCommit: a runner stopped inside its handler, after the
// handler wrote, commits nothing; the next run handles the event again,
// once.
func TestKilledBeforeCommit(t *testing.T) {
	c := newCounters(t, pg.Pool(t))
	for i := range 10 {
		c.add("a", i)
	}
	inHandler := make(chan struct{})
	ctx, kill := context.WithCancel(context.Background())
	p := c.project(settings(), func(hctx context.Context, tx pgx.Tx, env projection.Envelope[Added]) error {
		if err := apply(hctx, tx, env); err != nil {
			return err
		}
		if env.Event.N == 5 {
			close(inHandler)
			<-hctx.Done() // killed here, between the handler's write and the commit
			return hctx.Err()
		}
		return nil
	})
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	<-inHandler
	kill()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	off, _, _ := c.store.Offset(context.Background(), p.Instance())
	if want := c.src.Events()[4].Offset; off != want {
		t.Fatalf("offset after the kill %v, want %v (before the killed event)", off, want)
	}
	s := settings()
	s.StopAtEnd = true
	if err := c.project(s, nil).Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	c.check(c.fold)
}

// TestFencing: a second runner is refused while the first holds the lease;
// once the first's lease expired (it was cut off) and the second took the
// instance, the first's transactions are refused (ErrFenced, it stops) and
// every event is in the read model once.
func TestFencing(t *testing.T) {
	ctx := context.Background()
	c := newCounters(t, pg.Pool(t))
	c.add("a", 1)
	s := settings()
	s.LeaseTTL = time.Hour // no renewal during the test: the test expires it
	s.Holder = "first"
	first := c.project(s, nil)
	r1 := run(first)
	defer r1.stop()
	poll(t, "the first runner to handle", func() bool { return first.Status().Handled == 1 })

	s.Holder = "second"
	second := c.project(s, nil)
	if err := second.Run(ctx); !errors.Is(err, projection.ErrInstanceHeld) {
		t.Fatalf("second Run while the first holds the lease = %v, want ErrInstanceHeld", err)
	}

	// The first is cut off past its lease: the second takes over.
	if _, err := c.pool.Exec(ctx, `UPDATE projection_offsets SET expires_at = clock_timestamp() - interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	r2 := run(second)
	defer r2.stop()
	poll(t, "the second runner to take the instance", func() bool { return second.Status().Running })
	for i := range 20 {
		c.add("a", i)
	}
	select {
	case <-r1.ended:
		if !errors.Is(r1.err, projection.ErrFenced) {
			t.Fatalf("first Run = %v, want ErrFenced", r1.err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the first runner was not fenced")
	}
	last := c.src.Events()[20].Offset
	poll(t, "the second runner to catch up", func() bool { return second.Status().Offset == last })
	c.check(c.fold)
	if first.Status().Epoch >= second.Status().Epoch {
		t.Fatalf("epochs %d, %d", first.Status().Epoch, second.Status().Epoch)
	}
}

// postgresGrouped is the grouped exactly-once counter handler; txs counts
// its calls.
func postgresGrouped(c *counters, size int, txs *atomic.Int64) projection.Handler[Added] {
	return postgres.ExactlyOnceGrouped(c.store, size, func(ctx context.Context, tx pgx.Tx, envs []projection.Envelope[Added]) error {
		txs.Add(1)
		for _, e := range envs {
			if err := apply(ctx, tx, e); err != nil {
				return err
			}
		}
		return nil
	}, clearCounters)
}

// TestLostCommitAcknowledgement calls the exactly-once handler as the
// runner retries it after a commit whose outcome it could not know: the
// second attempt finds the offset moved already and applies nothing.
func TestLostCommitAcknowledgement(t *testing.T) {
	ctx := context.Background()
	c := newCounters(t, pg.Pool(t))
	off := c.add("a", 7)
	h := postgres.ExactlyOnce(c.store, apply, nil)
	inst := projection.Instance{Name: "counters", Slices: journal.AllSlices}
	claim, err := c.store.Acquire(ctx, inst, "h", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	env := projection.Envelope[Added]{Event: Added{N: 7}, PersistenceID: "Counter|a", SeqNr: 1, Offset: off}
	for attempt := range 2 {
		if err := h.Handle(ctx, claim.Fence, []projection.Envelope[Added]{env}, journal.Offset{}, off); err != nil {
			t.Fatalf("attempt %d: %v", attempt, err)
		}
	}
	c.check(c.fold)
	// A stale fence is refused, and writes nothing.
	if _, err := c.store.Acquire(ctx, inst, "h", time.Minute); err != nil {
		t.Fatal(err)
	}
	next := c.add("a", 1)
	err = h.Handle(ctx, claim.Fence, []projection.Envelope[Added]{{Event: Added{N: 1}, PersistenceID: "Counter|a", SeqNr: 2, Offset: next}}, off, next)
	if !errors.Is(err, projection.ErrFenced) {
		t.Fatalf("Handle with a stale fence = %v, want ErrFenced", err)
	}
	c.fold["Counter|a"] = [2]int64{7, 1}
	c.check(c.fold)
}

func TestControlStore(t *testing.T) {
	projectiontest.RunControlStore(t, func(t *testing.T) projection.ControlStore { return postgres.NewStore(pg.Pool(t)) })
}
