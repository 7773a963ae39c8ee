// Package postgres is a journal.Journal on PostgreSQL (pgx/v5, pgxpool),
// using the event_journal tables of package migrations.
//
// # Group commit
//
// Write queues its events and waits. A few writer goroutines
// (Config.Writers) each take whatever writes are queued, up to
// Config.MaxBatchEvents events, and store them with one multi-row INSERT —
// one round trip and one commit for many entities. At most Config.Writers
// batches are in flight; while they are, the next ones fill, so under load
// batches grow. At rest a lone write goes out at once: when nothing is queued
// and a batch slot is free (and Config.MaxBatchWait does not ask to wait for
// company), Write sends it itself, as a one-row INSERT when it is a single
// event, without a hand-off to a writer goroutine.
//
// Each Write is atomic and gets its own result: a conflict on one
// persistence id never fails the other writes in its batch. The common case
// (no conflict) is one statement; if it hits a unique violation the batch is
// retried in a transaction with ON CONFLICT DO NOTHING, the rows of writes
// that did not go in whole are removed again, and those writes alone get a
// *journal.WriteConflictError — except a write that only missed rows taken
// by such a failed write (a stale incarnation's, say): it is tried again in
// the same transaction, so it fails only if it conflicts with what stays.
//
// Rows are inserted in (persistence id, seq nr) order, so concurrent batches
// take their index locks in one order and cannot deadlock.
//
// # Outcomes
//
// A write whose context ends while it is still queued is withdrawn and
// returns the context's error. Once a writer goroutine has taken it, Write
// waits for the outcome (at most Config.WriteTimeout) even when its context
// ends, so that a nil error means stored and an error means not stored. The
// exception, as with any database client, is a connection lost (or
// WriteTimeout reached) after the statement was sent and before its answer
// came back: then the write may or may not be stored. Callers treat a
// failed persist as "maybe stored": an entity stops and recovers from the
// journal.
//
// # Queries
//
// The journal answers journal.Queries (query.go): events by slice range and
// by tag, in commit order without gaps — a row is read only once no
// transaction that could commit a row before it is still open (see
// "Queries without gaps" in query.go). Live queries are woken by this
// journal's writes, by other processes' through LISTEN/NOTIFY, and poll
// as the fallback (notify.go).
//
// # Sides
//
// Built WithSideStore, the journal is a journal.SideWriter: a write may
// carry a side (an effect's reminder changes), which the side store writes
// in the transaction that stores the write's events. A batch with sides is
// sent as one pipeline (the insert, then the sides' statements), which
// Postgres runs as one implicit transaction: one round trip, like a batch
// without. The insert fails unless it stored every row; then (or on a
// conflict) nothing is stored, and the batch goes the transactional way of
// the conflict path, which learns each write's outcome before it writes
// the sides of the writes stored. If the side store fails, the whole batch
// fails and nothing is stored.
//
// # Deleted events
//
// DeleteTo records the highest deleted seq nr in event_journal_deleted.
// HighestSeqNr is the greater of that and the highest stored event, and a
// write at or below it is a conflict: a stale incarnation cannot reuse
// deleted sequence numbers.
package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/shoal-dev/shoal/cluster/lease"
	"github.com/shoal-dev/shoal/internal/metrics"
	"github.com/shoal-dev/shoal/journal"
)

// Config tunes the journal. Zero fields take the defaults of DefaultConfig.
type Config struct {
	// MaxBatchEvents bounds the events sent in one round trip. A single
	// Write with more events is still sent whole, alone. Default 2000.
	MaxBatchEvents int
	// MaxBatchWait is how long a writer goroutine holding a batch that is
	// not full waits for more writes before sending it. Zero (the default)
	// sends at once: batching then comes from the writes that queue while
	// other batches are in flight, which adds no latency at low load.
	MaxBatchWait time.Duration
	// Writers is the number of batches in flight at once; each holds a pool
	// connection while in flight, so the pool needs more connections than
	// this for reads to proceed. Default 4.
	Writers int
	// WriteTimeout bounds one batch's round trip. Default 30s.
	WriteTimeout time.Duration
	// ReplayPageSize is the number of events Replay fetches per query; at
	// most two pages are held in memory. Default 2000.
	ReplayPageSize int
	// QueryPageSize is the number of events a query fetches per
	// statement. Default 1000.
	QueryPageSize int
	// QueryPollInterval is how often a Live query that has caught up looks
	// for new events when nothing wakes it: writes of this journal wake it
	// at once, and writes of other processes through LISTEN/NOTIFY, so
	// polling only covers what sends no notification (a transaction outside
	// the journal that held the watermark back, a lost listener
	// connection). Default 1s.
	QueryPollInterval time.Duration
	// Metrics, when set, receives the journal's Prometheus collectors:
	// persist and replay latency, events per batch. Default nil: none.
	Metrics prometheus.Registerer
}

