package admin_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/internal/logtest"
	"github.com/shoal-dev/shoal/node/admin"
)

const token = "s3cret"

// fakeSource is a node as the handler sees it; it records the actions.
type fakeSource struct {
	mu       sync.Mutex
	ready    error
	shards   admin.Shards
	reads    int // Shards calls
	left     []string
	moved    []string // type/shard
	downed   []cluster.UniqueAddress
	leaseErr error
}

func newFake() *fakeSource {
	return &fakeSource{shards: admin.Shards{
		Type:        "payment",
		Coordinator: admin.Coordinator{Node: "node-a", Incarnation: 3, Epoch: 7},
		Nodes:       []string{"node-a#3", "node-b#1"},
		Shards: []admin.Shard{
			{ID: "2", Node: "node-a#3", State: admin.StateActive, Entities: 4},
			{ID: "12", Node: "node-b#1", State: admin.StateHandingOff, Entities: 1},
			{ID: "30", State: admin.StateUnallocated, Entities: -1},
		},
	}}
}

func (f *fakeSource) Ready() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ready
}

func (f *fakeSource) Alive() error { return nil }

func (f *fakeSource) Members() admin.Members {
	return admin.Members{Self: "node-a#3", Oldest: "node-a#3", Members: []admin.Member{
		{Node: "node-a", Incarnation: 3, ID: "node-a#3", TransportAddr: "127.0.0.1:7001", GossipAddr: "127.0.0.1:7946",
			Status: "Up", Roles: []string{"payment"}, AppVersion: "1.2.0", JoinOrder: 1},
		{Node: "node-b", Incarnation: 1, ID: "node-b#1", Status: "Up", Roles: []string{}, JoinOrder: 2, Unreachable: true},
	}}
}

func (f *fakeSource) Types() []string { return []string{"payment"} }

func (f *fakeSource) setShards(fn func(*admin.Shards)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(&f.shards)
}

func (f *fakeSource) Shards(_ context.Context, typeName string) (admin.Shards, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	if typeName != "payment" {
		return admin.Shards{}, fmt.Errorf("%w: %q", admin.ErrUnknownType, typeName)
	}
	st := f.shards
	st.Shards = slices.Clone(st.Shards)
	return st, nil
}

func (f *fakeSource) Leases(context.Context) (admin.Leases, error) {
	if f.leaseErr != nil {
		return admin.Leases{}, f.leaseErr
	}
	at := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	return admin.Leases{
		Nodes:        []admin.NodeLease{{Node: "node-a", Incarnation: 3, ExpiresAt: at}},
		Coordinators: []admin.CoordinatorLease{{Type: "payment", Holder: "node-a#3", Epoch: 7, ExpiresAt: at}},
	}, nil
}

