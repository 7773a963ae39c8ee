package shardmap_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/shoal-dev/shoal/node/admin/shardmap"
)

// get sends one request to h and returns the recorded answer.
func get(t *testing.T, h http.Handler, method, target string, header http.Header) *http.Response {
	t.Helper()
	req := httptest.NewRequest(method, target, nil)
	for k, v := range header {
		req.Header[k] = v
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Result()
}

func body(t *testing.T, res *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestHandlerServesThePageAndItsFiles(t *testing.T) {
	h := shardmap.Handler()
	for _, tc := range []struct {
		path, contentType, contains string
	}{
		{"/", "text/html; charset=utf-8", `<main id="map"`},
		{"/index.html", "text/html; charset=utf-8", `<script src="map.js" defer></script>`},
		{"/map.js", "text/javascript; charset=utf-8", `new EventSource(`},
		{"/map.css", "text/css; charset=utf-8", `[data-state="handing-off"]`},
	} {
		t.Run(tc.path, func(t *testing.T) {
			res := get(t, h, http.MethodGet, tc.path, nil)
			b := body(t, res)
			if res.StatusCode != http.StatusOK {
				t.Fatalf("status %d, want 200", res.StatusCode)
			}
			if got := res.Header.Get("Content-Type"); got != tc.contentType {
				t.Errorf("Content-Type %q, want %q", got, tc.contentType)
			}
			if !strings.Contains(b, tc.contains) {
				t.Errorf("body lacks %q", tc.contains)
			}
			if got := res.Header.Get("X-Content-Type-Options"); got != "nosniff" {
				t.Errorf("X-Content-Type-Options %q, want nosniff", got)
			}
			if csp := res.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") ||
				!strings.Contains(csp, "connect-src 'self'") {
				t.Errorf("Content-Security-Policy %q does not keep the page to its own origin", csp)
			}
		})
	}
}

func TestHandlerRootIsThePageNotAListing(t *testing.T) {
	h := shardmap.Handler()
	root := body(t, get(t, h, http.MethodGet, "/", nil))
	index := body(t, get(t, h, http.MethodGet, "/index.html", nil))
	if root != index {
		t.Fatalf("GET / is not index.html:\n%s", root)
	}
}

func TestHandlerUnknownPathsAre404(t *testing.T) {
	h := shardmap.Handler()
	for _, p := range []string{
		"/static/", "/static/index.html", "/static", "/nope.js", "/map.js/", "/../shardmap.go",
		"/index.htm", "//", "/v1/types",
	} {
		res := get(t, h, http.MethodGet, p, nil)
		if b := body(t, res); res.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s: status %d, want 404; body:\n%.200s", p, res.StatusCode, b)
		}
	}
}

func TestHandlerRefusesOtherMethods(t *testing.T) {
	h := shardmap.Handler()
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete} {
		res := get(t, h, m, "/", nil)
		if res.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("%s /: status %d, want 405", m, res.StatusCode)
		}
		if got := res.Header.Get("Allow"); got != "GET, HEAD" {
			t.Errorf("%s /: Allow %q, want %q", m, got, "GET, HEAD")
		}
	}
	res := get(t, h, http.MethodHead, "/map.js", nil)
	if b := body(t, res); res.StatusCode != http.StatusOK || b != "" {
		t.Errorf("HEAD /map.js: status %d body %q, want 200 and no body", res.StatusCode, b)
	}
}

func TestHandlerRevalidatesWithETag(t *testing.T) {
	h := shardmap.Handler()
	first := get(t, h, http.MethodGet, "/map.js", nil)
	etag := first.Header.Get("ETag")
	if etag == "" || first.Header.Get("Cache-Control") != "no-cache" {
		t.Fatalf("ETag %q, Cache-Control %q: want an ETag and no-cache", etag, first.Header.Get("Cache-Control"))
	}
	again := get(t, h, http.MethodGet, "/map.js", http.Header{"If-None-Match": {etag}})
	if again.StatusCode != http.StatusNotModified {
		t.Fatalf("If-None-Match %s: status %d, want 304", etag, again.StatusCode)
	}
	other := get(t, h, http.MethodGet, "/map.css", nil).Header.Get("ETag")
	if other == etag {
		t.Fatalf("map.css and map.js share the ETag %s", etag)
	}
}

// The admin handler mounts the page with StripPrefix("/admin/map"). Asked
// for without the trailing slash, the page must move to the slash, or its
// relative URLs would point one level too high.
func TestHandlerRedirectsThePrefixToItsSlash(t *testing.T) {
	srv := httptest.NewServer(http.StripPrefix("/admin/map", shardmap.Handler()))
	t.Cleanup(srv.Close)
	noFollow := &http.Client{
		Transport:     srv.Client().Transport,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}

	res, err := noFollow.Get(srv.URL + "/admin/map?type=order")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusMovedPermanently || res.Header.Get("Location") != "map/?type=order" {
		t.Fatalf("GET /admin/map: status %d Location %q, want 301 to %q",
			res.StatusCode, res.Header.Get("Location"), "map/?type=order")
	}

	res, err = srv.Client().Get(srv.URL + "/admin/map?type=order") // following the redirect
	if err != nil {
		t.Fatal(err)
	}
	b := body(t, res)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || res.Request.URL.Path != "/admin/map/" || res.Request.URL.RawQuery != "type=order" ||
		!strings.Contains(b, `<main id="map"`) {
		t.Fatalf("after the redirect: status %d at %s, want the page at /admin/map/?type=order", res.StatusCode, res.Request.URL)
	}
}

// The page must load nothing from outside its own origin: no CDN, no font
// service. Every URL in it is relative.
func TestPageHasNoExternalURLs(t *testing.T) {
	h := shardmap.Handler()
	for _, p := range []string{"/", "/map.js", "/map.css"} {
		b := body(t, get(t, h, http.MethodGet, p, nil))
		for _, bad := range []string{"http:", "https:", `src="/`, `href="/`, "url(", "@import", "ws:"} {
			if strings.Contains(b, bad) {
				t.Errorf("%s contains %q", p, bad)
			}
		}
	}
}