// DefaultConfig returns the defaults documented on Config.
func DefaultConfig() Config {
	return Config{
		MaxBatchEvents: 2000,
		MaxBatchWait:   0,
		Writers:        4,
		WriteTimeout:   30 * time.Second,
		ReplayPageSize: 2000,

		QueryPageSize:     1000,
		QueryPollInterval: time.Second,
	}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.MaxBatchEvents <= 0 {
		c.MaxBatchEvents = d.MaxBatchEvents
	}
	if c.MaxBatchWait < 0 {
		c.MaxBatchWait = 0
	}
	if c.Writers <= 0 {
		c.Writers = d.Writers
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = d.WriteTimeout
	}
	if c.ReplayPageSize <= 0 {
		c.ReplayPageSize = d.ReplayPageSize
	}
	if c.QueryPageSize <= 0 {
		c.QueryPageSize = d.QueryPageSize
	}
	if c.QueryPollInterval <= 0 {
		c.QueryPollInterval = d.QueryPollInterval
	}
	return c
}

// Stats counts what the writer goroutines did since New.
type Stats struct {
	Batches uint64 // round trips that stored writes
	Writes  uint64 // Write calls stored or refused in them
	Events  uint64 // events in them
	// ConflictBatches counts batches that met a unique violation and were
	// retried in a transaction to find the conflicting writes.
	ConflictBatches uint64
}

// Stats returns the journal's counters; Events/Batches is the mean batch size.
func (j *Journal) Stats() Stats {
	return Stats{
		Batches:         j.stats.batches.Load(),
		Writes:          j.stats.writes.Load(),
		Events:          j.stats.events.Load(),
		ConflictBatches: j.stats.conflictBatches.Load(),
	}
}

// ErrClosed is returned by Write after Close.
var ErrClosed = errors.New("journal/postgres: journal closed")

// Journal is a journal.Journal on PostgreSQL. Create it with New and stop
// its writer goroutines with Close; the pool stays the caller's.
type Journal struct {
	pool *pgxpool.Pool
	cfg  Config

	queue     chan *request
	slots     chan struct{} // one per batch in flight; at most Config.Writers
	closed    chan struct{}
	stats     struct{ batches, writes, events, conflictBatches atomic.Uint64 }
	closeOnce sync.Once
	wg        sync.WaitGroup
	m         *metrics.Journal // nil when Config.Metrics is

	live  wakeups   // wakes the Live queries: see notify.go
	fence *Fence    // nil without WithFence
	side  SideStore // nil without WithSideStore
	// insertSQL and insertOneSQL are the package's statements, fenced
	// when fence is set.
	insertSQL, insertOneSQL string
	// checkedInsertSQL is insertSQL failing unless it stores every row
	// (see flushSides).
	checkedInsertSQL string
	// beforeSend, for tests, runs as a batch is about to be sent: between
	// the holder's check and the statement, where a pause of the process
	// hurts most.
	beforeSend func()
}

// Fence makes a journal the writer of one node incarnation that holds a
// node lease (cluster/lease): a write goes to the database only while the
// incarnation holds its lease, which no shard of it may outlive. Two
// checks, so that an incarnation fenced while it was paused (a stop-the-
// world pause, a frozen container, a suspended VM) cannot write when it
// resumes, whatever its goroutines do first:
//
//   - Holds, the holder's own verdict by its monotonic clock
//     (lease.Holder.Holds), right before each statement is sent: a
//     process that resumes past its fence time refuses at once, before
//     the goroutine that fences it has run;
//   - in the statement itself, the lease row in node_leases must be
//     live in the database's time (not down, expires_at after
//     clock_timestamp()), and the statement holds it FOR KEY SHARE until
//     it commits. A write sent just before a pause and executed after the
//     expiry is refused; and cluster/lease/postgres's NodeLeaseExpired,
//     before it answers "expired", waits for that lock: so every write
//     that saw the lease live has committed (and is seen by the next
//     incarnation's recovery) by the time the shards may move.
//
// A refused write stores nothing and fails with an error wrapping
// lease.ErrFenced.
type Fence struct {
	NodeID      string
	Incarnation uint64
	// Holds reports whether the lease is held by the holder's clock; nil
	// leaves the database's check alone.
	Holds func() bool
}

// Option configures a Journal.
type Option func(*Journal)

// WithFence makes every write check the node lease f names (see Fence).
func WithFence(f Fence) Option { return func(j *Journal) { j.fence = &f } }

// SideStore writes the sides of writes (journal.Side) in the transaction
// that stores their events (timers/reminder/postgres is one).
type SideStore interface {
	SideStore() string
	// CheckSide validates a side as WriteWithSide takes it, before the
	// write is queued.
	CheckSide(side journal.Side) error
	// QueueSides queues the statements that write the sides of the writes
	// of one batch that stored their events; the journal sends them in the
	// batch's transaction, after its insert.
	QueueSides(b *pgx.Batch, sides []journal.Side) error
	// SidesCommitted is called after that transaction committed.
	SidesCommitted(sides []journal.Side)
}

// WithSideStore makes the journal a journal.SideWriter for s: a batch that
// carries sides goes in one transaction with them (see "Sides" in the
// package doc).
func WithSideStore(s SideStore) Option { return func(j *Journal) { j.side = s } }

var _ journal.Journal = (*Journal)(nil)

