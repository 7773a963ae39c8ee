package postgres_test

// Entity-level tests on a real PostgreSQL: event-sourced entities (package
// eventsourced) run on the entity runtime, sharded on one node so that a
// failed entity is restarted with sharding's exponential back-off, with this
// journal underneath.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/eventsourced"
	"github.com/shoal-dev/shoal/internal/pgtest"
	"github.com/shoal-dev/shoal/journal"
	"github.com/shoal-dev/shoal/journal/postgres"
	"github.com/shoal-dev/shoal/sharding"
)

// The test entity persists N events per record command; its state is the
// number of events applied.
type ledgerCmd interface{ isLedgerCmd() }

type (
	record struct {
		ID      string // unique per command
		N       int    // events to persist, atomically
		ReplyTo entity.ReplyTo[uint64]
	}
	count struct{ ReplyTo entity.ReplyTo[uint64] }
)

func (record) isLedgerCmd() {}
func (count) isLedgerCmd()  {}

// noted is the event: part Part of the command ID.
type noted struct {
	ID   string
	Part int
}

var ledgerKey = entity.NewTypeKey[ledgerCmd]("Ledger")

func ledgerCodec() *codec.Registry {
	r := codec.NewRegistry()
	codec.MustRegister[noted](r, "test.noted")
	return r
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// ledger records, from inside the entities, what the journal told them: the
// commands whose events were stored (acknowledged) and those whose write
// failed, plus why incarnations stopped.
type ledger struct {
	mu       sync.Mutex
	ok       map[string]int     // command id -> events, acknowledged by the journal
	failed   map[string]error   // command id -> the failed write's error
	failures map[string][]error // entity id -> stop reasons (persist and recovery failures)
}

func newLedger() *ledger {
	return &ledger{ok: map[string]int{}, failed: map[string]error{}, failures: map[string][]error{}}
}

func (l *ledger) create(ec entity.Context[ledgerCmd]) entity.Behavior[ledgerCmd] {
	id := ec.EntityID()
	type eff = eventsourced.Effect[noted, uint64]
	var pending record // the command whose write is in flight (one at a time)
	return eventsourced.New(eventsourced.Config[ledgerCmd, noted, uint64]{
		PersistenceID: eventsourced.PersistenceIDOf(ledgerKey, id),
		OnCommand: func(ctx eventsourced.CommandContext[ledgerCmd, noted, uint64], s uint64, c ledgerCmd) eff {
			switch c := c.(type) {
			case record:
				pending = c
				evs := make([]noted, c.N)
				for i := range evs {
					evs[i] = noted{ID: c.ID, Part: i}
				}
				persisted := ctx.Persist(evs...).ThenRun(func(uint64) {
					l.mu.Lock()
					l.ok[c.ID] = c.N
					l.mu.Unlock()
				})
				return persisted.ThenReplyFrom(func(s uint64) eventsourced.Answer { return eventsourced.To(c.ReplyTo, s) })
			case count:
				return ctx.Reply(eventsourced.To(c.ReplyTo, s))
			}
			return ctx.Unhandled()
		},
		OnEvent: func(_ eventsourced.Context[ledgerCmd], s uint64, _ noted) uint64 { return s + 1 },
		OnSignal: func(_ eventsourced.Context[ledgerCmd], _ uint64, sig eventsourced.Signal) {
			l.mu.Lock()
			defer l.mu.Unlock()
			switch sig := sig.(type) {
			case eventsourced.PersistFailed:
				l.failed[pending.ID] = sig.Err
				l.failures[id] = append(l.failures[id], sig.Err)
			case eventsourced.RecoveryFailed:
				l.failures[id] = append(l.failures[id], sig.Err)
			}
		},
	})
}

func (l *ledger) failureCount(id string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.failures[id])
}

