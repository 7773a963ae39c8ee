package admin_test

import (
	"bufio"
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shoal-dev/shoal/internal/logtest"
	"github.com/shoal-dev/shoal/node/admin"
)

// A route that does not exist answers the documented JSON error, not
// net/http's text; a route of another method is a JSON 405 with Allow.
func TestUnknownRouteIsTheJSONError(t *testing.T) {
	h := admin.New(newFake(), admin.Options{Token: token, Logger: quiet()})
	code, body := do(t, h, "GET", "/admin/v1/nope", "", "")
	if e := decodeAs[errBody](t, body); code != 404 || e.Code != admin.CodeNotFound || e.Error == "" {
		t.Fatalf("unknown route: %d %s", code, body)
	}
	req := httptest.NewRequest("GET", "/admin/v1/leave", nil)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if e := decodeAs[errBody](t, rec.Body.String()); rec.Code != 405 || e.Code != admin.CodeMethodNotAllowed || rec.Header().Get("Allow") != "POST" {
		t.Fatalf("GET of an action: %d %s, Allow %q", rec.Code, rec.Body.String(), rec.Header().Get("Allow"))
	}
}

// Refused requests (401, 403) and every action are logged with the
// client's address.
func TestRefusalsAndActionsAreLoggedWithTheClient(t *testing.T) {
	var logged logtest.Buffer
	h := admin.New(newFake(), admin.Options{Token: token, Logger: slogJSON(&logged)})
	auth := "Bearer " + token
	calls := []struct{ method, path, auth, body, msg string }{
		{"POST", "/admin/v1/leave", "", "", "admin: request refused"},
		{"POST", "/admin/v1/leave", "Bearer wrong", "", "admin: request refused"},
		{"POST", "/admin/v1/leave", auth, `{"node":"node-b"}`, "admin: leave requested"},
		{"POST", "/admin/v1/shards/payment/2/rebalance", auth, "", "admin: rebalance requested"},
		{"POST", "/admin/v1/down", auth, `{"node":"node-b","incarnation":1}`, "admin: incarnation downed"},
	}
	for _, c := range calls {
		do(t, h, c.method, c.path, c.auth, c.body)
	}
	records := logged.Records(t)
	if len(records) != len(calls) {
		t.Fatalf("%d records for %d calls: %v", len(records), len(calls), records)
	}
	for i, c := range calls {
		r := records[i]
		if r["msg"] != c.msg || r["client"] != "192.0.2.1:1234" { // httptest.NewRequest's client
			t.Errorf("call %d (%s %s): logged %v, want %q with the client", i, c.method, c.path, r, c.msg)
		}
	}
	if records[0]["status"] != float64(401) || records[1]["status"] != float64(403) {
		t.Errorf("refusals logged as %v, %v", records[0]["status"], records[1]["status"])
	}
}

// However many streams of a type are open, the map is read once per poll,
// not once per stream.
func TestStreamsShareOnePoller(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake()
		h := admin.New(f, admin.Options{Logger: quiet(), PollEvery: 500 * time.Millisecond, PingEvery: time.Hour})
		ctx, cancel := context.WithCancel(context.Background())
		const streams = 5
		recs := make([]*streamRecorder, streams)
		done := make(chan struct{}, streams)
		for i := range recs {
			recs[i] = newStreamRecorder()
			req := httptest.NewRequest("GET", "/admin/v1/shards/payment/stream", nil).WithContext(ctx)
			go func() {
				h.ServeHTTP(recs[i], req)
				done <- struct{}{}
			}()
			<-recs[i].chunks // the first map
		}
		f.mu.Lock()
		before := f.reads
		f.mu.Unlock()
		time.Sleep(10 * 500 * time.Millisecond)
		synctest.Wait()
		f.mu.Lock()
		polled := f.reads - before
		f.mu.Unlock()
		if polled < 9 || polled > 10 {
			t.Fatalf("%d streams read the map %d times in 10 polls, want one read per poll", streams, polled)
		}

		// A change reaches every stream.
		f.setShards(func(s *admin.Shards) { s.Shards[0].Node = "node-b#1" })
		time.Sleep(500 * time.Millisecond)
		synctest.Wait()
		for i, rec := range recs {
			select {
			case c := <-rec.chunks:
				if !strings.Contains(c, `"id":"2","node":"node-b#1"`) {
					t.Fatalf("stream %d got %q", i, c)
				}
			default:
				t.Fatalf("stream %d missed the change", i)
			}
		}
		cancel()
		for range streams {
			<-done
		}
		// With no stream left, nothing polls.
		f.mu.Lock()
		before = f.reads
		f.mu.Unlock()
		time.Sleep(5 * time.Second)
		synctest.Wait()
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.reads != before {
			t.Fatalf("%d reads with no stream open", f.reads-before)
		}
	})
}

