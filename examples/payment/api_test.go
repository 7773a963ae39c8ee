package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/journal"
	"github.com/shoal-dev/shoal/journal/memory"
	"github.com/shoal-dev/shoal/sharding"
)

// HTTP tests through the real API and the simulator: over loopback
// listeners on a Node, and, where a test waits for a timeout, in a synctest
// bubble with the original's timeouts (bubbleAPI).

// tokenAuthorizer treats the token as the customer id, so tests can act as
// different customers; "bad" is an invalid token.
type tokenAuthorizer struct{}

func (tokenAuthorizer) Authorize(_ context.Context, token string) (Principal, error) {
	if token == "bad" {
		return Principal{}, errors.New("invalid token")
	}
	return Principal{CustomerID: token, ClientID: 0}, nil
}

func startNode(t testing.TB, mutate func(*Config)) *Node {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Logger = quietLogger()
	cfg.Auth = tokenAuthorizer{}
	tables := NewMemoryTables()
	SeedDemo(tables) // customer "dummy" at shop-1 … shop-3
	for _, tenant := range Tenants {
		tables.Put(CredentialKey{Tenant: tenant, CustomerID: "carol", ClientID: 0, WalletShopID: "shop-1"},
			PayCredential{MemberStoreID: "store1", HousePAN: "4000carol", TerminalID: "T9"})
	}
	cfg.Credentials, cfg.Sequences = tables, tables
	// Generous: nothing here waits for a response timeout (the synctest
	// tests below do), so a slow machine must not hit one.
	cfg.Issuer = IssuerClientConfig{ResponseTimeout: 10 * time.Second, RetryAttempts: 2, RetryDelay: time.Millisecond}
	if mutate != nil {
		mutate(&cfg)
	}
	n, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Kill)
	return n
}

type apiResult struct {
	Status int
	Body   map[string]string
	Header http.Header
}

// put sends a request as customer (the bearer token) of tenant.
func put(t *testing.T, n *Node, tenant, customer, path, body string) apiResult {
	t.Helper()
	req, err := http.NewRequest(http.MethodPut, n.APIURL+"/00/ec/settlements/"+path, strings.NewReader(body))
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
	res := apiResult{Status: resp.StatusCode}
	if err := json.Unmarshal(data, &res.Body); err != nil {
		t.Fatalf("body %q: %v", data, err)
	}
	return res
}

func (r apiResult) want(t *testing.T, status int, code Code) {
	t.Helper()
	if r.Status != status || r.Body["code"] != string(code) {
		t.Fatalf("got %d %v, want %d %q", r.Status, r.Body, status, code)
	}
}

const amount1000 = `{"amount":1000}`

func TestAPISettleAndCancel(t *testing.T) {
	n := startNode(t, nil)
	ok := put(t, n, "example", "dummy", "shop-1/order1/payment", amount1000)
	ok.want(t, 200, "")
	if ok.Body["walletShopId"] != "shop-1" || ok.Body["orderId"] != "order1" {
		t.Fatalf("body %v", ok.Body)
	}
	put(t, n, "example", "dummy", "shop-1/order1/payment", `{"amount":5}`).want(t, 200, "")
	put(t, n, "example", "dummy", "shop-1/order1/cancel", "").want(t, 200, "")
	put(t, n, "example", "dummy", "shop-1/order1/cancel", "").want(t, 200, "")
	put(t, n, "example", "carol", "shop-1/order1/cancel", "").want(t, 403, CodeForbidden)
	put(t, n, "example", "dummy", "shop-1/order1/payment", amount1000).want(t, 400, CodeValidation)
	if got := mtis(n.Simulator.Received()); !slices.Equal(got, []string{"0100", "0400"}) {
		t.Fatalf("issuer received %v", got)
	}
	// Another tenant's order with the same ids is another payment.
	put(t, n, "tenant-a", "dummy", "shop-1/order1/payment", amount1000).want(t, 200, "")
	put(t, n, "tenant-a", "dummy", "shop-1/order1/payment", amount1000).want(t, 200, "")
	if got := len(n.Simulator.Received()); got != 3 {
		t.Fatalf("issuer received %d requests, want 3", got)
	}
}