// New returns a journal on pool, whose search_path must reach the tables of
// package migrations, and starts its writer goroutines.
func New(pool *pgxpool.Pool, cfg Config, opts ...Option) *Journal {
	cfg = cfg.withDefaults()
	j := &Journal{
		pool:   pool,
		cfg:    cfg,
		queue:  make(chan *request, 4*cfg.MaxBatchEvents),
		slots:  make(chan struct{}, cfg.Writers),
		closed: make(chan struct{}),
		m:      metrics.NewJournal(cfg.Metrics),
	}
	for _, o := range opts {
		o(j)
	}
	j.insertSQL, j.insertOneSQL = insertSQL, insertOneSQL
	j.checkedInsertSQL = checked(insertSQL, 10)
	if j.fence != nil {
		j.insertSQL = fenced(insertSQL, 11)
		j.insertOneSQL = fenced(insertOneSQL, 10)
		j.checkedInsertSQL = checked(j.insertSQL, 12)
	}
	j.live.init(pool)
	j.wg.Add(cfg.Writers)
	for range cfg.Writers {
		go j.writer()
	}
	return j
}

// Close stops the writer goroutines after their batches in flight; writes
// still queued fail with ErrClosed. It does not close the pool.
func (j *Journal) Close() error {
	j.closeOnce.Do(func() {
		close(j.closed)
		j.wg.Wait()
		for range j.cfg.Writers { // wait for the writes Write sends itself
			j.slots <- struct{}{}
		}
		j.live.close()
		for {
			select {
			case r := <-j.queue:
				if r.take() {
					r.reply(ErrClosed)
				}
			default:
				return
			}
		}
	})
	return nil
}

const (
	queued int32 = iota
	taken
	abandoned
)

type request struct {
	events []journal.Event
	side   journal.Side // nil for none
	state  atomic.Int32
	done   chan error  // Write: buffered, so the writer never blocks on a caller
	cb     func(error) // WriteAsync
	m      *metrics.Journal
	start  time.Time // when m is set
}

// newRequest is a request for events, timed when metrics are on.
func (j *Journal) newRequest(events []journal.Event) *request {
	r := &request{events: events, m: j.m}
	if j.m != nil {
		r.start = time.Now()
	}
	return r
}

// reply hands r its outcome.
func (r *request) reply(err error) {
	if r.m != nil {
		r.m.Persisted(time.Since(r.start))
	}
	if r.cb != nil {
		r.cb(err)
		return
	}
	r.done <- err
}

// take claims r for a batch; false if its caller gave up first.
func (r *request) take() bool { return r.state.CompareAndSwap(queued, taken) }

// abandon withdraws r before a writer takes it; false if one already did.
func (r *request) abandon() bool { return r.state.CompareAndSwap(queued, abandoned) }

// check is journal.Validate plus the bigint range of the seq_nr column.
func check(events []journal.Event) error {
	if err := journal.Validate(events); err != nil {
		return err
	}
	if last := events[len(events)-1].SeqNr; last > math.MaxInt64 {
		return fmt.Errorf("%w: %s: seq %d beyond the journal's range", journal.ErrRejected, events[0].PersistenceID, last)
	}
	return nil
}

// Write implements journal.Journal.
func (j *Journal) Write(ctx context.Context, events []journal.Event) error {
	return j.WriteWithSide(ctx, events, nil)
}

var _ journal.SideWriter = (*Journal)(nil)

// SideStore implements journal.SideWriter.
func (j *Journal) SideStore() string {
	if j.side == nil {
		return ""
	}
	return j.side.SideStore()
}

// checkSide refuses a side the journal cannot write.
func (j *Journal) checkSide(side journal.Side) error {
	switch {
	case side == nil:
		return nil
	case j.side == nil:
		return fmt.Errorf("%w: a side for %q, and the journal has no side store", journal.ErrRejected, side.SideStore())
	case side.SideStore() != j.side.SideStore():
		return fmt.Errorf("%w: a side for %q, and the journal's side store is %q", journal.ErrRejected, side.SideStore(), j.side.SideStore())
	}
	if err := j.side.CheckSide(side); err != nil {
		return fmt.Errorf("%w: %w", journal.ErrRejected, err)
	}
	return nil
}

// WriteWithSide implements journal.SideWriter: Write, with side written
// in the same transaction.
func (j *Journal) WriteWithSide(ctx context.Context, events []journal.Event, side journal.Side) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := check(events); err != nil {
		return err
	}
	if err := j.checkSide(side); err != nil {
		return err
	}
	r := j.newRequest(events)
	r.side = side
	r.done = make(chan error, 1)
	if j.cfg.MaxBatchWait == 0 && len(j.queue) == 0 {
		select {
		case j.slots <- struct{}{}:
			// Idle: nothing to batch with, so no hand-off either.
			select {
			case <-j.closed:
				<-j.slots
				return ErrClosed
			default:
			}
			r.state.Store(taken)
			j.flush([]*request{r}, len(events))
			<-j.slots
			return <-r.done
		default:
		}
	}
	select {
	case j.queue <- r:
	case <-ctx.Done():
		return ctx.Err()
	case <-j.closed:
		return ErrClosed
	}
	select {
	case err := <-r.done:
		return err
	case <-ctx.Done():
		if r.abandon() {
			return ctx.Err()
		}
	case <-j.closed:
		if r.abandon() {
			return ErrClosed
		}
	}
	// A writer holds it: its outcome is the truth, wait for it.
	return <-r.done
}

