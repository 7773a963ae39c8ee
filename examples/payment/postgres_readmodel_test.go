package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shoal-dev/shoal/examples/payment/readmodel"
)

// Settlements, cancels and failures across a crash: the read model the
// exactly-once projection keeps in Postgres equals the fold of the journal
// (its totals count every event once, which a replayed event would break),
// a corrupted row is detected, and a rebuild restores it.
func TestPostgresReadModelIsTheFoldOfTheJournal(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL")
	}
	dsn := pg.MigratedDSN(t)
	onPostgres := func(c *Config) {
		c.PostgresDSN = dsn
		c.Sequences = nil // PostgresSequences
	}
	orders := func(n *Node, from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			path := fmt.Sprintf("shop-%d/o%d", i%3+1, i)
			put(t, n, "example", "dummy", path+"/payment", fmt.Sprintf(`{"amount":%d}`, 100+i)).want(t, 200, "")
			if i%2 == 0 {
				put(t, n, "example", "dummy", path+"/cancel", "").want(t, 200, "")
			}
		}
	}

	first := startNode(t, onPostgres)
	requireReadModel(t, first)
	orders(first, 0, 12)
	first.Simulator.SetRules(Rule{Reaction: Reaction{ErrCode: "E1234"}})
	put(t, first, "example", "dummy", "shop-1/f1/payment", `{"amount":7}`).want(t, 500, CodeIssuingServiceServerError)
	first.Simulator.SetRules()
	first.Kill() // a crash: the projection's leases run out before another node takes them

	second := startNode(t, onPostgres)
	// Until the dead node's leases run out, asks time out (CODE-012); a
	// settle is idempotent, so it is simply asked again.
	deadline := time.Now().Add(2 * time.Minute)
	for r := put(t, second, "example", "dummy", "shop-1/o12/payment", `{"amount":112}`); r.Status != 200; r = put(t, second, "example", "dummy", "shop-1/o12/payment", `{"amount":112}`) {
		if r.Body["code"] != string(CodeUnpredictable) || time.Now().After(deadline) {
			r.want(t, 200, "")
		}
	}
	orders(second, 12, 24)
	put(t, second, "example", "dummy", "shop-2/o1/cancel", "").want(t, 200, "")
	put(t, second, "tenant-a", "dummy", "shop-1/o1/payment", `{"amount":9}`).want(t, 200, "")

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := readmodel.WaitConsistent(ctx, pool, ReadModelName, ReadModelInstances, 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	folded, err := readmodel.FoldJournal(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	if len(folded) != 26 {
		t.Fatalf("%d payments in the journal, want 26", len(folded))
	}

	// The endpoint answers from the tables.
	want := readmodel.TotalsOf(folded)[readmodel.ShopKey{Tenant: "example", ClientID: 0, Shop: "shop-1"}]
	status, body, _, _ := getShop(t, second, http.MethodGet, "example", "dummy", "shop-1")
	if status != 200 || body.Totals != want || int64(len(body.Settlements)) != want.Settled.Count+want.Canceled.Count+want.Failed.Count {
		t.Fatalf("shop-1: %d %+v, want totals %+v", status, body, want)
	}
	if want.Failed != (readmodel.Total{Count: 1, Amount: 7}) || want.Canceled.Count != 4 || want.Settled.Count != 4 {
		t.Fatalf("shop-1's totals %+v: want the failure, four cancels, four settled", want)
	}

	// The check can fail: a total counted twice is found.
	if _, err := pool.Exec(ctx, `UPDATE payment_shop_totals SET count = count + 1
		WHERE ctid = (SELECT ctid FROM payment_shop_totals ORDER BY slice LIMIT 1)`); err != nil {
		t.Fatal(err)
	}
	if err := readmodel.Check(ctx, pool, ReadModelName, ReadModelInstances); !errors.Is(err, readmodel.ErrDiffers) {
		t.Fatalf("check of a corrupted read model: %v, want ErrDiffers", err)
	}
	// A rebuild of every instance (each clears its own slices), asked
	// through the store as the admin API does, restores it.
	rm := second.ReadModelProjection()
	for _, inst := range rm.Instances() {
		if _, err := rm.Rebuild(ctx, inst); err != nil {
			t.Fatal(err)
		}
	}
	for pending := true; pending; {
		states, err := rm.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		pending = false
		for _, st := range states {
			pending = pending || len(st.Pending) > 0
		}
		if ctx.Err() != nil {
			t.Fatalf("rebuilds not applied: %+v", states)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := readmodel.WaitConsistent(ctx, pool, ReadModelName, ReadModelInstances, 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
}