func TestAPIValidation(t *testing.T) {
	n := startNode(t, nil)
	for _, tc := range []struct {
		name, tenant, customer, path, body string
		status                             int
		code                               Code
	}{
		{"no token", "example", "", "shop-1/o1/payment", amount1000, 401, CodeForbidden},
		{"invalid token", "example", "bad", "shop-1/o1/payment", amount1000, 401, CodeForbidden},
		{"no tenant", "", "dummy", "shop-1/o1/payment", amount1000, 400, CodeValidation},
		{"unknown tenant", "tenant-b", "dummy", "shop-1/o1/payment", amount1000, 400, CodeValidation},
		{"no body", "example", "dummy", "shop-1/o1/payment", "", 400, CodeValidation},
		{"zero amount", "example", "dummy", "shop-1/o1/payment", `{"amount":0}`, 400, CodeValidation},
		{"11 digits", "example", "dummy", "shop-1/o1/payment", `{"amount":10000000000}`, 400, CodeValidation},
		{"not a number", "example", "dummy", "shop-1/o1/payment", `{"amount":"1"}`, 400, CodeValidation},
		{"order id not alphanumeric", "example", "dummy", "shop-1/o-1/payment", amount1000, 400, CodeValidation},
		{"order id too long", "example", "dummy", "shop-1/" + strings.Repeat("o", 28) + "/payment", amount1000, 400, CodeValidation},
		{"shop id too long", "example", "dummy", strings.Repeat("s", 41) + "/o1/payment", amount1000, 400, CodeValidation},
		{"unknown shop", "example", "dummy", "shop-9/o1/payment", amount1000, 404, CodeNotFound},
		{"cancel before settle", "example", "dummy", "shop-1/o2/cancel", "", 404, CodeNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			put(t, n, tc.tenant, tc.customer, tc.path, tc.body).want(t, tc.status, tc.code)
		})
	}
	put(t, n, "example", "dummy", "shop-1/o28ok/payment", `{"amount":9999999999}`).want(t, 200, "")
}

func TestAPIIssuerFailures(t *testing.T) {
	n := startNode(t, nil)
	for _, tc := range []struct {
		order  string
		rules  []Rule
		status int
		code   Code
	}{
		{"bad", []Rule{{Reaction: Reaction{Status: 400}}}, 500, CodeIssuingServiceBadRequest},
		{"down", []Rule{{MTI: "0100", Reaction: Reaction{Status: 503}}}, 503, CodeIssuingServiceUnavailable},
		{"errcode", []Rule{{Reaction: Reaction{ErrCode: "E1234"}}}, 500, CodeIssuingServiceServerError},
	} {
		t.Run(tc.order, func(t *testing.T) {
			n.Simulator.SetRules(tc.rules...)
			put(t, n, "example", "dummy", "shop-1/"+tc.order+"/payment", amount1000).want(t, tc.status, tc.code)
			n.Simulator.SetRules()
			// The stored failure, although the issuer is fine again.
			put(t, n, "example", "dummy", "shop-1/"+tc.order+"/payment", amount1000).want(t, tc.status, tc.code)
		})
	}
}

func TestAPICancelTW005(t *testing.T) {
	n := startNode(t, nil)
	put(t, n, "example", "dummy", "shop-2/tw/payment", amount1000).want(t, 200, "")
	n.Simulator.SetRules(Rule{MTI: MTIReversal, Reaction: Reaction{ErrCode: ErrCodeAlreadyCanceled}})
	put(t, n, "example", "dummy", "shop-2/tw/cancel", "").want(t, 400, CodeAlreadyCanceled)
	// The entity is Canceled: a repeated cancel succeeds without the issuer.
	put(t, n, "example", "dummy", "shop-2/tw/cancel", "").want(t, 200, "")
	if got := len(n.Simulator.Received()); got != 2 {
		t.Fatalf("issuer received %d requests, want 2", got)
	}
}

// bubbleAPI is the API in front of payment entities on single-node
// sharding, whose IssuerClient calls the simulator in-process: all of it
// in a synctest bubble, so the original's timeouts run on the fake clock
// and a test can tell which one answered, to the nanosecond.
type bubbleAPI struct {
	handler http.Handler
	sim     *Simulator
	journal *memory.Journal
}

func newBubbleAPI(t *testing.T, settings Settings, issuer func(*IssuerClientConfig)) *bubbleAPI {
	t.Helper()
	j, _ := remindingJournal()
	return newBubbleAPIOn(t, settings, issuer, j, j)
}

