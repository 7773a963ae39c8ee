package main

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
)

// PostgresSequences draws the issuer's ids from PostgreSQL, so that ids
// stay unique across restarts and nodes: a sequence for transaction ids
// (SQ02) and a counter row per customer for payment ids (SQ03). The tables
// belong to the example, not to Shoal's migrations; they are created in the
// connection's schema if missing.
type PostgresSequences struct{ pool *pgxpool.Pool }

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
	return &PostgresSequences{pool: pool}, nil
}

// NextTransactionID implements Sequences; one sequence serves every tenant.
func (s *PostgresSequences) NextTransactionID(ctx context.Context, _ Tenant) (string, error) {
	var n int64
	if err := s.pool.QueryRow(ctx, `SELECT nextval('payment_transaction_id')`).Scan(&n); err != nil {
		return "", fmt.Errorf("transaction id: %w", err)
	}
	return formatTransactionID(n), nil
}

// NextPaymentID implements Sequences.
func (s *PostgresSequences) NextPaymentID(ctx context.Context, tenant Tenant, customerID string) (string, error) {
	var n int64
	err := s.pool.QueryRow(ctx, `
		INSERT INTO payment_payment_id (tenant, customer_id, last_value) VALUES ($1, $2, 1)
		ON CONFLICT (tenant, customer_id) DO UPDATE SET last_value = payment_payment_id.last_value + 1
		RETURNING last_value`, string(tenant), customerID).Scan(&n)
	if err != nil {
		return "", fmt.Errorf("payment id: %w", err)
	}
	return formatPaymentID(n), nil
}
