package main

import (
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/examples/payment/readmodel"
)

// getShop asks the read model endpoint as customer of tenant.
func getShop(t *testing.T, n *Node, method, tenant, customer, shop string) (int, shopBody, errorBody, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, n.APIURL+"/00/ec/settlements/"+shop, nil)
	if err != nil {
		t.Fatal(err)
	}
	if tenant != "" {
		req.Header.Set("X-Tenant-Id", tenant)
	}
	if customer != "" {
		req.Header.Set("Authorization", "Bearer "+customer)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var (
		body shopBody
		fail errorBody
	)
	if resp.StatusCode == http.StatusOK {
		err = json.Unmarshal(data, &body)
	} else {
		err = json.Unmarshal(data, &fail)
	}
	if err != nil {
		t.Fatalf("body %q: %v", data, err)
	}
	return resp.StatusCode, body, fail, resp.Header
}

// waitForShop polls the endpoint until ok(body) holds, for at most a
// minute (the projection follows the journal live; this bounds a hang, it
// is no measure of speed).
func waitForShop(t *testing.T, n *Node, tenant, shop string, ok func(shopBody) bool) shopBody {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		status, body, fail, _ := getShop(t, n, http.MethodGet, tenant, "dummy", shop)
		if status != http.StatusOK {
			t.Fatalf("GET %s: %d %+v", shop, status, fail)
		}
		if ok(body) {
			return body
		}
		if time.Now().After(deadline) {
			t.Fatalf("read model of %s never got there: %+v", shop, body)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// states is a shop's settlements as "order:state:amount", by order id.
func states(b shopBody) []string {
	var out []string
	for _, s := range b.Settlements {
		out = append(out, s.OrderID+":"+s.State+":"+itoa(s.Amount))
	}
	return out
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }

func requireReadModel(t *testing.T, n *Node) {
	t.Helper()
	if n.ReadModelProjection() == nil {
		t.Fatal("no read model: the journal answers no queries (journal.Queries)")
	}
}

// Settle, cancel and a failed settlement through the API: the shop
// endpoint shows each payment's state and amount and the shop's totals,
// per tenant, client and shop.
func TestReadModelShowsSettlementsAndTotals(t *testing.T) {
	n := startNode(t, nil)
	requireReadModel(t, n)
	start := time.Now()
	put(t, n, "example", "dummy", "shop-1/o1/payment", `{"amount":1000}`).want(t, 200, "")
	put(t, n, "example", "dummy", "shop-1/o2/payment", `{"amount":250}`).want(t, 200, "")
	put(t, n, "example", "dummy", "shop-1/o2/cancel", "").want(t, 200, "")
	n.Simulator.SetRules(Rule{Reaction: Reaction{ErrCode: "E1234"}})
	put(t, n, "example", "dummy", "shop-1/o3/payment", `{"amount":300}`).want(t, 500, CodeIssuingServiceServerError)
	n.Simulator.SetRules()
	put(t, n, "example", "dummy", "shop-2/o1/payment", `{"amount":70}`).want(t, 200, "")
	put(t, n, "tenant-a", "dummy", "shop-1/o9/payment", `{"amount":5}`).want(t, 200, "")

	want := []string{"o1:settled:1000", "o2:canceled:250", "o3:failed:300"}
	body := waitForShop(t, n, "example", "shop-1", func(b shopBody) bool { return slices.Equal(states(b), want) })
	wantTotals := readmodel.Totals{Settled: readmodel.Total{Count: 1, Amount: 1000}, Canceled: readmodel.Total{Count: 1, Amount: 250},
		Failed: readmodel.Total{Count: 1, Amount: 300}}
	if body.Totals != wantTotals || body.WalletShopID != "shop-1" {
		t.Fatalf("shop-1: %+v, want totals %+v", body, wantTotals)
	}
	for _, s := range body.Settlements {
		if s.UpdatedAt.Before(start.Add(-time.Second)) || s.UpdatedAt.After(time.Now().Add(time.Second)) {
			t.Fatalf("%s updated at %v, not during the test", s.OrderID, s.UpdatedAt)
		}
	}
	waitForShop(t, n, "example", "shop-2", func(b shopBody) bool { return slices.Equal(states(b), []string{"o1:settled:70"}) })
	waitForShop(t, n, "tenant-a", "shop-1", func(b shopBody) bool { return slices.Equal(states(b), []string{"o9:settled:5"}) })

	// A shop without payments is empty, not an error.
	if status, b, _, _ := getShop(t, n, http.MethodGet, "example", "dummy", "shop-3"); status != 200 || b.Settlements == nil || len(b.Settlements) != 0 || b.Totals != (readmodel.Totals{}) {
		t.Fatalf("empty shop: %d %+v", status, b)
	}
}

// The endpoint checks the caller as the others do.
func TestReadModelEndpointValidation(t *testing.T) {
	n := startNode(t, nil)
	for _, tc := range []struct {
		name, method, tenant, customer, shop string
		status                               int
		code                                 Code
	}{
		{"no token", http.MethodGet, "example", "", "shop-1", 401, CodeForbidden},
		{"bad token", http.MethodGet, "example", "bad", "shop-1", 401, CodeForbidden},
		{"no tenant", http.MethodGet, "", "dummy", "shop-1", 400, CodeValidation},
		{"long shop", http.MethodGet, "example", "dummy", strings.Repeat("s", 41), 400, CodeValidation},
		{"wrong method", http.MethodPost, "example", "dummy", "shop-1", 405, CodeValidation},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, _, fail, h := getShop(t, n, tc.method, tc.tenant, tc.customer, tc.shop)
			if status != tc.status || fail.Code != string(tc.code) {
				t.Fatalf("%d %+v, want %d %s", status, fail, tc.status, tc.code)
			}
			if status == 405 && h.Get("Allow") != http.MethodGet {
				t.Fatalf("Allow %q", h.Get("Allow"))
			}
		})
	}
}