// Beyond MaxStreams a stream is refused with a typed 503; once one closes,
// a new one is served.
func TestStreamsAreCapped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := admin.New(newFake(), admin.Options{Logger: quiet(), MaxStreams: 2, PingEvery: time.Hour})
		open := func(ctx context.Context) (*streamRecorder, chan struct{}) {
			rec := newStreamRecorder()
			req := httptest.NewRequest("GET", "/admin/v1/shards/payment/stream", nil).WithContext(ctx)
			done := make(chan struct{})
			go func() {
				h.ServeHTTP(rec, req)
				close(done)
			}()
			return rec, done
		}
		ctx1, cancel1 := context.WithCancel(context.Background())
		ctx2, cancel2 := context.WithCancel(context.Background())
		defer cancel2()
		r1, done1 := open(ctx1)
		<-r1.chunks
		r2, _ := open(ctx2)
		<-r2.chunks

		code, body := do(t, h, "GET", "/admin/v1/shards/payment/stream", "", "")
		if e := decodeAs[errBody](t, body); code != 503 || e.Code != admin.CodeTooManyStreams {
			t.Fatalf("third stream: %d %s", code, body)
		}
		cancel1()
		<-done1
		ctx3, cancel3 := context.WithCancel(context.Background())
		r3, done3 := open(ctx3)
		<-r3.chunks
		if r3.code != 200 {
			t.Fatalf("stream after one closed: %d", r3.code)
		}
		cancel3()
		<-done3
	})
}

// NewServer bounds every phase of a request, yet a shard stream outlives
// its WriteTimeout: each write gets the timeout afresh.
func TestServerTimeoutsAndAStreamOutlivesTheWriteTimeout(t *testing.T) {
	const writeTimeout = 300 * time.Millisecond
	srv := admin.NewServer(newFake(), admin.Options{Logger: quiet(), WriteTimeout: writeTimeout, PingEvery: 50 * time.Millisecond})
	if srv.ReadHeaderTimeout <= 0 || srv.ReadTimeout <= 0 || srv.IdleTimeout <= 0 || srv.WriteTimeout != writeTimeout {
		t.Fatalf("timeouts: header %v read %v write %v idle %v", srv.ReadHeaderTimeout, srv.ReadTimeout, srv.WriteTimeout, srv.IdleTimeout)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	resp, err := http.Get("http://" + ln.Addr().String() + "/admin/v1/shards/payment/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	lines := bufio.NewScanner(resp.Body)
	start := time.Now()
	pings := 0
	// Read past several write timeouts: the stream must still be open.
	for time.Since(start) < 5*writeTimeout {
		if !lines.Scan() {
			t.Fatalf("stream cut after %v (%d pings): %v", time.Since(start), pings, lines.Err())
		}
		if lines.Text() == ": ping" {
			pings++
		}
	}
}

// With -admin-reads-need-token a browser logs in once: the session cookie
// (HttpOnly, SameSite=Strict) opens the reads, the stream included, and
// never the actions; a wrong or forged cookie opens nothing.
func TestSessionCookieOpensTheReadsOnly(t *testing.T) {
	f := newFake()
	h := admin.New(f, admin.Options{Token: token, ReadsNeedToken: true, Logger: quiet()})
	if code, _ := do(t, h, "POST", "/admin/v1/session", "", `{"token":"wrong"}`); code != 403 {
		t.Fatalf("login with a wrong token: %d", code)
	}
	if code, _ := do(t, h, "POST", "/admin/v1/session", "", `{}`); code != 400 {
		t.Fatalf("login without a token: %d", code)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("POST", "/admin/v1/session", strings.NewReader(`{"token":"`+token+`"}`)))
	cookies := rec.Result().Cookies()
	if rec.Code != 204 || len(cookies) != 1 {
		t.Fatalf("login: %d, cookies %v", rec.Code, cookies)
	}
	c := cookies[0]
	if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "" || strings.Contains(c.Value, token) {
		t.Fatalf("session cookie %+v", c)
	}
	withCookie := func(method, path string, c *http.Cookie) int {
		req := httptest.NewRequest(method, path, nil)
		if c != nil {
			req.AddCookie(c)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	for _, path := range []string{"/admin/v1/types", "/admin/v1/members", "/admin/v1/shards/payment", "/admin/v1/leases"} {
		if code := withCookie("GET", path, c); code != 200 {
			t.Errorf("GET %s with the session: %d", path, code)
		}
	}
	if code := withCookie("POST", "/admin/v1/shards/payment/2/rebalance", c); code != 401 {
		t.Errorf("an action with only the session cookie: %d, want 401", code)
	}
	f.mu.Lock()
	moved := len(f.moved)
	f.mu.Unlock()
	if moved != 0 {
		t.Fatal("the cookie moved a shard")
	}
	forged := *c
	forged.Value = c.Value[:len(c.Value)-2] + "xx"
	expired := *c
	expired.Value = "1." + strings.SplitN(c.Value, ".", 2)[1]
	for name, bad := range map[string]*http.Cookie{"forged": &forged, "re-dated": &expired} {
		if code := withCookie("GET", "/admin/v1/types", bad); code != 401 {
			t.Errorf("GET with a %s cookie: %d, want 401", name, code)
		}
	}
	// The stream, which a browser opens without a header.
	ctx, cancel := context.WithCancel(context.Background())
	req := httptest.NewRequest("GET", "/admin/v1/shards/payment/stream", nil).WithContext(ctx)
	req.AddCookie(c)
	srec := newStreamRecorder()
	done := make(chan struct{})
	go func() {
		h.ServeHTTP(srec, req)
		close(done)
	}()
	if first := <-srec.chunks; !strings.HasPrefix(first, "event: shards") {
		t.Fatalf("stream with the session: %q", first)
	}
	cancel()
	<-done
	// The page itself is open: it is how a browser gets to log in.
	if code := withCookie("GET", "/admin/map/", nil); code != 200 {
		t.Fatalf("the page without a session: %d", code)
	}
}

func slogJSON(b *logtest.Buffer) *slog.Logger { return slog.New(slog.NewJSONHandler(b, nil)) }
