package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/cluster/lease"
	leasepg "github.com/shoal-dev/shoal/cluster/lease/postgres"
	"github.com/shoal-dev/shoal/journal"
	"github.com/shoal-dev/shoal/journal/journaltest"
	"github.com/shoal-dev/shoal/journal/postgres"
)

// liveLease gives a node incarnation named after t a lease an hour long,
// in the database's time, and returns it.
func liveLease(t *testing.T, pool *pgxpool.Pool, inc uint64) cluster.UniqueAddress {
	t.Helper()
	node := cluster.UniqueAddress{Node: fmt.Sprintf("fence-%s", t.Name()), Incarnation: inc}
	if _, err := pool.Exec(context.Background(), `INSERT INTO node_leases (node_id, incarnation, expires_at)
		VALUES ($1, $2, clock_timestamp() + interval '1 hour')`, node.Node, int64(node.Incarnation)); err != nil {
		t.Fatal(err)
	}
	return node
}

// expire ends node's lease in the database's time, as the store's clock
// passing its expiry would.
func expire(t *testing.T, pool *pgxpool.Pool, node cluster.UniqueAddress) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), `UPDATE node_leases SET expires_at = clock_timestamp() - interval '1 millisecond'
		WHERE node_id = $1 AND incarnation = $2`, node.Node, int64(node.Incarnation)); err != nil {
		t.Fatal(err)
	}
}

func fencedJournal(t *testing.T, pool *pgxpool.Pool, node cluster.UniqueAddress, holds func() bool, cfg postgres.Config) *postgres.Journal {
	t.Helper()
	j := postgres.New(pool, cfg, postgres.WithFence(postgres.Fence{NodeID: node.Node, Incarnation: node.Incarnation, Holds: holds}))
	t.Cleanup(func() { j.Close() })
	return j
}

func event(pid string, seq uint64) journal.Event {
	return journal.Event{PersistenceID: pid, SeqNr: seq, Manifest: "m", Payload: []byte("x"), Timestamp: time.Now(), WriterID: "w"}
}

// A fenced journal whose lease holds passes the whole journal suite:
// batches, conflicts (the transaction that sorts them out takes the
// fence too), deletions.
func TestConformanceFenced(t *testing.T) {
	journaltest.Run(t, func(t *testing.T) journal.Journal {
		pool := pg.Pool(t)
		return fencedJournal(t, pool, liveLease(t, pool, 1), func() bool { return true }, postgres.Config{MaxBatchEvents: 3, Writers: 2})
	})
}

// A process frozen past its lease (a stop-the-world pause, a frozen
// container) resumes with its goroutines in any order: the writer may
// run before the holder's goroutine has fenced the node. Two cases, each
// stopping the writer mid-step, after it took the batch and before it
// sent it, while the lease runs out:
//
//   - resumed past its fence time by the holder's own clock (the
//     database's expiry is later, by the margin): the write is refused
//     before it is sent;
//   - resumed with the holder's verdict still "held" (the check came
//     before the pause, or the clock check was skipped), the lease expired
//     in the database: the statement itself refuses it.
//
// Either way nothing is stored, the error wraps lease.ErrFenced (not a
// write conflict), and a successor incarnation writes the same sequence
// numbers without conflict.
func TestFencedWriteAfterAPausePastTheLease(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name        string
		clockFenced bool // the holder's clock says fenced at resume
		expiredInDB bool
	}{
		{name: "fenced by the holder's clock", clockFenced: true},
		{name: "expired in the database", expiredInDB: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			pool := pg.Pool(t)
			old := liveLease(t, pool, 1)
			var holds atomic.Bool
			holds.Store(true)
			j := fencedJournal(t, pool, old, holds.Load, postgres.Config{})
			pid := "fence-" + t.Name()
			if err := j.Write(ctx, []journal.Event{event(pid, 1)}); err != nil {
				t.Fatal(err)
			}
			paused, resume := make(chan struct{}), make(chan struct{})
			postgres.SetBeforeSend(j, func() {
				close(paused)
				<-resume
			})
			result := make(chan error, 1)
			go func() { result <- j.Write(ctx, []journal.Event{event(pid, 2)}) }()
			<-paused // frozen mid-step; meanwhile the lease runs out
			holds.Store(!c.clockFenced)
			if c.expiredInDB {
				expire(t, pool, old)
			}
			close(resume)
			err := <-result
			if !errors.Is(err, lease.ErrFenced) {
				t.Fatalf("write after the pause: %v, want lease.ErrFenced", err)
			}
			var conflict *journal.WriteConflictError
			if errors.As(err, &conflict) {
				t.Fatalf("write after the pause: %v is a write conflict", err)
			}
			if got, err := j.HighestSeqNr(ctx, pid); err != nil || got != 1 {
				t.Fatalf("highest seq nr %d (%v) after a fenced write, want 1", got, err)
			}
			expire(t, pool, old)
			successor := fencedJournal(t, pool, liveLease(t, pool, 2), func() bool { return true }, postgres.Config{})
			if err := successor.Write(ctx, []journal.Event{event(pid, 2)}); err != nil {
				t.Fatalf("the successor's write: %v", err)
			}
		})
	}
}

// The node lease store says "expired" only once the fenced writes that
// saw the lease live have ended: a write whose transaction took the
// fence before the expiry is committed (visible to the successor's
// recovery) before its shards may move.
func TestNodeLeaseExpiredWaitsForFencedWritesInFlight(t *testing.T) {
	ctx := context.Background()
	pool := pg.Pool(t)
	node := liveLease(t, pool, 1)
	// A write in flight: its transaction holds the fence (as
	// flushConflicting's does) across the expiry.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	var one int
	if err := tx.QueryRow(ctx, `SELECT 1 FROM node_leases WHERE node_id = $1 AND incarnation = $2 AND NOT down
		AND expires_at > clock_timestamp() FOR KEY SHARE`, node.Node, int64(node.Incarnation)).Scan(&one); err != nil {
		t.Fatal(err)
	}
	expire(t, pool, node) // a renewal-like update: not blocked by the write
	store := leasepg.New(pool)
	answer := make(chan error, 1)
	go func() {
		expired, err := store.NodeLeaseExpired(ctx, node)
		if err == nil && !expired {
			err = errors.New("not expired")
		}
		answer <- err
	}()
	// Wait, by the server's word, until the check waits for the lock.
	deadline := time.Now().Add(30 * time.Second)
	for {
		var waiting bool
		if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%FOR UPDATE%' AND query LIKE '%node_leases%')`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			break
		}
		select {
		case err := <-answer:
			t.Fatalf("NodeLeaseExpired answered (%v) while a fenced write was in flight", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("NodeLeaseExpired never waited for the fenced write")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-answer; err != nil {
		t.Fatalf("NodeLeaseExpired after the write committed: %v", err)
	}
}