// checkStored replays every entity's events and checks them against what
// the journal acknowledged: seq nrs 1..n without gaps, every acknowledged
// command stored whole, nothing of a command whose write failed, nothing of
// a command never acknowledged. It returns the stored command ids per entity
// in seq order.
func (l *ledger) checkStored(t *testing.T, j journal.Journal, ids []string) map[string][]string {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	reg := ledgerCodec()
	order := map[string][]string{}
	stored := map[string]int{}
	for _, id := range ids {
		pid := ledgerKey.Name() + eventsourced.Separator + id
		var seq uint64
		err := j.Replay(context.Background(), pid, 0, math.MaxUint64, func(e journal.Event) error {
			seq++
			if e.SeqNr != seq {
				return fmt.Errorf("gap: seq %d after %d", e.SeqNr, seq-1)
			}
			ev, err := codec.DecodeAs[noted](reg, e.Manifest, e.Payload)
			if err != nil {
				return err
			}
			if stored[ev.ID] != ev.Part {
				return fmt.Errorf("seq %d: part %d of %s after %d parts: interleaved", e.SeqNr, ev.Part, ev.ID, stored[ev.ID])
			}
			if ev.Part == 0 {
				order[id] = append(order[id], ev.ID)
			}
			stored[ev.ID]++
			return nil
		})
		if err != nil {
			t.Fatalf("%s: %v", pid, err)
		}
	}
	for cmd, n := range l.ok {
		if stored[cmd] != n {
			t.Errorf("acknowledged command %s: %d of %d events stored", cmd, stored[cmd], n)
		}
	}
	for cmd, n := range stored {
		if _, ok := l.ok[cmd]; !ok {
			t.Errorf("command %s: %d events stored but never acknowledged (write error: %v)", cmd, n, l.failed[cmd])
		}
	}
	return order
}

// backOffChoice is one restart delay sharding's back-off policy chose.
type backOffChoice struct {
	attempt      int
	delay        time.Duration
	duringOutage bool
}

// backOffLog is an slog handler that keeps the back-offs sharding chose,
// read from its "restarting after back-off" log lines: the test asserts on
// what the policy decided, not on how long a loaded machine took.
type backOffLog struct {
	mu     sync.Mutex
	outage atomic.Bool
	byID   map[string][]backOffChoice
}

func (c backOffChoice) String() string {
	return fmt.Sprintf("#%d:%v", c.attempt, c.delay.Round(time.Millisecond))
}

func newBackOffLog() *backOffLog { return &backOffLog{byID: map[string][]backOffChoice{}} }

func (h *backOffLog) Enabled(context.Context, slog.Level) bool { return true }
func (h *backOffLog) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *backOffLog) WithGroup(string) slog.Handler            { return h }

func (h *backOffLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "sharding: entity failed; restarting after back-off" {
		return nil
	}
	var id string
	c := backOffChoice{duringOutage: h.outage.Load()}
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "entity_id":
			id = a.Value.String()
		case "attempt":
			c.attempt = int(a.Value.Int64())
		case "backoff":
			c.delay = a.Value.Duration()
		}
		return true
	})
	h.mu.Lock()
	h.byID[id] = append(h.byID[id], c)
	h.mu.Unlock()
	return nil
}

// choices returns a copy of id's back-offs, oldest first.
func (h *backOffLog) choices(id string) []backOffChoice {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.byID[id])
}

// highestAttemptInOutage is the largest attempt number id reached while the
// server was down.
func (h *backOffLog) highestAttemptInOutage(id string) int {
	n := 0
	for _, c := range h.choices(id) {
		if c.duringOutage {
			n = max(n, c.attempt)
		}
	}
	return n
}

// backOffBand is the range cenkalti/backoff's exponential policy draws the
// attempt-th delay from: the interval min·1.5^(attempt−1), capped at max,
// ±50% jitter (1 ms of slack for its float arithmetic).
func backOffBand(attempt int, min, max time.Duration) (lo, hi time.Duration) {
	interval := float64(min)
	for range attempt - 1 {
		interval = math.Min(interval*backoff.DefaultMultiplier, float64(max))
	}
	jitter := backoff.DefaultRandomizationFactor
	return time.Duration(interval*(1-jitter)) - time.Millisecond, time.Duration(interval*(1+jitter)) + time.Millisecond
}