var _ journal.AsyncWriter = (*Journal)(nil)

// WriteAsync implements journal.AsyncWriter: the write joins the same
// batches as Write's, and done is called with its outcome from a writer
// goroutine (or at once for an ill-formed batch or a closed journal), so no
// goroutine waits for it. done must return quickly and must not wait for
// another write of this journal. events must not change until done is
// called. WriteAsync blocks only while the queue is full (4 ×
// Config.MaxBatchEvents writes).
func (j *Journal) WriteAsync(events []journal.Event, done func(error)) {
	j.WriteAsyncWithSide(events, nil, done)
}

// WriteAsyncWithSide implements journal.SideWriter: WriteAsync, with side
// written in the same transaction.
func (j *Journal) WriteAsyncWithSide(events []journal.Event, side journal.Side, done func(error)) {
	if err := check(events); err != nil {
		done(err)
		return
	}
	if err := j.checkSide(side); err != nil {
		done(err)
		return
	}
	r := j.newRequest(events)
	r.side = side
	r.cb = done
	select {
	case j.queue <- r:
	case <-j.closed:
		done(ErrClosed)
		return
	}
	// Close may have drained the queue before r went in.
	select {
	case <-j.closed:
		if r.abandon() {
			done(ErrClosed)
		}
	default:
	}
}

// writer is one group-commit loop.
func (j *Journal) writer() {
	defer j.wg.Done()
	var carry *request
	for {
		batch, n := make([]*request, 0, 64), 0
		add := func(r *request) bool { // false when r does not fit
			if n > 0 && n+len(r.events) > j.cfg.MaxBatchEvents {
				return false
			}
			if r.take() {
				batch = append(batch, r)
				n += len(r.events)
			}
			return true
		}
		// Wait for a write, then for a free slot, and only then claim it, so
		// that a write withdrawn meanwhile is not sent, and writes keep
		// queueing (to join this batch) while every slot is busy.
		first := carry
		carry = nil
		if first == nil {
			select {
			case first = <-j.queue:
			case <-j.closed:
				return
			}
		}
		select {
		case j.slots <- struct{}{}:
		case <-j.closed:
			if first.take() {
				first.reply(ErrClosed)
			}
			return
		}
		add(first)
		var timer <-chan time.Time
		var t *time.Timer
		if j.cfg.MaxBatchWait > 0 && n < j.cfg.MaxBatchEvents {
			t = time.NewTimer(j.cfg.MaxBatchWait)
			timer = t.C
		}
	fill:
		for n < j.cfg.MaxBatchEvents {
			select {
			case r := <-j.queue:
				if !add(r) {
					carry = r
					break fill
				}
				continue
			default:
			}
			if timer == nil {
				break
			}
			select {
			case r := <-j.queue:
				if !add(r) {
					carry = r
					break fill
				}
			case <-timer:
				break fill
			case <-j.closed:
				break fill
			}
		}
		if t != nil {
			t.Stop()
		}
		if len(batch) > 0 {
			j.flush(batch, n)
		}
		<-j.slots
	}
}

// The insert statements give entity_type and slice (journal.EntityTypeOf,
// journal.SliceOf); tx_id takes its default, the writing transaction's id.
const insertSQL = `INSERT INTO event_journal
	(persistence_id, seq_nr, write_timestamp, manifest, payload, tags, writer_id, entity_type, slice)
SELECT i.pid, i.seq, i.ts, i.manifest, i.payload, coalesce(nullif(i.tags, '')::text[], '{}'), i.writer, i.etype, i.slice
FROM unnest($1::text[], $2::bigint[], $3::timestamptz[], $4::text[], $5::bytea[], $6::text[], $7::text[], $8::bigint[], $9::text[], $10::smallint[])
	WITH ORDINALITY AS i(pid, seq, ts, manifest, payload, tags, writer, first_seq, etype, slice, n)
WHERE NOT EXISTS (
	SELECT 1 FROM event_journal_deleted d
	WHERE d.persistence_id = i.pid AND d.deleted_to >= i.first_seq)
ORDER BY i.n`

// insertOneSQL is insertSQL for a batch of one event.
const insertOneSQL = `INSERT INTO event_journal
	(persistence_id, seq_nr, write_timestamp, manifest, payload, tags, writer_id, entity_type, slice)
SELECT $1::text, $2::bigint, $3::timestamptz, $4::text, $5::bytea, coalesce(nullif($6::text, '')::text[], '{}'), $7::text, $8::text, $9::smallint
WHERE NOT EXISTS (
	SELECT 1 FROM event_journal_deleted d
	WHERE d.persistence_id = $1::text AND d.deleted_to >= $2::bigint)`

