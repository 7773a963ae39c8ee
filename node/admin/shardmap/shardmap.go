// Package shardmap serves the live shard-map page of the admin API: one
// embedded HTML page with its stylesheet and script, no build step and no
// external URLs. The page lists the entity types from ../v1/types and follows
// ../v1/shards/{type}/stream (server-sent events), and shows a panel of
// the projection instances polled from ../v1/projections, so it works under any
// prefix as long as the admin API sits at ../v1/ beside it (the admin handler
// mounts it at /admin/map/ with http.StripPrefix("/admin/map", Handler())).
package shardmap

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"net/http"
	"net/url"
	"path"
	"time"
)

//go:embed static
var static embed.FS

// contentSecurityPolicy lets the page load and connect to its own origin
// only: the browser itself refuses any external URL.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; " +
	"connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// file is one embedded file ready to serve.
type file struct {
	name        string
	contentType string
	etag        string
	body        []byte
}

// handler serves a fixed set of files by exact path; anything else is 404, so
// there is no directory listing and no path to walk out of.
type handler struct {
	files map[string]file
}

// Handler returns the handler of the page. It serves "/" (the page), and
// "/map.css" and "/map.js" beside it; a request for the empty path (the prefix
// without its trailing slash, after http.StripPrefix) is redirected to the
// path with the slash, so that the page's relative URLs resolve.
func Handler() http.Handler {
	page := load("index.html", "text/html; charset=utf-8")
	return handler{files: map[string]file{
		"/":           page,
		"/index.html": page,
		"/map.css":    load("map.css", "text/css; charset=utf-8"),
		"/map.js":     load("map.js", "text/javascript; charset=utf-8"),
		// The projections panel (../v1/projections), in a file of its own.
		"/projections.js": load("projections.js", "text/javascript; charset=utf-8"),
	}}
}

func load(name, contentType string) file {
	body, err := static.ReadFile("static/" + name)
	if err != nil {
		// The files are embedded at build time: a missing one is a build bug.
		panic("shardmap: embedded file missing: " + name)
	}
	sum := sha256.Sum256(body)
	return file{
		name:        name,
		contentType: contentType,
		etag:        `"` + hex.EncodeToString(sum[:8]) + `"`,
		body:        body,
	}
}

func (h handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "" {
		redirectToSlash(w, r)
		return
	}
	f, ok := h.files[r.URL.Path]
	if !ok {
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	hdr := w.Header()
	hdr.Set("Content-Type", f.contentType)
	hdr.Set("Cache-Control", "no-cache")
	hdr.Set("ETag", f.etag)
	hdr.Set("Content-Security-Policy", contentSecurityPolicy)
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("Referrer-Policy", "no-referrer")
	http.ServeContent(w, r, f.name, time.Time{}, bytes.NewReader(f.body))
}

// redirectToSlash answers a request for the mount point without its trailing
// slash ("/admin/map" after StripPrefix("/admin/map")). The prefix is unknown
// here, so the target is relative: the last segment of the original path plus
// a slash. http.Redirect would resolve it against the stripped path instead.
func redirectToSlash(w http.ResponseWriter, r *http.Request) {
	target := "./"
	if u, err := url.ParseRequestURI(r.RequestURI); err == nil {
		if last := path.Base(u.Path); last != "/" && last != "." {
			target = url.PathEscape(last) + "/"
		}
	}
	if r.URL.RawQuery != "" {
		target += "?" + r.URL.RawQuery
	}
	w.Header().Set("Location", target)
	w.WriteHeader(http.StatusMovedPermanently)
}
