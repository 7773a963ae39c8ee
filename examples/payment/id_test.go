package main

import (
	"testing"

	"github.com/shoal-dev/shoal/eventsourced"
)

func TestEntityIDRoundTrip(t *testing.T) {
	for _, k := range []OrderKey{
		{Tenant: TenantExample, ClientID: 0, WalletShopID: "shop-1", OrderID: "order1"},
		{Tenant: TenantA, ClientID: -42, WalletShopID: "a:b|c d%e+f/g", OrderID: "X"},
		{Tenant: TenantA, ClientID: 1 << 62, WalletShopID: "", OrderID: ""},
	} {
		id := k.EntityID()
		got, err := ParseEntityID(id)
		if err != nil || got != k {
			t.Errorf("ParseEntityID(%q) = %+v, %v; want %+v", id, got, err, k)
		}
	}
}

// The original joined clientId, walletShopId and orderId with "-": these
// keys were one entity there and must be different entities here.
func TestEntityIDsDoNotCollide(t *testing.T) {
	keys := []OrderKey{
		{Tenant: TenantExample, ClientID: 1, WalletShopID: "a-b", OrderID: "c"},
		{Tenant: TenantExample, ClientID: 1, WalletShopID: "a", OrderID: "b-c"},
		{Tenant: TenantExample, ClientID: 1, WalletShopID: "a:b", OrderID: "c"},
		{Tenant: TenantExample, ClientID: 1, WalletShopID: "a", OrderID: "b:c"},
		{Tenant: TenantExample, ClientID: 1, WalletShopID: "a%3Ab", OrderID: "c"},
		{Tenant: TenantA, ClientID: 1, WalletShopID: "a-b", OrderID: "c"}, // tenant is part of the id
	}
	seen := map[string]OrderKey{}
	for _, k := range keys {
		id := k.EntityID()
		if other, dup := seen[id]; dup {
			t.Fatalf("%+v and %+v share entity id %q", k, other, id)
		}
		seen[id] = k
	}
}

// The persistence id holds the tenant, and escaping keeps "|" out of it.
func TestEntityIDFitsAPersistenceID(t *testing.T) {
	k := OrderKey{Tenant: TenantA, ClientID: 1, WalletShopID: "a|b", OrderID: "c"}
	pid, err := eventsourced.NewPersistenceID(TypeKey.Name(), k.EntityID())
	if err != nil {
		t.Fatal(err)
	}
	if want := "ec-house-money|tenant-a:1:a%7Cb:c"; pid.String() != want {
		t.Fatalf("persistence id %q, want %q", pid, want)
	}
}

func TestParseEntityIDRejects(t *testing.T) {
	for _, id := range []string{"", "example:1:a", "example:1:a:b:c", "nobody:1:a:b", "example:x:a:b", "example:1:%zz:b"} {
		if k, err := ParseEntityID(id); err == nil {
			t.Errorf("ParseEntityID(%q) = %+v, want an error", id, k)
		}
	}
}