// fenceSQL selects, and locks FOR KEY SHARE, the writer's node lease row
// while it is live in the database's time: the rows of the fenced
// statements go in only when it returns one. FOR KEY SHARE leaves the
// holder's renewals (FOR NO KEY UPDATE) free; NodeLeaseExpired's FOR
// UPDATE waits for it.
const fenceSQL = `SELECT 1 FROM node_leases
	WHERE node_id = $%d::text AND incarnation = $%d::bigint AND NOT down AND expires_at > clock_timestamp()
	FOR KEY SHARE`

// fenced returns an insert statement that stores nothing unless the
// writer's node lease is live (fenceSQL), whose node id and incarnation
// are its parameters at and after param.
func fenced(insert string, param int) string {
	head, tail, ok := strings.Cut(insert, "WHERE NOT EXISTS (")
	if !ok {
		panic("journal/postgres: an insert statement without its WHERE")
	}
	return "WITH fence AS (" + fmt.Sprintf(fenceSQL, param, param+1) + ")\n" +
		head + "WHERE EXISTS (SELECT 1 FROM fence) AND NOT EXISTS (" + tail
}

// fenceArgs are the fenced statements' extra parameters.
func (j *Journal) fenceArgs() []any {
	if j.fence == nil {
		return nil
	}
	return []any{j.fence.NodeID, int64(j.fence.Incarnation)}
}

// holds reports, by the holder's clock, whether the writer may write:
// nil, or an error wrapping lease.ErrFenced.
func (j *Journal) holds() error {
	if j.fence != nil && j.fence.Holds != nil && !j.fence.Holds() {
		return fmt.Errorf("%w: %s#%d no longer holds its node lease", lease.ErrFenced, j.fence.NodeID, j.fence.Incarnation)
	}
	return nil
}

