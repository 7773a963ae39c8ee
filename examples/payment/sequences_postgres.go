package main

import (
	"context"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"
)

// PaymentIDBlock is how many payment ids of one customer a
// PostgresSequences reserves at once (see NextPaymentID).
const PaymentIDBlock = 100

// maxCachedCustomers bounds the customers whose reserved ids a
// PostgresSequences keeps; past it the cache starts over, and the ids left
// in the forgotten blocks are never handed out (gaps, as after a crash).
const maxCachedCustomers = 10_000

// PostgresSequences draws the issuer's ids from PostgreSQL, so that ids
// stay unique across restarts and nodes: a sequence for transaction ids
// (SQ02) and a counter row per customer for payment ids (SQ03). The tables
// belong to the example, not to Shoal's migrations; they are created in the
// connection's schema if missing.
//
// Payment ids are reserved PaymentIDBlock at a time per customer and kept
// in memory: one UPDATE of the customer's counter row per block instead of
// one per payment, so that the payments of a busy customer no longer queue
// on the lock of that row. Each node holds blocks of its own, so a
// customer's ids are unique but not in order across nodes, and the ids
// left in a node's blocks when it stops or crashes are never handed out:
// gaps of up to PaymentIDBlock−1 ids per customer and node, which the
// 5-digit id's space (it wraps at 100000) absorbs.
type PostgresSequences struct {
	pool *pgxpool.Pool

	mu     sync.Mutex
	blocks map[customerKey]*paymentIDBlock
}

type customerKey struct {
	tenant     Tenant
	customerID string
}

// paymentIDBlock is the ids of one customer reserved by this node: next to
// last, inclusive (empty when next > last). Its mutex also makes one
// payment at a time refill it.
type paymentIDBlock struct {
	mu         sync.Mutex
	next, last int64
}

// NewPostgresSequences creates the example's tables if needed. Nodes that
// start together may call it at once: IF NOT EXISTS alone races (both see
// no table, the second insert into the catalog fails), so the statements
// run as one transaction under an advisory lock.
func NewPostgresSequences(ctx context.Context, pool *pgxpool.Pool) (*PostgresSequences, error) {
	_, err := pool.Exec(ctx, `
		SELECT pg_advisory_xact_lock(hashtext('shoal example payment sequences'));
		CREATE SEQUENCE IF NOT EXISTS payment_transaction_id;
		CREATE TABLE IF NOT EXISTS payment_payment_id (
			tenant      text   NOT NULL,
			customer_id text   NOT NULL,
			last_value  bigint NOT NULL,
			PRIMARY KEY (tenant, customer_id)
		)`)
	if err != nil {
		return nil, fmt.Errorf("payment sequences: %w", err)
	}
	return &PostgresSequences{pool: pool, blocks: make(map[customerKey]*paymentIDBlock)}, nil
}

// NextTransactionID implements Sequences; one sequence serves every tenant.
func (s *PostgresSequences) NextTransactionID(ctx context.Context, _ Tenant) (string, error) {
	var n int64
	if err := s.pool.QueryRow(ctx, `SELECT nextval('payment_transaction_id')`).Scan(&n); err != nil {
		return "", fmt.Errorf("transaction id: %w", err)
	}
	return formatTransactionID(n), nil
}

// NextPaymentID implements Sequences: the next id of the customer's block,
// reserving a new block first when it is used up.
func (s *PostgresSequences) NextPaymentID(ctx context.Context, tenant Tenant, customerID string) (string, error) {
	b := s.block(customerKey{tenant, customerID})
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.next > b.last {
		last, err := s.reserve(ctx, tenant, customerID)
		if err != nil {
			return "", err
		}
		b.next, b.last = last-PaymentIDBlock+1, last
	}
	n := b.next
	b.next++
	return formatPaymentID(n), nil
}

// block is the customer's block, empty when new.
func (s *PostgresSequences) block(k customerKey) *paymentIDBlock {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.blocks[k]
	if b == nil {
		if len(s.blocks) >= maxCachedCustomers {
			clear(s.blocks) // a holder of a forgotten block still uses its own ids
		}
		b = &paymentIDBlock{next: 1, last: 0}
		s.blocks[k] = b
	}
	return b
}

// reserve takes the customer's next PaymentIDBlock ids in one statement
// and returns the last of them.
func (s *PostgresSequences) reserve(ctx context.Context, tenant Tenant, customerID string) (int64, error) {
	var last int64
	err := s.pool.QueryRow(ctx, `
		INSERT INTO payment_payment_id (tenant, customer_id, last_value) VALUES ($1, $2, $3)
		ON CONFLICT (tenant, customer_id) DO UPDATE SET last_value = payment_payment_id.last_value + $3
		RETURNING last_value`, string(tenant), customerID, int64(PaymentIDBlock)).Scan(&last)
	if err != nil {
		return 0, fmt.Errorf("payment id: reserve a block: %w", err)
	}
	return last, nil
}
