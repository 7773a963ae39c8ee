package main

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// Tenant is a tenant of the payment service. Each tenant's entities have
// their own persistence ids, so tenants never share an event stream.
type Tenant string

// The tenants the service knows (AppTenant in the original).
const (
	TenantExample Tenant = "example"
	TenantA       Tenant = "tenant-a"
)

// Tenants lists every valid tenant.
var Tenants = []Tenant{TenantExample, TenantA}

// ParseTenant validates the value of an X-Tenant-Id header.
func ParseTenant(s string) (Tenant, error) {
	for _, t := range Tenants {
		if string(t) == s {
			return t, nil
		}
	}
	return "", fmt.Errorf("unknown tenant %q", s)
}

// OrderKey identifies one payment: the entity id is derived from it, so
// every request for the same key reaches the same entity and its answers
// are idempotent per key. Customer and amount are deliberately not part of it.
type OrderKey struct {
	Tenant       Tenant
	ClientID     int64
	WalletShopID string
	OrderID      string
}

// idSeparator joins the escaped parts of an entity id. url.QueryEscape
// escapes it (and "|", which persistence ids reserve), so no part can
// contain it and the join is unambiguous. The original joined the raw parts
// with "-", which both walletShopId and orderId may contain: (1, "a-b", "c")
// and (1, "a", "b-c") were the same entity there.
const idSeparator = ":"

// EntityID is the key as an entity id: each part query-escaped, joined by ":".
func (k OrderKey) EntityID() string {
	return strings.Join([]string{
		url.QueryEscape(string(k.Tenant)),
		strconv.FormatInt(k.ClientID, 10),
		url.QueryEscape(k.WalletShopID),
		url.QueryEscape(k.OrderID),
	}, idSeparator)
}

func (k OrderKey) String() string { return k.EntityID() }

// ParseEntityID is the inverse of OrderKey.EntityID.
func ParseEntityID(id string) (OrderKey, error) {
	parts := strings.Split(id, idSeparator)
	if len(parts) != 4 {
		return OrderKey{}, fmt.Errorf("entity id %q: want 4 parts separated by %q", id, idSeparator)
	}
	var raw [4]string
	for i, p := range parts {
		s, err := url.QueryUnescape(p)
		if err != nil {
			return OrderKey{}, fmt.Errorf("entity id %q: %w", id, err)
		}
		raw[i] = s
	}
	tenant, err := ParseTenant(raw[0])
	if err != nil {
		return OrderKey{}, fmt.Errorf("entity id %q: %w", id, err)
	}
	clientID, err := strconv.ParseInt(raw[1], 10, 64)
	if err != nil {
		return OrderKey{}, fmt.Errorf("entity id %q: client id: %w", id, err)
	}
	return OrderKey{Tenant: tenant, ClientID: clientID, WalletShopID: raw[2], OrderID: raw[3]}, nil
}