// leaseLive reports whether the writer's node lease is live in the
// database now. Expired or down, it never comes back: a statement that
// stored nothing while it is not live was refused by the fence.
func (j *Journal) leaseLive(ctx context.Context) (bool, error) {
	var live bool
	err := j.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM node_leases
		WHERE node_id = $1 AND incarnation = $2 AND NOT down AND expires_at > clock_timestamp())`, j.fenceArgs()...).Scan(&live)
	return live, err
}

// insertArgs are the column arrays of one batch.
type insertArgs struct {
	pids, manifests, writers []string
	seqs, firsts             []int64
	types                    []string // entity type of each row
	slices                   []int16
	ts                       []time.Time
	payloads                 [][]byte
	tags                     []string // array literals, "" for none
	req                      []int    // request index of each row
}

func buildArgs(batch []*request, n int) *insertArgs {
	// One lock order for every batch: by persistence id, then seq nr (the
	// events of a write are consecutive), so writers cannot deadlock. Ties
	// (two writes claiming the same seq nrs) keep queue order.
	order := make([]int, len(batch))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		ea, eb := &batch[a].events[0], &batch[b].events[0]
		return cmp.Or(strings.Compare(ea.PersistenceID, eb.PersistenceID), cmp.Compare(ea.SeqNr, eb.SeqNr), cmp.Compare(a, b))
	})
	a := &insertArgs{
		pids: make([]string, 0, n), manifests: make([]string, 0, n), writers: make([]string, 0, n),
		seqs: make([]int64, 0, n), firsts: make([]int64, 0, n), ts: make([]time.Time, 0, n),
		payloads: make([][]byte, 0, n), tags: make([]string, 0, n), req: make([]int, 0, n),
		types: make([]string, 0, n), slices: make([]int16, 0, n),
	}
	for _, i := range order {
		first := int64(batch[i].events[0].SeqNr)
		pid := batch[i].events[0].PersistenceID // one per write
		typ, slice := journal.EntityTypeOf(pid), int16(journal.SliceOf(pid))
		for k := range batch[i].events {
			e := &batch[i].events[k]
			payload := e.Payload
			if payload == nil {
				payload = []byte{}
			}
			a.pids = append(a.pids, e.PersistenceID)
			a.seqs = append(a.seqs, int64(e.SeqNr))
			a.firsts = append(a.firsts, first)
			a.ts = append(a.ts, e.Timestamp)
			a.manifests = append(a.manifests, e.Manifest)
			a.payloads = append(a.payloads, payload)
			a.tags = append(a.tags, tagsLiteral(e.Tags))
			a.writers = append(a.writers, e.WriterID)
			a.types = append(a.types, typ)
			a.slices = append(a.slices, slice)
			a.req = append(a.req, i)
		}
	}
	return a
}

func (a *insertArgs) values() []any {
	return []any{a.pids, a.seqs, a.ts, a.manifests, a.payloads, a.tags, a.writers, a.firsts, a.types, a.slices}
}

// tagsLiteral renders tags as a PostgreSQL array literal; "" for none.
func tagsLiteral(tags []string) string {
	if len(tags) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteByte('{')
	for i, t := range tags {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('"')
		for _, c := range []byte(t) {
			if c == '"' || c == '\\' {
				b.WriteByte('\\')
			}
			b.WriteByte(c)
		}
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

// flush stores one batch and answers its writes.
func (j *Journal) flush(batch []*request, n int) {
	ctx, cancel := context.WithTimeout(context.Background(), j.cfg.WriteTimeout)
	defer cancel()
	args := buildArgs(batch, n)
	results := make([]error, len(batch))
	var tag pgconn.CommandTag
	if j.beforeSend != nil {
		j.beforeSend()
	}
	err := j.holds()
	sides := hasSides(batch)
	switch {
	case err != nil:
	case sides:
		err = j.flushSides(ctx, batch, args, results)
	case n == 1: // a lone event: a plain one-row INSERT is cheaper to send and to plan
		tag, err = j.pool.Exec(ctx, j.insertOneSQL, append([]any{args.pids[0], args.seqs[0], args.ts[0], args.manifests[0], args.payloads[0], args.tags[0], args.writers[0], args.types[0], args.slices[0]}, j.fenceArgs()...)...)
	default:
		tag, err = j.pool.Exec(ctx, j.insertSQL, append(args.values(), j.fenceArgs()...)...)
	}
	switch {
	case sides:
	case err == nil && tag.RowsAffected() == int64(n):
		// The common case: everything stored.
	case err == nil && tag.RowsAffected() == 0 && j.fence != nil:
		// Refused by the fence, or every write below its deletion mark.
		err = j.fencedOrDeleted(ctx, batch, results)
	case err == nil:
		// Some writes were below their pid's deletion mark and stored nothing.
		err = j.markDeleted(ctx, batch, results)
	case isCode(err, "23505"): // unique_violation: find whose
		j.stats.conflictBatches.Add(1)
		err = j.flushConflicting(ctx, batch, args, results)
	}
	// Whatever the outcome (an aborted batch may have held the queries'
	// watermark back), wake the live queries.
	j.live.written()
	j.stats.batches.Add(1)
	j.m.Batch(n)
	j.stats.writes.Add(uint64(len(batch)))
	j.stats.events.Add(uint64(n))
	for i, r := range batch {
		switch {
		case err != nil:
			ev := r.events
			r.reply(fmt.Errorf("journal/postgres: write %s seq %d..%d: %w", ev[0].PersistenceID, ev[0].SeqNr, ev[len(ev)-1].SeqNr, err))
		default:
			r.reply(results[i])
		}
	}
}

// markDeleted sets a conflict on the writes of batch at or below their
// pid's deletion mark: the statement stored none of their rows.
func (j *Journal) markDeleted(ctx context.Context, batch []*request, results []error) error {
	pids := make([]string, len(batch))
	for i, r := range batch {
		pids[i] = r.events[0].PersistenceID
	}
	rows, err := j.pool.Query(ctx, `SELECT persistence_id, deleted_to FROM event_journal_deleted WHERE persistence_id = ANY($1)`, pids)
	if err != nil {
		return fmt.Errorf("read deletion marks: %w", err)
	}
	marks := map[string]int64{}
	var pid string
	var to int64
	_, err = pgx.ForEachRow(rows, []any{&pid, &to}, func() error {
		marks[pid] = to
		return nil
	})
	if err != nil {
		return fmt.Errorf("read deletion marks: %w", err)
	}
	for i, r := range batch {
		first := r.events[0]
		if to, ok := marks[first.PersistenceID]; ok && int64(first.SeqNr) <= to {
			results[i] = &journal.WriteConflictError{PersistenceID: first.PersistenceID, SeqNr: first.SeqNr}
		}
	}
	return nil
}

// flushConflicting stores the batch in a transaction that skips
// conflicting rows and removes the rows of writes that did not go in whole,
// in rounds. A write that misses a row another write of the batch took is
// not necessarily in conflict: if that other write failed (say a stale
// incarnation's, sorted first, whose own first row conflicts), its rows are
// removed and the write is tried again in the next round. A write is in
// conflict when a row it misses is held by an event stored before (or by
// another transaction), or by a write of this batch that went in whole. The
// first write of each round is decided in that round, so the rounds end.
func (j *Journal) flushConflicting(ctx context.Context, batch []*request, args *insertArgs, results []error) error {
	tx, err := j.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // after Commit it is a no-op
	if j.fence != nil {
		// Locked for the whole transaction: NodeLeaseExpired waits for
		// its commit (see Fence).
		rows, err := tx.Query(ctx, fmt.Sprintf(fenceSQL, 1, 2), j.fenceArgs()...)
		if err != nil {
			return err
		}
		live := rows.Next()
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if !live {
			return fmt.Errorf("%w: the node lease of %s#%d is not live in the database", lease.ErrFenced, j.fence.NodeID, j.fence.Incarnation)
		}
	}
	type key struct {
		pid string
		seq int64
	}
	pending := make([]bool, len(batch))
	for i := range pending {
		pending[i] = true
	}
	for round := args; round != nil; {
		rows, err := tx.Query(ctx, j.insertSQL+"\nON CONFLICT DO NOTHING RETURNING persistence_id, seq_nr", append(round.values(), j.fenceArgs()...)...)
		if err != nil {
			return err
		}
		inserted := map[key]bool{}
		var k key
		if _, err := pgx.ForEachRow(rows, []any{&k.pid, &k.seq}, func() error {
			inserted[k] = true
			return nil
		}); err != nil {
			return err
		}
		// Rows went in in round order, so an inserted (pid, seq) that
		// several writes of the round share belongs to the first of them.
		owner := map[key]int{}
		whole := map[int]bool{}
		for row, req := range round.req {
			whole[req] = true
			if k := (key{round.pids[row], round.seqs[row]}); inserted[k] {
				if _, taken := owner[k]; !taken {
					owner[k] = req
				}
			}
		}
		for row, req := range round.req {
			if owner[key{round.pids[row], round.seqs[row]}] != req || !inserted[key{round.pids[row], round.seqs[row]}] {
				whole[req] = false
			}
		}
		// The conflict of each write that did not go in whole: the lowest
		// seq it misses to a row that stays; -1 if every row it misses
		// belongs to writes that did not go in whole either.
		conflict := map[int]int64{}
		var delPids []string
		var delSeqs []int64
		for row, req := range round.req {
			if whole[req] {
				continue
			}
			k := key{round.pids[row], round.seqs[row]}
			if _, seen := conflict[req]; !seen {
				conflict[req] = -1
			}
			o, taken := owner[k]
			switch {
			case taken && o == req:
				delPids = append(delPids, k.pid)
				delSeqs = append(delSeqs, k.seq)
			case !taken || whole[o]:
				if c := conflict[req]; c < 0 || k.seq < c {
					conflict[req] = k.seq
				}
			}
		}
		if len(delPids) > 0 {
			if _, err := tx.Exec(ctx, `DELETE FROM event_journal
				WHERE (persistence_id, seq_nr) IN (SELECT * FROM unnest($1::text[], $2::bigint[]))`, delPids, delSeqs); err != nil {
				return err
			}
		}
		retry := false
		for req := range whole {
			pending[req] = false
			if whole[req] {
				continue
			}
			if c := conflict[req]; c >= 0 {
				results[req] = &journal.WriteConflictError{PersistenceID: batch[req].events[0].PersistenceID, SeqNr: uint64(c)}
			} else {
				pending[req], retry = true, true
			}
		}
		round = nil
		if retry {
			round = args.only(pending)
		}
	}
	var sides []journal.Side
	for i, r := range batch {
		if r.side != nil && results[i] == nil {
			sides = append(sides, r.side)
		}
	}
	if len(sides) > 0 {
		b := &pgx.Batch{}
		if err := j.side.QueueSides(b, sides); err != nil {
			return fmt.Errorf("write sides: %w", err)
		}
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return fmt.Errorf("write sides: %w", err)
		}
	}
	if err := j.holds(); err != nil {
		return err // rolled back
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	if len(sides) > 0 {
		j.side.SidesCommitted(sides)
	}
	return nil
}

// flushSides stores a batch whose writes carry sides in one round trip,
// assuming every write goes in: the insert and the sides' statements go as
// one pipeline, which Postgres runs as one implicit transaction, and the
// insert fails (division by zero) unless it stored every row. Then, or on
// a unique violation, nothing is stored and the batch goes the
// transactional way of the conflict path, which tells each write's outcome
// (a conflict, a deletion mark, the fence) and writes only the sides of the
// writes stored.
func (j *Journal) flushSides(ctx context.Context, batch []*request, args *insertArgs, results []error) error {
	sides := make([]journal.Side, 0, len(batch))
	for _, r := range batch {
		if r.side != nil {
			sides = append(sides, r.side)
		}
	}
	b := &pgx.Batch{}
	b.Queue(j.checkedInsertSQL, append(append(args.values(), j.fenceArgs()...), int64(len(args.pids)))...)
	if err := j.side.QueueSides(b, sides); err != nil {
		return fmt.Errorf("write sides: %w", err)
	}
	err := j.pool.SendBatch(ctx, b).Close()
	switch {
	case err == nil:
		j.side.SidesCommitted(sides)
		return nil
	case isCode(err, "23505") || isCode(err, "22012"): // a conflict, or not every row stored
		if isCode(err, "23505") {
			j.stats.conflictBatches.Add(1)
		}
		return j.flushConflicting(ctx, batch, args, results)
	}
	return err
}

// checked wraps an insert statement with params parameters so that it
// fails, with a division by zero, unless it stores as many rows as its
// next parameter says.
func checked(insert string, params int) string {
	return fmt.Sprintf("WITH ins AS (%s\nRETURNING 1)\nSELECT 1 / (CASE WHEN count(*) = $%d::bigint THEN 1 ELSE 0 END) FROM ins", insert, params+1)
}

// hasSides reports whether a write of batch carries a side.
func hasSides(batch []*request) bool {
	for _, r := range batch {
		if r.side != nil {
			return true
		}
	}
	return false
}

// fencedOrDeleted explains a fenced statement that stored nothing: the
// fence refused it (every write fails), or else every write was below its
// pid's deletion mark.
func (j *Journal) fencedOrDeleted(ctx context.Context, batch []*request, results []error) error {
	live, err := j.leaseLive(ctx)
	switch {
	case err != nil:
		return err
	case !live:
		return fmt.Errorf("%w: the node lease of %s#%d is not live in the database", lease.ErrFenced, j.fence.NodeID, j.fence.Incarnation)
	}
	return j.markDeleted(ctx, batch, results)
}

// only returns the rows of the writes marked in keep, in the same order.
func (a *insertArgs) only(keep []bool) *insertArgs {
	out := &insertArgs{}
	for row, req := range a.req {
		if !keep[req] {
			continue
		}
		out.pids = append(out.pids, a.pids[row])
		out.seqs = append(out.seqs, a.seqs[row])
		out.firsts = append(out.firsts, a.firsts[row])
		out.ts = append(out.ts, a.ts[row])
		out.manifests = append(out.manifests, a.manifests[row])
		out.payloads = append(out.payloads, a.payloads[row])
		out.tags = append(out.tags, a.tags[row])
		out.writers = append(out.writers, a.writers[row])
		out.types = append(out.types, a.types[row])
		out.slices = append(out.slices, a.slices[row])
		out.req = append(out.req, req)
	}
	return out
}

func isCode(err error, code string) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == code
}

// clamp maps a seq nr range onto the bigint column; ok is false when empty.
func clamp(from, to uint64) (int64, int64, bool) {
	if from == 0 {
		from = 1
	}
	if to > math.MaxInt64 {
		to = math.MaxInt64
	}
	if from > to {
		return 0, 0, false
	}
	return int64(from), int64(to), true
}

// replaySQL returns NULL for no tags: scanning it is cheaper than an empty array.
const replaySQL = `SELECT seq_nr, ordering, write_timestamp, manifest, payload,
	CASE WHEN cardinality(tags) = 0 THEN NULL ELSE tags END, writer_id