// newBubbleAPIOn runs the entities on journal j, which keeps its events in mem.
func newBubbleAPIOn(t *testing.T, settings Settings, issuer func(*IssuerClientConfig), j journal.Journal, mem *memory.Journal) *bubbleAPI {
	t.Helper()
	sys, err := entity.NewSystem(entity.Config{Codec: testRegistry(), Journal: j, ForceSerialization: true, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	sh, err := sharding.New(sys, sharding.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sh.Terminate)
	sim := NewSimulator()
	t.Cleanup(func() {
		// Calls to the issuer outlive their entities (issuing.go): let
		// those still running end, on the fake clock, before the bubble does.
		sim.Close()
		time.Sleep(time.Hour)
	})
	tables := NewMemoryTables()
	SeedDemo(tables)
	p := &Payments{Settings: settings, Issuer: simulatedIssuer(sim, issuer), Credentials: tables, Sequences: tables}
	region, err := InitPayments(sh, p, 1)
	if err != nil {
		t.Fatal(err)
	}
	api := &API{Payments: region, Auth: StubAuthorizer{}, AskTimeout: settings.AskTimeout, Log: quietLogger()}
	return &bubbleAPI{handler: api.Handler(), sim: sim, journal: mem}
}

// put sends a request as the stub's customer; the answer comes on the channel.
func (b *bubbleAPI) put(path, body string) <-chan apiResult {
	ch := make(chan apiResult, 1)
	go func() {
		req := httptest.NewRequest(http.MethodPut, "/00/ec/settlements/"+path, strings.NewReader(body))
		req.Header.Set("X-Tenant-Id", string(TenantExample))
		req.Header.Set("Authorization", "Bearer t")
		rec := httptest.NewRecorder()
		b.handler.ServeHTTP(rec, req)
		res := apiResult{Status: rec.Code, Header: rec.Header()}
		_ = json.Unmarshal(rec.Body.Bytes(), &res.Body)
		ch <- res
	}()
	synctest.Wait()
	return ch
}

// The issuer hangs and the client's timeouts are the original's: the
// request times out at 3s, its failure-cancel three times, 1s apart, so
// at 14s the client gets 504 CODE-005, before the ask timeout (15s); the
// failure is stored and the next settle gets it at once.
func TestAPIIssuerHangIsATimeOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBubbleAPI(t, DefaultSettings(), nil)
		b.sim.SetRules(Rule{Reaction: Reaction{Hang: true}})
		start := time.Now()
		(<-b.put("shop-1/hang/payment", amount1000)).want(t, 504, CodeTimeOut)
		if took := time.Since(start); took != 14*time.Second {
			t.Fatalf("answered after %v, want 14s", took)
		}
		b.sim.SetRules()
		start = time.Now()
		(<-b.put("shop-1/hang/payment", amount1000)).want(t, 504, CodeTimeOut)
		if took := time.Since(start); took != 0 {
			t.Fatalf("stored failure answered after %v", took)
		}
		if got := mtis(b.sim.Received()); !slices.Equal(got, []string{"0100", "0120", "0120", "0120"}) {
			t.Fatalf("issuer received %v", got)
		}
	})
}

// The ask gives up after AskTimeout (15s: CODE-012/500) while the issuer
// still hangs. A second settle waits in the entity's stash until the
// processing timeout, FailSafeMargin later (20s), moves it to Failed, and
// gets the stored CODE-012 then — not at its own ask timeout (30s).
func TestAPIAskTimeoutThenTheProcessingTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBubbleAPI(t, DefaultSettings(), func(c *IssuerClientConfig) {
			c.ResponseTimeout = time.Minute // only the entity's timeouts end the hang
		})
		b.sim.SetRules(Rule{Reaction: Reaction{Hang: true}})
		start := time.Now()
		(<-b.put("shop-1/slow/payment", amount1000)).want(t, 500, CodeUnpredictable)
		if took := time.Since(start); took != 15*time.Second {
			t.Fatalf("ask timed out after %v, want 15s", took)
		}
		(<-b.put("shop-1/slow/payment", amount1000)).want(t, 500, CodeUnpredictable)
		if took := time.Since(start); took != 20*time.Second {
			t.Fatalf("second settle answered at %v, want 20s (the processing timeout)", took)
		}
		key := OrderKey{Tenant: TenantExample, WalletShopID: "shop-1", OrderID: "slow"}
		if got := storedEvents(t, b.journal, key); !slices.Equal(got,
			[]string{"payment.SettlementAccepted", "payment.SettlementTimeoutDetected"}) {
			t.Fatalf("events %v", got)
		}
	})
}