// readmodel reads the events by manifest and JSON field names, without
// their types: it must agree with the codec's encoding of each (a new
// event type goes in this table and in readmodel's).
func TestReadModelDecodesTheEntitysEvents(t *testing.T) {
	reg := codec.NewRegistry()
	Register(reg)
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	events := map[Event]readmodel.Change{
		SettlementAccepted{Request: SettleRequest{Amount: 1234}, AcceptedAt: at}: {To: readmodel.Settling, Amount: 1234},
		SettlementSuccessConfirmed{At: at}:                                       {To: readmodel.Settled},
		SettlementFailureConfirmed{At: at}:                                       {To: readmodel.Failed},
		SettlementAborted{At: at}:                                                {To: readmodel.Failed},
		SettlementTimeoutDetected{}:                                              {To: readmodel.Failed},
		CancelAccepted{AcceptedAt: at}:                                           {To: readmodel.Canceling},
		CancelSuccessConfirmed{At: at}:                                           {To: readmodel.Canceled},
		CancelFailureConfirmed{At: at}:                                           {To: readmodel.Settled},
		CancelAborted{}:                                                          {To: readmodel.Settled},
		CancelTimeoutDetected{}:                                                  {To: readmodel.Settled},
	}
	var manifests []string
	for e, want := range events {
		manifest, payload, err := reg.Encode(e)
		if err != nil {
			t.Fatal(err)
		}
		manifests = append(manifests, manifest)
		got, err := readmodel.Decode(manifest, payload)
		if err != nil {
			t.Fatalf("%T: %v", e, err)
		}
		if !reflect.DeepEqual(got, []any{want}) {
			t.Fatalf("%T: %+v, want %+v", e, got, want)
		}
	}
	slices.Sort(manifests)
	if !slices.Equal(manifests, readmodel.Manifests()) {
		t.Fatalf("the entity's events %v, the read model's %v", manifests, readmodel.Manifests())
	}
	// The persistence id's key, as the entity builds it.
	for _, k := range []OrderKey{{TenantExample, 0, "shop-1", "o1"}, {TenantA, 42, "a:b|c d", "X9"}} {
		got, err := readmodel.ParsePersistenceID(TypeKey.Name() + "|" + k.EntityID())
		want := readmodel.Key{ShopKey: readmodel.ShopKey{Tenant: string(k.Tenant), ClientID: k.ClientID, Shop: k.WalletShopID}, OrderID: k.OrderID}
		if err != nil || got != want {
			t.Fatalf("%v: %+v %v, want %+v", k, got, err, want)
		}
	}
}

// awaitProjectionsRunning waits until every read model projection
// instance runs on n (a node alone in its cluster hosts them all).
func awaitProjectionsRunning(t *testing.T, n *Node) {
	t.Helper()
	requireReadModel(t, n)
	deadline := time.Now().Add(time.Minute)
	for {
		running := 0
		for _, st := range n.ReadModelProjection().Local() {
			if st.Running {
				running++
			}
		}
		if running == ReadModelInstances {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d read model instances running after a minute", running, ReadModelInstances)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
