package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// PayCredential is what the issuer needs to know about the payer and the
// shop (IssuingServicePayCredential).
type PayCredential struct {
	WalletID       string
	MemberStoreID  string
	ContractNumber string
	HousePAN       string
	TerminalID     string
}

// CredentialKey finds a PayCredential: the original joins Customer,
// HouseMemberStore (clientId, walletShopId), ServiceRelation and
// IssuingService rows; the example keeps the joined rows in one table.
type CredentialKey struct {
	Tenant       Tenant
	CustomerID   string
	ClientID     int64
	WalletShopID string
}

// Credentials looks up pay credentials. A missing row (or one without a
// house PAN) is NotFound: the client gets 404 CODE-002.
type Credentials interface {
	PayCredential(ctx context.Context, key CredentialKey) (PayCredential, error)
}

// Sequences hands out the issuer's identifiers.
type Sequences interface {
	// NextTransactionID is the 12-digit transaction id (sequence SQ02).
	NextTransactionID(ctx context.Context, tenant Tenant) (string, error)
	// NextPaymentID is the 5-digit per-customer payment id (sequence SQ03).
	NextPaymentID(ctx context.Context, tenant Tenant, customerID string) (string, error)
}

func formatTransactionID(n int64) string { return zeroPad(n%1_000_000_000_000, 12) }
func formatPaymentID(n int64) string     { return zeroPad(n%100_000, 5) }

// zeroPad is fmt.Sprintf("%0*d", width, n) without fmt, which costs more
// than the rest of drawing an id.
func zeroPad(n int64, width int) string {
	if n < 0 {
		return fmt.Sprintf("%0*d", width, n)
	}
	var digits [20]byte
	d := strconv.AppendInt(digits[:0], n, 10)
	var b strings.Builder
	b.Grow(max(width, len(d)))
	for range width - len(d) {
		b.WriteByte('0')
	}
	b.Write(d)
	return b.String()
}

// padRight is fmt.Sprintf("%-*s", width, s): s and spaces up to width
// runes.
func padRight(s string, width int) string {
	n := utf8.RuneCountInString(s)
	if n >= width {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + width - n)
	b.WriteString(s)
	for range width - n {
		b.WriteByte(' ')
	}
	return b.String()
}

// MemoryTables keeps credentials and sequences in memory. It is safe for
// concurrent use.
type MemoryTables struct {
	mu          sync.Mutex
	credentials map[CredentialKey]PayCredential
	txSeq       map[Tenant]int64
	paySeq      map[CredentialKey]int64 // keyed by tenant and customer only
}

// NewMemoryTables returns empty tables.
func NewMemoryTables() *MemoryTables {
	return &MemoryTables{
		credentials: make(map[CredentialKey]PayCredential),
		txSeq:       make(map[Tenant]int64),
		paySeq:      make(map[CredentialKey]int64),
	}
}

// Put stores the credential of key.
func (m *MemoryTables) Put(key CredentialKey, c PayCredential) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.credentials[key] = c
}

// Delete removes the credential of key (a logical delete in the original).
func (m *MemoryTables) Delete(key CredentialKey) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.credentials, key)
}

// PayCredential implements Credentials.
func (m *MemoryTables) PayCredential(_ context.Context, key CredentialKey) (PayCredential, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.credentials[key]
	if !ok || c.HousePAN == "" {
		return PayCredential{}, NotFound("payment information")
	}
	return c, nil
}

// NextTransactionID implements Sequences.
func (m *MemoryTables) NextTransactionID(_ context.Context, tenant Tenant) (string, error) {
	m.mu.Lock()
	m.txSeq[tenant]++
	n := m.txSeq[tenant]
	m.mu.Unlock()
	return formatTransactionID(n), nil
}

// NextPaymentID implements Sequences.
func (m *MemoryTables) NextPaymentID(_ context.Context, tenant Tenant, customerID string) (string, error) {
	m.mu.Lock()
	k := CredentialKey{Tenant: tenant, CustomerID: customerID}
	m.paySeq[k]++
	n := m.paySeq[k]
	m.mu.Unlock()
	return formatPaymentID(n), nil
}

// SeedDemo stores the credentials the demo and a fresh `go run` use: the
// stub authorizer's customer "dummy" with client id 0 at shops shop-1 …
// shop-3, in every tenant.
func SeedDemo(m *MemoryTables) {
	for _, t := range Tenants {
		for i := 1; i <= 3; i++ {
			m.Put(CredentialKey{Tenant: t, CustomerID: "dummy", ClientID: 0, WalletShopID: fmt.Sprintf("shop-%d", i)},
				PayCredential{
					WalletID:       "wallet-dummy",
					MemberStoreID:  fmt.Sprintf("store%d", i),
					ContractNumber: fmt.Sprintf("C%07d", i),
					HousePAN:       fmt.Sprintf("99990000000000%02d", i),
					TerminalID:     fmt.Sprintf("T%04d", i),
				})
		}
	}
}