FROM event_journal
WHERE persistence_id = $1 AND seq_nr >= $2 AND seq_nr <= $3
ORDER BY seq_nr
LIMIT $4`

type page struct {
	events []journal.Event
	err    error
}

// Replay implements journal.Journal. It reads pages of
// Config.ReplayPageSize events, fetching the next page while fn runs over
// the current one; no connection is held while fn runs, so fn may call the
// journal. The payloads handed to fn are fn's to keep; small ones of one
// page share backing arrays, each capped at its own length.
func (j *Journal) Replay(ctx context.Context, pid string, from, to uint64, fn func(journal.Event) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	lo, hi, ok := clamp(from, to)
	if !ok {
		return nil
	}
	if j.m != nil {
		defer func(start time.Time) { j.m.Replayed(time.Since(start)) }(time.Now())
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	size := j.cfg.ReplayPageSize
	fetch := func(lo int64) <-chan page {
		ch := make(chan page, 1)
		go func() {
			evs, err := j.page(ctx, pid, lo, hi, size)
			ch <- page{evs, err}
		}()
		return ch
	}
	next := fetch(lo)
	for {
		p := <-next
		if p.err != nil {
			if err := ctx.Err(); err != nil {
				return err
			}
			return fmt.Errorf("journal/postgres: replay %s from %d: %w", pid, lo, p.err)
		}
		more := len(p.events) == size && p.events[len(p.events)-1].SeqNr < uint64(hi)
		if more {
			lo = int64(p.events[len(p.events)-1].SeqNr) + 1
			next = fetch(lo)
		}
		for _, e := range p.events {
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := fn(e); err != nil {
				return err
			}
		}
		if !more {
			return ctx.Err()
		}
	}
}

func (j *Journal) page(ctx context.Context, pid string, lo, hi int64, size int) ([]journal.Event, error) {
	rows, err := j.pool.Query(ctx, replaySQL, pid, lo, hi, size)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return decodePage(rows, pid, size)
}

// HighestSeqNr implements journal.Journal.
func (j *Journal) HighestSeqNr(ctx context.Context, pid string) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	var h *int64
	err := j.pool.QueryRow(ctx, `SELECT greatest(
		(SELECT max(seq_nr) FROM event_journal WHERE persistence_id = $1),
		(SELECT deleted_to FROM event_journal_deleted WHERE persistence_id = $1))`, pid).Scan(&h)
	if err != nil {
		return 0, fmt.Errorf("journal/postgres: highest seq nr of %s: %w", pid, err)
	}
	if h == nil {
		return 0, nil
	}
	return uint64(*h), nil
}

// DeleteTo implements journal.Journal. It removes the events and raises the
// pid's deletion mark to the highest seq nr removed, in one statement.
func (j *Journal) DeleteTo(ctx context.Context, pid string, to uint64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	_, hi, ok := clamp(1, to)
	if !ok {
		return nil
	}
	_, err := j.pool.Exec(ctx, `WITH del AS (
		DELETE FROM event_journal WHERE persistence_id = $1 AND seq_nr <= $2 RETURNING seq_nr)
	INSERT INTO event_journal_deleted (persistence_id, deleted_to)
	SELECT $1, max(seq_nr) FROM del HAVING max(seq_nr) IS NOT NULL
	ON CONFLICT (persistence_id) DO UPDATE
		SET deleted_to = greatest(event_journal_deleted.deleted_to, excluded.deleted_to)`, pid, hi)
	if err != nil {
		return fmt.Errorf("journal/postgres: delete %s to %d: %w", pid, to, err)
	}
	return nil
}