func (f *fakeSource) Leave(_ context.Context, node string) error {
	if node != "" && node != "node-a" && node != "node-b" {
		return fmt.Errorf("%w: %q", admin.ErrUnknownNode, node)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.left = append(f.left, node)
	return nil
}

func (f *fakeSource) Rebalance(_ context.Context, typeName, shard string) error {
	if typeName != "payment" {
		return fmt.Errorf("%w: %q", admin.ErrUnknownType, typeName)
	}
	if shard != "2" {
		return fmt.Errorf("%w: %q", admin.ErrUnknownShard, shard)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.moved = append(f.moved, typeName+"/"+shard)
	return nil
}

func (f *fakeSource) Down(_ context.Context, node cluster.UniqueAddress) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.downed = append(f.downed, node)
	return nil
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// do serves one request and returns the status and body.
func do(t *testing.T, h http.Handler, method, path, auth, body string) (int, string) {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Code, rec.Body.String()
}

func decodeAs[T any](t *testing.T, body string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatalf("decode %q: %v", body, err)
	}
	return v
}

type errBody struct {
	Error string     `json:"error"`
	Code  admin.Code `json:"code"`
}

func TestReadsAnswerTheContractsJSON(t *testing.T) {
	f := newFake()
	h := admin.New(f, admin.Options{Token: token, Logger: quiet()})

	code, body := do(t, h, "GET", "/admin/v1/members", "", "")
	if code != 200 {
		t.Fatalf("members: %d %s", code, body)
	}
	raw := decodeAs[map[string]any](t, body)
	m0 := raw["members"].([]any)[0].(map[string]any)
	for _, k := range []string{"node", "incarnation", "id", "transportAddr", "gossipAddr", "status", "roles", "appVersion", "joinOrder", "unreachable"} {
		if _, ok := m0[k]; !ok {
			t.Errorf("member lacks %q: %v", k, m0)
		}
	}
	if raw["self"] != "node-a#3" || raw["oldest"] != "node-a#3" {
		t.Errorf("members: %v", raw)
	}

	code, body = do(t, h, "GET", "/admin/v1/types", "", "")
	if code != 200 || strings.TrimSpace(body) != `{"types":["payment"]}` {
		t.Fatalf("types: %d %s", code, body)
	}

	code, body = do(t, h, "GET", "/admin/v1/shards/payment", "", "")
	if code != 200 {
		t.Fatalf("shards: %d %s", code, body)
	}
	want := `{"type":"payment","coordinator":{"node":"node-a","incarnation":3,"epoch":7},` +
		`"nodes":["node-a#3","node-b#1"],"shards":[{"id":"2","node":"node-a#3","state":"active","entities":4},` +
		`{"id":"12","node":"node-b#1","state":"handing-off","entities":1},{"id":"30","node":"","state":"unallocated","entities":-1}]}`
	if strings.TrimSpace(body) != want {
		t.Fatalf("shards:\n got %s\nwant %s", body, want)
	}

	code, body = do(t, h, "GET", "/admin/v1/leases", "", "")
	want = `{"nodes":[{"node":"node-a","incarnation":3,"expiresAt":"2030-01-01T00:00:00Z","expired":false}],` +
		`"coordinators":[{"type":"payment","holder":"node-a#3","epoch":7,"expiresAt":"2030-01-01T00:00:00Z","expired":false}]}`
	if code != 200 || strings.TrimSpace(body) != want {
		t.Fatalf("leases: %d\n got %s\nwant %s", code, body, want)
	}

	code, body = do(t, h, "GET", "/admin/map/", "", "")
	if code != 200 || !strings.Contains(body, "<html") {
		t.Fatalf("map page: %d %s", code, body)
	}
}

// Behind a reverse proxy the admin API may live under a prefix the node does
// not know, so the page's redirect must be relative.
func TestMapWithoutSlashRedirectsRelatively(t *testing.T) {
	h := admin.New(newFake(), admin.Options{Token: token, Logger: quiet()})
	req := httptest.NewRequest("GET", "/admin/map?type=payment", nil)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusMovedPermanently || rec.Header().Get("Location") != "map/?type=payment" {
		t.Fatalf("got %d Location %q, want 301 to map/?type=payment", rec.Code, rec.Header().Get("Location"))
	}
}

func TestProbes(t *testing.T) {
	f := newFake()
	h := admin.New(f, admin.Options{Token: token, ReadsNeedToken: true, Logger: quiet()})
	// Open even when reads need the token: orchestrators probe without one.
	if code, body := do(t, h, "GET", "/ready", "", ""); code != 200 || strings.TrimSpace(body) != `{"status":"ok"}` {
		t.Fatalf("ready: %d %s", code, body)
	}
	f.mu.Lock()
	f.ready = errors.New("node: not joined")
	f.mu.Unlock()
	code, body := do(t, h, "GET", "/ready", "", "")
	if st := decodeAs[map[string]string](t, body); code != 503 || st["status"] == "ok" || st["error"] != "node: not joined" {
		t.Fatalf("not ready: %d %s", code, body)
	}
	if code, _ := do(t, h, "GET", "/alive", "", ""); code != 200 {
		t.Fatalf("alive: %d", code)
	}
}

func TestActionsNeedTheToken(t *testing.T) {
	f := newFake()
	h := admin.New(f, admin.Options{Token: token, Logger: quiet()})
	actions := []struct{ path, body string }{
		{"/admin/v1/leave", `{"node":"node-b"}`},
		{"/admin/v1/shards/payment/2/rebalance", ``},
		{"/admin/v1/down", `{"node":"node-b","incarnation":1}`},
	}
	for _, a := range actions {
		for _, c := range []struct {
			auth string
			code int
			want admin.Code
		}{
			{"", 401, admin.CodeUnauthorized},
			{"Basic " + token, 401, admin.CodeUnauthorized},
			{"Bearer wrong", 403, admin.CodeForbidden},
		} {
			code, body := do(t, h, "POST", a.path, c.auth, a.body)
			if code != c.code || decodeAs[errBody](t, body).Code != c.want {
				t.Errorf("POST %s with %q: %d %s, want %d %s", a.path, c.auth, code, body, c.code, c.want)
			}
		}
	}
	if len(f.left)+len(f.moved)+len(f.downed) != 0 {
		t.Fatalf("refused actions acted: %v %v %v", f.left, f.moved, f.downed)
	}
	// Without a configured token, actions are off whatever the client sends.
	off := admin.New(f, admin.Options{Logger: quiet()})
	if code, body := do(t, off, "POST", "/admin/v1/leave", "Bearer ", ""); code != 403 {
		t.Fatalf("action with no token configured: %d %s", code, body)
	}
	// Reads are open by default.
	if code, _ := do(t, h, "GET", "/admin/v1/types", "", ""); code != 200 {
		t.Fatalf("open read: %d", code)
	}
}

func TestReadsNeedTheTokenWhenSet(t *testing.T) {
	h := admin.New(newFake(), admin.Options{Token: token, ReadsNeedToken: true, Logger: quiet()})
	for _, path := range []string{"/admin/v1/members", "/admin/v1/types", "/admin/v1/shards/payment", "/admin/v1/leases"} {
		if code, _ := do(t, h, "GET", path, "", ""); code != 401 {
			t.Errorf("GET %s without token: %d, want 401", path, code)
		}
		if code, _ := do(t, h, "GET", path, "Bearer nope", ""); code != 403 {
			t.Errorf("GET %s with a wrong token: %d, want 403", path, code)
		}
		if code, _ := do(t, h, "GET", path, "Bearer "+token, ""); code != 200 {
			t.Errorf("GET %s with the token: %d, want 200", path, code)
		}
	}
}

func TestActionsAct(t *testing.T) {
	f := newFake()
	h := admin.New(f, admin.Options{Token: token, Logger: quiet()})
	auth := "Bearer " + token
	for _, c := range []struct{ path, body string }{
		{"/admin/v1/leave", `{"node":"node-b"}`},
		{"/admin/v1/leave", ``}, // this node
		{"/admin/v1/leave", `{}`},
		{"/admin/v1/shards/payment/2/rebalance", ``},
		{"/admin/v1/down", `{"node":"node-b","incarnation":1}`},
	} {
		if code, body := do(t, h, "POST", c.path, auth, c.body); code != 202 || strings.TrimSpace(body) != `{"status":"accepted"}` {
			t.Fatalf("POST %s %s: %d %s", c.path, c.body, code, body)
		}
	}
	if !slices.Equal(f.left, []string{"node-b", "", ""}) || !slices.Equal(f.moved, []string{"payment/2"}) ||
		!slices.Equal(f.downed, []cluster.UniqueAddress{{Node: "node-b", Incarnation: 1}}) {
		t.Fatalf("acted: left %q, moved %v, downed %v", f.left, f.moved, f.downed)
	}
}

func TestBadInputIsATypedErrorAndChangesNothing(t *testing.T) {
	f := newFake()
	h := admin.New(f, admin.Options{Token: token, Logger: quiet()})
	auth := "Bearer " + token
	for _, c := range []struct {
		method, path, body string
		code               int
		want               admin.Code
	}{
		{"GET", "/admin/v1/shards/nope", "", 404, admin.CodeUnknownType},
		{"GET", "/admin/v1/shards/nope/stream", "", 404, admin.CodeUnknownType},
		{"POST", "/admin/v1/shards/nope/2/rebalance", "", 404, admin.CodeUnknownType},
		{"POST", "/admin/v1/shards/payment/99/rebalance", "", 404, admin.CodeUnknownShard},
		{"POST", "/admin/v1/shards/payment/%01x/rebalance", "", 400, admin.CodeBadRequest},
		{"POST", "/admin/v1/shards/payment/" + strings.Repeat("9", 300) + "/rebalance", "", 400, admin.CodeBadRequest},
		{"POST", "/admin/v1/leave", `{"node":`, 400, admin.CodeBadRequest},
		{"POST", "/admin/v1/leave", `{"nod":"node-b"}`, 400, admin.CodeBadRequest},
		{"POST", "/admin/v1/leave", `{"node":"node-b"} {}`, 400, admin.CodeBadRequest},
		{"POST", "/admin/v1/leave", `{"node":"node-z"}`, 404, admin.CodeUnknownNode},
		{"POST", "/admin/v1/down", ``, 400, admin.CodeBadRequest},
		{"POST", "/admin/v1/down", `{"node":"node-b"}`, 400, admin.CodeBadRequest},
		{"POST", "/admin/v1/down", `{"incarnation":1}`, 400, admin.CodeBadRequest},
		{"POST", "/admin/v1/down", `{"node":"node-b","incarnation":-1}`, 400, admin.CodeBadRequest},
		{"POST", "/admin/v1/down", `[1]`, 400, admin.CodeBadRequest},
	} {
		code, body := do(t, h, c.method, c.path, auth, c.body)
		e := decodeAs[errBody](t, body)
		if code != c.code || e.Code != c.want || e.Error == "" {
			t.Errorf("%s %s %s: %d %s, want %d %s", c.method, c.path, c.body, code, body, c.code, c.want)
		}
	}
	if len(f.left)+len(f.moved)+len(f.downed) != 0 {
		t.Fatalf("bad requests acted: %v %v %v", f.left, f.moved, f.downed)
	}
	if code, _ := do(t, h, "DELETE", "/admin/v1/members", auth, ""); code != 405 {
		t.Fatalf("DELETE members: %d, want 405", code)
	}
}

func TestSourceFailureIsA500WithItsError(t *testing.T) {
	f := newFake()
	f.leaseErr = errors.New("database down")
	h := admin.New(f, admin.Options{Logger: quiet()})
	code, body := do(t, h, "GET", "/admin/v1/leases", "", "")
	if e := decodeAs[errBody](t, body); code != 500 || e.Code != admin.CodeInternal || !strings.Contains(e.Error, "database down") {
		t.Fatalf("leases with the store down: %d %s", code, body)
	}
}

// A client that went away gets no answer written and logs no failure: the
// cancellation is its own, not the node's.
func TestClientGoneIsNotAFailure(t *testing.T) {
	f := newFake()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	f.leaseErr = fmt.Errorf("reading leases: %w", context.Canceled)
	var logged logtest.Buffer
	h := admin.New(f, admin.Options{Logger: slog.New(slog.NewJSONHandler(&logged, nil))})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/admin/v1/leases", nil).WithContext(ctx))
	if rec.Body.Len() != 0 {
		t.Fatalf("answered a gone client: %d %s", rec.Code, rec.Body)
	}
	if recs := logged.Records(t); len(recs) != 0 {
		t.Fatalf("logged %v", recs)
	}
}

// What the node cannot do now (a member to ask is unreachable) is a 503 the
// caller may retry, not a 500.
func TestUnavailableIsA503(t *testing.T) {
	f := newFake()
	f.leaseErr = fmt.Errorf("%w: node-b is unreachable", admin.ErrUnavailable)
	h := admin.New(f, admin.Options{Logger: quiet()})
	code, body := do(t, h, "GET", "/admin/v1/leases", "", "")
	if e := decodeAs[errBody](t, body); code != 503 || e.Code != admin.CodeUnavailable {
		t.Fatalf("got %d %s, want 503 unavailable", code, body)
	}
}

// Error bodies are JSON for people and tools, not HTML: '<' and '>' are
// written as they are, not as \u003c and \u003e.
func TestErrorBodiesDoNotEscapeHTML(t *testing.T) {
	f := newFake()
	f.leaseErr = errors.New("value <nil> out of range")
	h := admin.New(f, admin.Options{Logger: quiet()})
	_, body := do(t, h, "GET", "/admin/v1/leases", "", "")
	if !strings.Contains(body, "value <nil> out of range") {
		t.Fatalf("body %s, want the error text as is", body)
	}
}
