package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeAPI keeps each order's state as the payment entity would, for the
// four requests of the mix; forget loses an order, as a broken server would.
type fakeAPI struct {
	mu     sync.Mutex
	orders map[string]string
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	parts := strings.Split(r.URL.Path, "/") // "", 00, ec, settlements, shop, order, endpoint
	if r.Method != http.MethodPut || len(parts) != 7 || r.Header.Get("Authorization") != "Bearer t" {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	order, endpoint := parts[5], parts[6]
	f.mu.Lock()
	defer f.mu.Unlock()
	state := f.orders[order]
	switch {
	case endpoint == "payment" && state == "":
		f.orders[order] = "settled"
	case endpoint == "payment" && state == "settled", endpoint == "cancel" && state == "canceled":
	case endpoint == "cancel" && state == "settled":
		f.orders[order] = "canceled"
	case endpoint == "cancel":
		w.WriteHeader(http.StatusNotFound)
		return
	default:
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	_, _ = w.Write([]byte(`{}`))
}

func (f *fakeAPI) forget(state string) (order string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for o, s := range f.orders {
		if s == state {
			delete(f.orders, o)
			return o
		}
	}
	return ""
}

func TestLoadThenVerify(t *testing.T) {
	api := &fakeAPI{orders: map[string]string{}}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	record := filepath.Join(t.TempDir(), "acks.jsonl")
	var out bytes.Buffer
	// Short runs, appending to the record, until a cycle has completed (a
	// busy machine may finish none in one run).
	for !strings.Contains(out.String(), "status cancel-again 200") {
		out.Reset()
		err := run(context.Background(), []string{"-url", srv.URL, "-c", "4", "-d", "200ms", "-record", record}, &out)
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []string{"req/s", "settle ", "settle-again", "cancel ", "cancel-again", "p99", "status cancel 200"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("report lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if err := run(context.Background(), []string{"-url", srv.URL, "-verify", "-record", record}, &out); err != nil {
		t.Fatalf("verify: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), " 0 lost") {
		t.Fatalf("verify report:\n%s", out.String())
	}

	lost := api.forget("canceled")
	out.Reset()
	if err := run(context.Background(), []string{"-url", srv.URL, "-verify", "-record", record}, &out); err == nil || !strings.Contains(out.String(), lost) {
		t.Fatalf("verify missed the lost order %s: %v\n%s", lost, err, out.String())
	}
}

func TestPercentile(t *testing.T) {
	var l []time.Duration
	for i := 1; i <= 100; i++ {
		l = append(l, time.Duration(i)*time.Millisecond)
	}
	if p50, p99 := percentile(l, 50), percentile(l, 99); p50 != 50*time.Millisecond || p99 != 99*time.Millisecond {
		t.Fatalf("p50 %v p99 %v", p50, p99)
	}
	if p := percentile(l[:1], 99); p != time.Millisecond {
		t.Fatalf("one sample: %v", p)
	}
}

func TestCPUTimeOfThisProcess(t *testing.T) {
	before, err := cpuTime(os.Getpid())
	if err != nil {
		t.Skip("no /proc:", err)
	}
	for after := before; after == before; after, _ = cpuTime(os.Getpid()) {
		_ = sha256.Sum256(make([]byte, 1<<20)) // burn CPU until the counter moves
	}
	if rss := residentMemory(os.Getpid()); !strings.HasSuffix(rss, "kB") {
		t.Fatalf("resident memory %q", rss)
	}
	if none, err := cpuTime(0); none != 0 || err != nil {
		t.Fatalf("without a pid: %v, %v", none, err)
	}
}

// With several URLs (the nodes of a cluster), each order's requests go to
// them in turn, so an order settled through one node is settled again and
// canceled through the others, and the report counts statuses per node.
func TestSeveralURLs(t *testing.T) {
	api := &fakeAPI{orders: map[string]string{}}
	var mu sync.Mutex
	via := map[string]map[string]bool{} // order → servers that got its requests
	serve := func(name string) *httptest.Server {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			parts := strings.Split(r.URL.Path, "/")
			if len(parts) == 7 {
				mu.Lock()
				if via[parts[5]] == nil {
					via[parts[5]] = map[string]bool{}
				}
				via[parts[5]][name] = true
				mu.Unlock()
			}
			api.ServeHTTP(w, r)
		}))
		t.Cleanup(srv.Close)
		return srv
	}
	a, b := serve("a"), serve("b")
	var out bytes.Buffer
	for !strings.Contains(out.String(), "status cancel-again 200") {
		out.Reset()
		if err := run(context.Background(), []string{"-url", a.URL + "," + b.URL + "/", "-c", "2", "-d", "200ms"}, &out); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []string{"via " + a.URL + " 200", "via " + b.URL + " 200"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("report lacks %q:\n%s", want, out.String())
		}
	}
	// A request the load generator gave up on at its deadline may still
	// be running in a server: read under both locks.
	mu.Lock()
	defer mu.Unlock()
	api.mu.Lock()
	defer api.mu.Unlock()
	for order, servers := range via {
		if api.orders[order] == "canceled" && len(servers) != 2 {
			t.Fatalf("order %s went through %v only, want both", order, servers)
		}
	}
	if err := run(context.Background(), []string{"-url", " , "}, &out); err == nil {
		t.Fatal("-url without a URL accepted")
	}
}

// Requests that get no response (the server cuts the connection, as a node
// that stops too early does) are counted and reported, not dropped.
func TestConnectionErrorsAreReported(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	t.Cleanup(srv.Close)
	var out bytes.Buffer
	if err := run(context.Background(), []string{"-url", srv.URL, "-c", "2", "-d", "200ms"}, &out); err != nil {
		t.Fatal(err)
	}
	report := out.String()
	if !strings.Contains(report, "status settle error ") || strings.Contains(report, "connection errors 0") ||
		!strings.Contains(report, "connection errors ") {
		t.Fatalf("report hides the failed requests:\n%s", report)
	}

	// A server that answers every request has none.
	ok := httptest.NewServer(&fakeAPI{orders: map[string]string{}})
	t.Cleanup(ok.Close)
	out.Reset()
	if err := run(context.Background(), []string{"-url", ok.URL, "-c", "2", "-d", "100ms"}, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "connection errors 0\n") {
		t.Fatalf("report of a healthy run:\n%s", out.String())
	}
}
