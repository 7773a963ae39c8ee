package main

import (
	"context"
	"math"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shoal-dev/shoal/internal/pgtest"
	"github.com/shoal-dev/shoal/journal"
	"github.com/shoal-dev/shoal/timers"
)

// pg starts a PostgreSQL container on first use; tests that use it skip
// when no Docker daemon is reachable.
var pg = pgtest.New()

func TestMain(m *testing.M) { os.Exit(pg.Run(m)) }

// laterClock is the wall clock shifted forward: a node started with it
// recovers entities as if it came back that much later.
type laterClock struct{ by time.Duration }

func (c laterClock) Now() time.Time { return time.Now().Add(c.by) }
func (c laterClock) AfterFunc(d time.Duration, f func()) timers.Timer {
	return time.AfterFunc(d, f)
}

func storedEvents(t *testing.T, j journal.Journal, key OrderKey) []string {
	t.Helper()
	var evs []journal.Event
	err := j.Replay(context.Background(), TypeKey.Name()+"|"+key.EntityID(), 1, math.MaxUint64, func(e journal.Event) error {
		evs = append(evs, e)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return manifests(evs)
}

// A node dies while an entity waits for the issuer; the node that takes
// over after the deadline recovers the entity in Settling, its processing
// timeout fires at once, and the payment is Failed (CODE-012) — the
// original's stuck-after-crash semantics. A graceful shutdown instead lets
// the call in flight finish (StopActor is stashed), and the next node
// answers from the stored outcome.
func TestPostgresRecoveryAfterCrashMidSettlement(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL")
	}
	dsn := pg.MigratedDSN(t)
	onPostgres := func(clock timers.Clock, askTimeout time.Duration) func(*Config) {
		return func(c *Config) {
			c.PostgresDSN = dsn
			c.Sequences = nil // PostgresSequences
			c.Clock = clock
			c.Settings.AskTimeout = askTimeout
			c.Settings.FailSafeMargin = time.Minute // the crash comes well before the deadline
			c.Issuer.ResponseTimeout = time.Hour    // only the processing timeout ends a hang
		}
	}
	crashed := OrderKey{Tenant: TenantExample, ClientID: 0, WalletShopID: "shop-1", OrderID: "crash"}
	handedOff := OrderKey{Tenant: TenantExample, ClientID: 0, WalletShopID: "shop-1", OrderID: "handoff"}
	// Whether an answer comes from the entity or from the ask's timeout, the
	// client sees the same 500; what the entity decided is read from the
	// journal, as soon as it is there.
	waitStored := func(j journal.Journal, key OrderKey, want ...string) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for got := storedEvents(t, j, key); !slices.Equal(got, want); got = storedEvents(t, j, key) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: events %v, want %v", key.OrderID, got, want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	first := startNode(t, onPostgres(nil, 2*time.Second))
	first.Simulator.SetRules(Rule{Reaction: Reaction{Hang: true}})
	put(t, first, "example", "dummy", "shop-1/crash/payment", amount1000).want(t, 500, CodeUnpredictable)
	waitStored(first.Journal, crashed, "payment.SettlementAccepted")
	first.Kill()

	second := startNode(t, onPostgres(laterClock{by: time.Hour}, 2*time.Second))
	put(t, second, "example", "dummy", "shop-1/crash/payment", amount1000).want(t, 500, CodeUnpredictable)
	waitStored(second.Journal, crashed, "payment.SettlementAccepted", "payment.SettlementTimeoutDetected")
	if n := second.Simulator.ReceivedCount(); n != 0 {
		t.Fatalf("the recovered entity called the issuer %d times", n)
	}

	// Graceful: the client gives up, the entity still waits for the issuer
	// when the node shuts down; StopActor waits in its stash until the
	// answer. The issuer answers far beyond the ask's timeout, so the client
	// has given up even when a loaded machine fires that timer late.
	second.Simulator.SetRules(Rule{Reaction: Reaction{Latency: 6 * time.Second}})
	put(t, second, "example", "dummy", "shop-1/handoff/payment", amount1000).want(t, 500, CodeUnpredictable)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := second.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	// The ids come from Postgres: they go on across nodes. Payment ids are
	// reserved in blocks per node: the second node's first is the first
	// of the next block (the rest of the crashed node's block is a gap).
	if a, b := first.Simulator.Received()[0], second.Simulator.Received()[0]; a.TransactionID != "000000000001" ||
		b.TransactionID != "000000000002" || a.PaymentID != "00001" || b.PaymentID != formatPaymentID(PaymentIDBlock+1) {
		t.Fatalf("ids %s/%s then %s/%s", a.TransactionID, a.PaymentID, b.TransactionID, b.PaymentID)
	}

	third := startNode(t, onPostgres(nil, time.Minute)) // the answer must come from the entity
	put(t, third, "example", "dummy", "shop-1/handoff/payment", amount1000).want(t, 200, "")
	if got := storedEvents(t, third.Journal, handedOff); !slices.Equal(got,
		[]string{"payment.SettlementAccepted", "payment.SettlementSuccessConfirmed"}) {
		t.Fatalf("after hand-off: %v", got)
	}
	if n := len(third.Simulator.Received()); n != 0 {
		t.Fatalf("the issuer was called again %d times", n)
	}

	// Sharding keeps its allocations in Postgres too, under the epoch of
	// each node's coordinator in turn.
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var shards, epoch int
	err = conn.QueryRow(context.Background(),
		`SELECT count(*), coalesce(max(epoch), 0) FROM shard_allocations WHERE type_name = $1`, TypeKey.Name()).Scan(&shards, &epoch)
	if err != nil {
		t.Fatal(err)
	}
	if shards == 0 || epoch != 3 {
		t.Fatalf("shard_allocations: %d shards, newest epoch %d; want some, written by the third coordinator (epoch 3)", shards, epoch)
	}
}

// Nodes of a cluster start together and each creates the sequences'
// tables: concurrent calls on a fresh schema all succeed (without the lock
// one of them met the catalog's unique constraint).
func TestPostgresSequencesCreatedConcurrently(t *testing.T) {
	for round := range 5 {
		pool := pg.EmptyPool(t)
		errs := make(chan error, 8)
		for range 8 {
			go func() {
				_, err := NewPostgresSequences(t.Context(), pool)
				errs <- err
			}()
		}
		for range 8 {
			if err := <-errs; err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
	}
}
