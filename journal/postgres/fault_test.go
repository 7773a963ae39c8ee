package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"math"
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

// poll waits for cond, checking every few milliseconds, and fails t at the
// deadline.
func poll(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// stopServer stops srv's container as an outage would, giving the server
// a few seconds to shut down cleanly.
func stopServer(ctx context.Context, t *testing.T, srv *pgtest.Server) {
	t.Helper()
	timeout := 10 * time.Second
	if err := srv.Container(t).Stop(ctx, &timeout); err != nil {
		t.Fatalf("stop container: %v", err)
	}
}

// TestDatabaseStopMidLoad stops the PostgreSQL container under write load
// and starts it again. Writers get errors while it is down and succeed
// again after; in the end every acknowledged write is stored whole and
// nothing of a failed write is.
func TestDatabaseStopMidLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("restarts a container")
	}
	srv := pgtest.Start(t) // its own container: the others' keep running
	pool := pgtest.NewPool(t, srv.MigratedDSN(t), func(c *pgxpool.Config) {
		c.MaxConns = 8
		c.ConnConfig.ConnectTimeout = 2 * time.Second
	})
	// A write cut off by its WriteTimeout may or may not be stored (see the
	// package doc), which this test would count as a bug; make it long, the
	// outage fails writes through their connections.
	j := postgres.New(pool, postgres.Config{WriteTimeout: time.Minute})
	defer j.Close()

	type attempt struct {
		id    string
		first uint64
		n     int
		err   error
	}
	const writers = 16
	var (
		logs       = make([][]attempt, writers)
		acked      atomic.Int64
		failed     atomic.Int64
		restarted  atomic.Bool
		ackedAfter = make([]atomic.Bool, writers)
		stop       = make(chan struct{})
		wg         sync.WaitGroup
	)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pid := fmt.Sprintf("writer-%d", w)
			next := uint64(1)
			for a := 0; ; a++ {
				select {
				case <-stop:
					return
				default:
				}
				at := attempt{id: fmt.Sprintf("%s/%d", pid, a), first: next, n: 1 + a%3}
				evs := make([]journal.Event, at.n)
				for i := range evs {
					evs[i] = journal.Event{PersistenceID: pid, SeqNr: next + uint64(i), Manifest: "m",
						Payload: []byte(at.id), WriterID: "w", Timestamp: time.Now()}
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				after := restarted.Load()
				at.err = j.Write(ctx, evs)
				cancel()
				logs[w] = append(logs[w], at)
				if at.err == nil {
					next += uint64(at.n)
					acked.Add(1)
					if after {
						ackedAfter[w].Store(true)
					}
					continue
				}
				failed.Add(1)
				if errors.Is(at.err, journal.ErrWriteConflict) {
					return // an earlier failed write was stored after all: reported below
				}
				select { // pace retries while the database is down
				case <-stop:
					return
				case <-time.After(20 * time.Millisecond):
				}
			}
		}()
	}
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}()

	poll(t, "writes before the stop", time.Minute, func() bool { return acked.Load() >= 300 })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	stopServer(ctx, t, srv)
	ackedAtStop := acked.Load()
	poll(t, "writers to see errors", time.Minute, func() bool { return failed.Load() >= writers })
	if err := srv.Container(t).Start(ctx); err != nil {
		t.Fatalf("start container: %v", err)
	}
	srv.WaitReady(t, ctx)
	restarted.Store(true)
	poll(t, "every writer to succeed after the restart", time.Minute, func() bool {
		for w := range ackedAfter {
			if !ackedAfter[w].Load() {
				return false
			}
		}
		return true
	})
	close(stop)
	wg.Wait()
	t.Logf("acked %d writes (%d before the stop), %d failed", acked.Load(), ackedAtStop, failed.Load())

	check := postgres.New(pool, postgres.Config{})
	defer check.Close()
	for w := range writers {
		pid := fmt.Sprintf("writer-%d", w)
		want := map[string]int{} // attempt id -> events, acknowledged only
		var wantSeq uint64
		for _, at := range logs[w] {
			if at.err == nil {
				want[at.id] = at.n
				wantSeq = at.first + uint64(at.n) - 1
			} else if errors.Is(at.err, journal.ErrWriteConflict) {
				t.Errorf("%s: %s failed with a conflict: an earlier failed write was stored", pid, at.id)
			}
		}
		got := map[string]int{}
		var seq uint64
		err := check.Replay(ctx, pid, 0, math.MaxUint64, func(e journal.Event) error {
			seq++
			if e.SeqNr != seq {
				return fmt.Errorf("gap: seq %d after %d", e.SeqNr, seq-1)
			}
			got[string(e.Payload)]++
			return nil
		})
		if err != nil {
			t.Fatalf("%s: replay: %v", pid, err)
		}
		if seq != wantSeq {
			t.Errorf("%s: stored up to seq %d, acknowledged up to %d", pid, seq, wantSeq)
		}
		for id, n := range got {
			if want[id] != n {
				t.Errorf("%s: write %s stored %d events, acknowledged %d", pid, id, n, want[id])
			}
		}
		for id, n := range want {
			if got[id] != n {
				t.Errorf("%s: acknowledged write %s has %d events stored, want %d", pid, id, got[id], n)
			}
		}
	}
	if t.Failed() {
		var sample []string
		for _, at := range logs[0] {
			if at.err != nil {
				sample = append(sample, at.err.Error())
			}
		}
		t.Logf("errors of writer 0: %s", strings.Join(sample[:min(5, len(sample))], "\n"))
	}
}
