package main

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Payment ids drawn at once by several nodes (each a PostgresSequences on
// the same schema), for one busy customer and for many, are unique per
// customer; a node started later (a restart) hands out none of them again.
func TestPostgresPaymentIDsUniqueUnderConcurrency(t *testing.T) {
	pool := pg.EmptyPool(t)
	ctx := t.Context()
	const nodes, workers, perWorker = 3, 6, 120
	seqs := make([]*PostgresSequences, nodes)
	for i := range seqs {
		s, err := NewPostgresSequences(ctx, pool)
		if err != nil {
			t.Fatal(err)
		}
		seqs[i] = s
	}
	customers := []string{"busy", "c1", "c2", "c3"}
	var mu sync.Mutex
	seen := map[string]map[string]bool{} // customer → ids
	errs := make(chan error, nodes*workers)
	var wg sync.WaitGroup
	for i := range nodes * workers {
		wg.Go(func() {
			for j := range perWorker {
				customer := "busy" // half of all payments
				if j%2 == 1 {
					customer = customers[1+(i+j)%3]
				}
				id, err := seqs[i%nodes].NextPaymentID(ctx, "t", customer)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				if seen[customer] == nil {
					seen[customer] = map[string]bool{}
				}
				dup := seen[customer][id]
				seen[customer][id] = true
				mu.Unlock()
				if dup {
					errs <- fmt.Errorf("customer %s: payment id %s handed out twice", customer, id)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	total := 0
	for _, ids := range seen {
		total += len(ids)
		for id := range ids {
			if n, err := strconv.Atoi(id); len(id) != 5 || err != nil || n <= 0 {
				t.Fatalf("payment id %q: want 5 digits, from 00001", id)
			}
		}
	}
	if want := nodes * workers * perWorker; total != want {
		t.Fatalf("%d distinct ids, want %d", total, want)
	}
	restarted, err := NewPostgresSequences(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range customers {
		id, err := restarted.NextPaymentID(ctx, "t", c)
		if err != nil || seen[c][id] {
			t.Fatalf("customer %s after a restart: %s, %v; want an id never handed out", c, id, err)
		}
	}
}

// A node reserves a customer's payment ids PaymentIDBlock at a time: 150
// payments of one customer are 00001…00150, in order, and touched the
// counter row twice (it stands at 200, not 150). Another node's block
// follows: its first id is 00201. Tenants count apart.
func TestPostgresPaymentIDsReservedInBlocks(t *testing.T) {
	pool := pg.EmptyPool(t)
	ctx := t.Context()
	a, err := NewPostgresSequences(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewPostgresSequences(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 150; i++ {
		id, err := a.NextPaymentID(ctx, "t", "cust")
		if want := formatPaymentID(int64(i)); err != nil || id != want {
			t.Fatalf("payment %d: %s, %v; want %s", i, id, err, want)
		}
	}
	if last := counterRow(t, pool, "t", "cust"); last != 2*PaymentIDBlock {
		t.Fatalf("counter row at %d after 150 ids, want %d (two blocks reserved)", last, 2*PaymentIDBlock)
	}
	if id, err := b.NextPaymentID(ctx, "t", "cust"); err != nil || id != "00201" {
		t.Fatalf("the other node's first id: %s, %v; want 00201", id, err)
	}
	if id, err := a.NextPaymentID(ctx, "other-tenant", "cust"); err != nil || id != "00001" {
		t.Fatalf("another tenant's first id: %s, %v; want 00001", id, err)
	}
}

func counterRow(t *testing.T, pool *pgxpool.Pool, tenant, customer string) int64 {
	t.Helper()
	var last int64
	if err := pool.QueryRow(t.Context(), `SELECT last_value FROM payment_payment_id WHERE tenant = $1 AND customer_id = $2`,
		tenant, customer).Scan(&last); err != nil {
		t.Fatal(err)
	}
	return last
}

// perPaymentID is the allocation PostgresSequences made before it reserved
// blocks, one counter-row update per payment id: the benchmarks' baseline.
func perPaymentID(ctx context.Context, pool *pgxpool.Pool, tenant Tenant, customerID string) (string, error) {
	var n int64
	err := pool.QueryRow(ctx, `
		INSERT INTO payment_payment_id (tenant, customer_id, last_value) VALUES ($1, $2, 1)
		ON CONFLICT (tenant, customer_id) DO UPDATE SET last_value = payment_payment_id.last_value + 1
		RETURNING last_value`, string(tenant), customerID).Scan(&n)
	if err != nil {
		return "", err
	}
	return formatPaymentID(n), nil
}

// BenchmarkPostgresPaymentIDs draws payment ids from 8 goroutines per
// core, for one customer (every payment on one counter row) and for 1000,
// one row update per id (the baseline, "per-id") and in blocks
// (PostgresSequences). ns/op is per id.
//
//	go test ./examples/payment -run '^$' -bench PostgresPaymentIDs -count 3
func BenchmarkPostgresPaymentIDs(b *testing.B) {
	pool := pg.EmptyPool(b)
	ctx := context.Background()
	seqs, err := NewPostgresSequences(ctx, pool)
	if err != nil {
		b.Fatal(err)
	}
	draws := map[string]func(Tenant, string) (string, error){
		"per-id": func(t Tenant, c string) (string, error) { return perPaymentID(ctx, pool, t, c) },
		"block":  func(t Tenant, c string) (string, error) { return seqs.NextPaymentID(ctx, t, c) },
	}
	for _, customers := range []int{1, 1000} {
		for _, how := range []string{"per-id", "block"} {
			draw := draws[how]
			b.Run(fmt.Sprintf("customers=%d/%s", customers, how), func(b *testing.B) {
				var next atomic.Int64
				b.SetParallelism(8)
				b.RunParallel(func(p *testing.PB) {
					for p.Next() {
						c := "c" + strconv.Itoa(int(next.Add(1))%customers)
						if _, err := draw("bench-"+Tenant(how), c); err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		}
	}
}