// Shutdown hands entities off through StopActor: an entity still waiting
// for the issuer (its client has given up) stashes it and stops only once
// the answer is stored.
func TestAPIShutdownWaitsForTheIssuer(t *testing.T) {
	n := startNode(t, func(c *Config) {
		c.Settings.AskTimeout = 100 * time.Millisecond
		c.Issuer.ResponseTimeout = time.Minute
	})
	// Far beyond the ask's timeout, so the client has given up even when a
	// loaded machine fires that timer late.
	n.Simulator.SetRules(Rule{Reaction: Reaction{Latency: 3 * time.Second}})
	put(t, n, "example", "dummy", "shop-1/handoff/payment", amount1000).want(t, 500, CodeUnpredictable)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := n.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	key := OrderKey{Tenant: TenantExample, WalletShopID: "shop-1", OrderID: "handoff"}
	if got := storedEvents(t, n.Journal, key); !slices.Equal(got,
		[]string{"payment.SettlementAccepted", "payment.SettlementSuccessConfirmed"}) {
		t.Fatalf("after shutdown: %v", got)
	}
	if l := residentEntities(n.Payments); l != 0 {
		t.Fatalf("%d entities alive after shutdown", l)
	}
}

// An issuer call outlives its entity (here the entity times out first and
// passivates); Shutdown waits for the call before it closes what the call
// uses, so the call ends by its own protocol, not by a closed client.
func TestShutdownWaitsForIssuerCallsThatOutliveTheirEntity(t *testing.T) {
	// Far beyond the processing timeout (AskTimeout + FailSafeMargin), so
	// the entity times out first even when a loaded machine is late.
	const latency = 3 * time.Second
	n := startNode(t, func(c *Config) {
		c.Settings.AskTimeout = 50 * time.Millisecond
		c.Settings.FailSafeMargin = 50 * time.Millisecond
	})
	n.Simulator.SetRules(Rule{Reaction: Reaction{Latency: latency}})
	start := time.Now()
	put(t, n, "example", "dummy", "shop-1/outlive/payment", amount1000).want(t, 500, CodeUnpredictable)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := n.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	// The call cannot end before the issuer answers.
	if elapsed := time.Since(start); elapsed < latency {
		t.Fatalf("Shutdown returned %v after the request, before the issuer's answer (%v)", elapsed, latency)
	}
	key := OrderKey{Tenant: TenantExample, WalletShopID: "shop-1", OrderID: "outlive"}
	if got := storedEvents(t, n.Journal, key); !slices.Equal(got,
		[]string{"payment.SettlementAccepted", "payment.SettlementTimeoutDetected"}) {
		t.Fatalf("events %v", got)
	}
}

func TestAPIUnknownRoute(t *testing.T) {
	n := startNode(t, nil)
	resp, err := http.Post(n.APIURL+"/00/ec/settlements/shop-1/o1/payment", "application/json", bytes.NewReader([]byte(amount1000)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("POST: %d", resp.StatusCode)
	}
}

// An answer is its body's JSON and a newline, with the headers that say
// what and how long it is; a value that does not encode is a 500 with the
// unexpected-error body. Answers reuse buffers: one must not leak into the next.
func TestWriteJSONAnswers(t *testing.T) {
	for _, tc := range []struct {
		status     int
		v          any
		wantStatus int
		wantBody   string
	}{
		{200, successBody{OrderID: "o<1>", WalletShopID: "shop-1"}, 200, `{"orderId":"o<1>","walletShopId":"shop-1"}` + "\n"},
		{400, errorBody{Code: "CODE-003", Message: "amount must be between 1 and 9999999999"}, 400, `{"code":"CODE-003","message":"amount must be between 1 and 9999999999"}` + "\n"},
		{200, map[string]any{"f": func() {}}, 500, `{"code":"CODE-012","message":"unexpected error"}` + "\n"},
		{404, errorBody{Code: "CODE-002", Message: "no such endpoint"}, 404, `{"code":"CODE-002","message":"no such endpoint"}` + "\n"},
	} {
		rec := httptest.NewRecorder()
		writeJSON(rec, tc.status, tc.v)
		if rec.Code != tc.wantStatus || rec.Body.String() != tc.wantBody {
			t.Fatalf("writeJSON(%d, %v) = %d %q, want %d %q", tc.status, tc.v, rec.Code, rec.Body, tc.wantStatus, tc.wantBody)
		}
		if ct, cl := rec.Header().Get("Content-Type"), rec.Header().Get("Content-Length"); ct != "application/json" || cl != strconv.Itoa(len(tc.wantBody)) {
			t.Fatalf("headers Content-Type %q, Content-Length %q; want application/json, %d", ct, cl, len(tc.wantBody))
		}
	}
}