// TestEntitiesRestartWithBackoffWhilePostgresIsDown stops the PostgreSQL
// container under load from sharded event-sourced entities and starts it
// again. The entities' writes fail, they stop, and sharding restarts them
// with exponential back-off (cenkalti/backoff/v4); their recoveries fail
// while the server is down, so each restart comes after a longer back-off;
// once it is back they recover and acknowledge writes again. In the end
// every write the journal acknowledged is stored whole and nothing else is.
//
// The back-off is checked on the delays the policy chose (sharding logs
// each one with its attempt number), not on the intervals between restarts:
// those also hold each failing recovery, whose length depends on the load.
func TestEntitiesRestartWithBackoffWhilePostgresIsDown(t *testing.T) {
	if testing.Short() {
		t.Skip("restarts a container")
	}
	srv := pgtest.Start(t)
	pool := pgtest.NewPool(t, srv.MigratedDSN(t), func(c *pgxpool.Config) {
		c.MaxConns = 8
		c.ConnConfig.ConnectTimeout = 2 * time.Second
	})
	// A write cut off by its WriteTimeout may or may not be stored (see the
	// package doc), which this test would count as a bug; make it long, the
	// outage fails writes through their connections.
	j := postgres.New(pool, postgres.Config{WriteTimeout: time.Minute})
	defer j.Close()

	l := newLedger()
	backOffs := newBackOffLog()
	sys, err := entity.NewSystem(entity.Config{NodeID: "n1", Codec: ledgerCodec(), Journal: j, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	sh, err := sharding.New(sys, sharding.Config{Logger: slog.New(backOffs)})
	if err != nil {
		t.Fatal(err)
	}
	// The longest back-off is well above a failing recovery even on a busy
	// machine, so the policy does not start over (it does after a run longer
	// than the longest back-off) and the attempts climb while the server is
	// down.
	const backoffMin, backoffMax = 50 * time.Millisecond, 5 * time.Second
	region, err := sharding.Init(sh, sharding.Entity[ledgerCmd]{
		Key:    ledgerKey,
		Create: l.create,
		Settings: sharding.Settings{
			NumberOfShards: 4,
			// Remembered entities are restarted after every failure, with
			// or without a message waiting for them.
			RememberEntities:  true,
			RestartBackoffMin: backoffMin,
			RestartBackoffMax: backoffMax,
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := sh.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	}()

	const entities = 8
	ids := make([]string, entities)
	for i := range ids {
		ids[i] = fmt.Sprintf("e%d", i)
	}
	var (
		acked      atomic.Int64
		restarted  atomic.Bool
		ackedAfter = make([]atomic.Bool, entities)
		clientAck  sync.Map // command id -> true: the client got the reply
		stop       = make(chan struct{})
		wg         sync.WaitGroup
	)
	for w, id := range ids {
		wg.Add(1)
		go func() { // one client per entity, one command at a time
			defer wg.Done()
			ref := region.EntityRefFor(id)
			for a := 0; ; a++ {
				select {
				case <-stop:
					return
				default:
				}
				cmdID := fmt.Sprintf("%s/%d", id, a)
				after := restarted.Load()
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				_, err := entity.Ask(ctx, ref, func(r entity.ReplyTo[uint64]) ledgerCmd {
					return record{ID: cmdID, N: 1 + a%3, ReplyTo: r}
				})
				cancel()
				if err == nil {
					clientAck.Store(cmdID, true)
					acked.Add(1)
					if after {
						ackedAfter[w].Store(true)
					}
					continue
				}
				select { // the entity stopped, or is backing off: try again soon
				case <-stop:
					return
				case <-time.After(20 * time.Millisecond):
				}
			}
		}()
	}
	stopClients := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer stopClients()

	poll(t, "writes before the stop", time.Minute, func() bool { return acked.Load() >= 200 })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	backOffs.outage.Store(true)
	stopServer(ctx, t, srv)
	poll(t, "every entity to fail", time.Minute, func() bool {
		for _, id := range ids {
			if l.failureCount(id) == 0 {
				return false
			}
		}
		return true
	})
	// Keep it down until every entity has backed off 7 times in a row: the
	// 7th delay (from 50 ms·1.5⁶ = 570 ms ± 50%) is longer than any first
	// or second one can be (at most 113 ms).
	const attempts = 7
	poll(t, "every entity to back off 7 times while the server is down", 2*time.Minute, func() bool {
		for _, id := range ids {
			if backOffs.highestAttemptInOutage(id) < attempts {
				return false
			}
		}
		return true
	})
	if err := srv.Container(t).Start(ctx); err != nil {
		t.Fatalf("start container: %v", err)
	}
	backOffs.outage.Store(false)
	srv.WaitReady(t, ctx)
	restarted.Store(true)
	poll(t, "every entity to acknowledge writes after the restart", 2*time.Minute, func() bool {
		for w := range ackedAfter {
			if !ackedAfter[w].Load() {
				return false
			}
		}
		return true
	})
	stopClients()

	// Every delay is drawn from its attempt's band, so the restarts back
	// off exponentially: the bands of attempts 1–2 and 7 do not overlap.
	for _, id := range ids {
		choices := backOffs.choices(id)
		t.Logf("%s: back-offs %v", id, choices)
		var early, late []time.Duration
		for _, c := range choices {
			if lo, hi := backOffBand(c.attempt, backoffMin, backoffMax); c.delay < lo || c.delay > hi {
				t.Errorf("%s: attempt %d backed off %v, want %v–%v", id, c.attempt, c.delay, lo, hi)
			}
			// A loaded machine may fail a write before the outage (a
			// connection attempt past its timeout): the first attempts
			// count wherever they came.
			switch {
			case c.attempt <= 2:
				early = append(early, c.delay)
			case c.attempt >= attempts && c.duringOutage:
				late = append(late, c.delay)
			}
		}
		if len(early) == 0 || len(late) == 0 {
			t.Errorf("%s: no first back-off, or no %dth during the outage: %v", id, attempts, choices)
		} else if slices.Min(late) <= slices.Max(early) {
			t.Errorf("%s: back-off did not grow: attempts ≥ %d chose %v, attempts 1–2 chose %v", id, attempts, late, early)
		}
	}
	l.mu.Lock()
	persistFailed := 0
	for _, id := range ids {
		for _, err := range l.failures[id] {
			if errors.Is(err, eventsourced.ErrPersistFailed) {
				persistFailed++
			} else if !errors.Is(err, eventsourced.ErrRecoveryFailed) {
				t.Errorf("%s stopped with %v, want a persist or recovery failure", id, err)
			}
		}
	}
	for cmd, err := range l.failed {
		if errors.Is(err, journal.ErrWriteConflict) {
			t.Errorf("command %s: %v (an earlier failed write was stored after all)", cmd, err)
		}
	}
	okCount, failedCount := len(l.ok), len(l.failed)
	l.mu.Unlock()
	if persistFailed == 0 {
		t.Errorf("no entity saw a failed write")
	}
	t.Logf("%d writes acknowledged, %d failed; %d persist failures", okCount, failedCount, persistFailed)

	check := postgres.New(pool, postgres.Config{})
	defer check.Close()
	l.checkStored(t, check, ids)
	clientAck.Range(func(k, _ any) bool {
		l.mu.Lock()
		_, ok := l.ok[k.(string)]
		l.mu.Unlock()
		if !ok {
			t.Errorf("client got a reply to %s, which the journal never acknowledged", k)
		}
		return true
	})
}

// TestTwoIncarnationsOneWins runs two incarnations of each of several
// entities on two nodes (two systems, two journals, two pools: their writes
// meet only in PostgreSQL). Both recover the same history and then write
// at once: for each entity exactly one incarnation stores its writes, the
// other stops with the write-conflict error at its first write, and the
// history has no gap and no interleaving.
func TestTwoIncarnationsOneWins(t *testing.T) {
	dsn := pg.MigratedDSN(t)
	reg := ledgerCodec()
	type node struct {
		sys *entity.System
		l   *ledger
	}
	nodes := make([]node, 2)
	for i := range nodes {
		j := postgres.New(pgtest.NewPool(t, dsn, nil), postgres.Config{})
		t.Cleanup(func() { j.Close() })
		sys, err := entity.NewSystem(entity.Config{NodeID: fmt.Sprintf("node%d", i), Codec: reg, Journal: j, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		nodes[i] = node{sys, newLedger()}
	}
	const entities, commands, seeded = 10, 20, 3
	ids := make([]string, entities)
	cells := make([][2]*entity.Cell[ledgerCmd], entities)
	for e := range ids {
		ids[e] = fmt.Sprintf("split-%d", e)
		pid := ledgerKey.Name() + eventsourced.Separator + ids[e]
		seed := make([]journal.Event, seeded)
		for i := range seed {
			m, p, err := reg.Encode(noted{ID: "seed-" + ids[e], Part: i})
			if err != nil {
				t.Fatal(err)
			}
			seed[i] = journal.Event{PersistenceID: pid, SeqNr: uint64(i + 1), Manifest: m, Payload: p, WriterID: "seed", Timestamp: time.Now()}
		}
		mustWrite(t, nodes[0].sys.Journal(), seed)
		for n := range nodes {
			cells[e][n] = entity.Spawn(nodes[n].sys, &entity.Props[ledgerCmd]{Key: ledgerKey, Create: nodes[n].l.create}, ids[e])
		}
	}
	// Both incarnations of every entity have recovered the seeded history.
	for e := range ids {
		for n := range nodes {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			got, err := entity.Ask(ctx, cells[e][n], func(r entity.ReplyTo[uint64]) ledgerCmd { return count{ReplyTo: r} })
			cancel()
			if err != nil || got != seeded {
				t.Fatalf("%s on node %d recovered %d events (%v), want %d", ids[e], n, got, err, seeded)
			}
		}
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for e := range ids {
		for n := range nodes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for k := range commands {
					_ = cells[e][n].Tell(record{ID: fmt.Sprintf("%s/node%d/%d", ids[e], n, k), N: 1 + k%3})
				}
			}()
		}
	}
	close(start)
	wg.Wait()

	// Every command was told before this count, and an event-sourced
	// entity handles commands one persist at a time: a reply means every
	// command was handled; a stop means the incarnation lost.
	askCount := func(c *entity.Cell[ledgerCmd]) (uint64, error) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		go func() {
			select {
			case <-c.Done():
				cancel()
			case <-ctx.Done():
			}
		}()
		return entity.Ask(ctx, c, func(r entity.ReplyTo[uint64]) ledgerCmd { return count{ReplyTo: r} })
	}
	want := uint64(seeded)
	for k := range commands {
		want += uint64(1 + k%3)
	}
	var winners [2]int
	for e, id := range ids {
		pid := ledgerKey.Name() + eventsourced.Separator + id
		var losers, running []int
		for n := range nodes {
			got, err := askCount(cells[e][n])
			if errors.Is(err, entity.ErrStopped) {
				// Refused by an incarnation on its way out: Done closes
				// once it has settled what it left.
				select {
				case <-cells[e][n].Done():
				case <-time.After(time.Minute):
				}
			}
			select {
			case <-cells[e][n].Done():
				losers = append(losers, n)
				continue
			default:
			}
			if err != nil || got != want {
				t.Fatalf("%s on node %d: count %d (%v), want %d", id, n, got, err, want)
			}
			running = append(running, n)
		}
		if len(losers) != 1 || len(running) != 1 {
			t.Errorf("%s: incarnations stopped on nodes %v, still running on %v; want exactly one of each", id, losers, running)
			continue
		}
		winner, loser := running[0], losers[0]
		winners[winner]++
		err := cells[e][loser].Err()
		var wc *journal.WriteConflictError
		var pe *eventsourced.PersistError
		if !errors.Is(err, eventsourced.ErrWriteConflict) || !errors.As(err, &wc) || wc.PersistenceID != pid ||
			!errors.As(err, &pe) || pe.SeqNr != seeded+1 {
			t.Errorf("%s: the loser stopped with %v, want a write conflict on %s at seq %d", id, err, pid, seeded+1)
		}
	}
	for n := range nodes {
		for e := range ids {
			cells[e][n].StopNow()
			<-cells[e][n].Done()
		}
	}

	// The stored history of each entity: the seed, then the winner's
	// commands in order, nothing of the loser's.
	for n := range nodes {
		for cmd := range nodes[n].l.failed {
			if _, ok := nodes[n].l.ok[cmd]; ok {
				t.Errorf("%s both failed and succeeded", cmd)
			}
		}
	}
	merged := newLedger()
	for n := range nodes {
		for k, v := range nodes[n].l.ok {
			merged.ok[k] = v
		}
		for k, v := range nodes[n].l.failed {
			merged.failed[k] = v
		}
	}
	for _, id := range ids {
		merged.ok["seed-"+id] = seeded
	}
	order := merged.checkStored(t, nodes[0].sys.Journal(), ids)
	for _, id := range ids {
		got := order[id]
		if len(got) != 1+commands {
			t.Errorf("%s: stored commands %v, want the seed and %d commands", id, got, commands)
			continue
		}
		node := strings.Split(got[1], "/")[1]
		for k, c := range got[1:] {
			if want := fmt.Sprintf("%s/%s/%d", id, node, k); c != want {
				t.Errorf("%s: command %d stored is %s, want %s (one incarnation's commands, in order)", id, k, c, want)
				break
			}
		}
	}
	t.Logf("winners per node: %v", winners)
}

// TestUnknownManifestFailsRecovery: a stored event whose manifest no codec
// knows, beyond the first replay page, stops recovery with a typed error
// naming the persistence id and the event's seq nr.
func TestUnknownManifestFailsRecovery(t *testing.T) {
	pool := pg.Pool(t)
	ctx := context.Background()
	const pid, bad = "Ledger|mystery", 2501 // the first page holds 2000 events
	if _, err := pool.Exec(ctx, `INSERT INTO event_journal (persistence_id, seq_nr, write_timestamp, manifest, payload, writer_id, entity_type, slice)
		SELECT $1, s, now(), 'test.noted', convert_to('{"ID":"x","Part":0}', 'UTF8'), 'w', $3, $4 FROM generate_series(1, $2::bigint) s`,
		pid, bad-1, journal.EntityTypeOf(pid), journal.SliceOf(pid)); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO event_journal (persistence_id, seq_nr, write_timestamp, manifest, payload, writer_id, entity_type, slice)
		VALUES ($1, $2, now(), 'from.the.future', '\x7b7d', 'w', $3, $4), ($1, $2 + 1, now(), 'test.noted', '\x7b7d', 'w', $3, $4)`, pid, bad, journal.EntityTypeOf(pid), journal.SliceOf(pid)); err != nil {
		t.Fatal(err)
	}
	j := postgres.New(pool, postgres.Config{})
	defer j.Close()
	sys, err := entity.NewSystem(entity.Config{Codec: ledgerCodec(), Journal: j, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	l := newLedger()
	cell := entity.Spawn(sys, &entity.Props[ledgerCmd]{Key: ledgerKey, Create: l.create}, "mystery")
	select {
	case <-cell.Done():
	case <-time.After(time.Minute):
		t.Fatal("recovery did not fail within a minute")
	}
	err = cell.Err()
	var rerr *eventsourced.RecoveryError
	if !errors.As(err, &rerr) || rerr.PersistenceID != pid || rerr.SeqNr != bad {
		t.Fatalf("stop reason = %v, want a RecoveryError naming %s seq %d", err, pid, bad)
	}
	var uerr *codec.UnknownManifestError
	if !errors.Is(err, eventsourced.ErrRecoveryFailed) || !errors.Is(err, codec.ErrUnknownManifest) ||
		!errors.As(err, &uerr) || uerr.Manifest != "from.the.future" {
		t.Fatalf("stop reason %v does not match ErrRecoveryFailed and ErrUnknownManifest(from.the.future)", err)
	}
	if !strings.Contains(err.Error(), pid) || !strings.Contains(err.Error(), fmt.Sprint(bad)) {
		t.Fatalf("message %q does not name %s and seq %d", err, pid, bad)
	}
	if n := l.failureCount("mystery"); n != 1 {
		t.Fatalf("%d RecoveryFailed signals, want 1", n)
	}
}
