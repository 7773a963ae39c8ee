package admin

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/node/admin/shardmap"
)

// maxBody bounds an action's request body.
const maxBody = 64 << 10

// maxShardID bounds a shard id in a path.
const maxShardID = 256

type handler struct {
	src     Source
	opts    Options
	log     *slog.Logger
	mux     *http.ServeMux
	streams chan struct{} // one token per open shard stream
	feeds   *feeds
}

// New returns the admin API over src; see the package doc for its routes.
func New(src Source, opts Options) http.Handler {
	return newHandler(src, opts)
}

func newHandler(src Source, opts Options) *handler {
	opts = opts.withDefaults()
	h := &handler{src: src, opts: opts, log: opts.Logger, mux: http.NewServeMux(), streams: make(chan struct{}, opts.MaxStreams)}
	h.feeds = newFeeds(h)
	mux := h.mux
	mux.HandleFunc("GET /ready", h.probe(src.Ready))
	mux.HandleFunc("GET /alive", h.probe(src.Alive))
	mux.Handle("GET /admin/v1/members", h.read(h.members))
	mux.Handle("GET /admin/v1/types", h.read(h.types))
	mux.Handle("GET /admin/v1/shards/{type}", h.read(h.shards))
	mux.Handle("GET /admin/v1/shards/{type}/stream", h.read(h.stream))
	mux.Handle("GET /admin/v1/leases", h.read(h.leases))
	mux.HandleFunc("POST /admin/v1/session", h.login)
	mux.HandleFunc("DELETE /admin/v1/session", h.logout)
	mux.Handle("POST /admin/v1/leave", h.action(h.leave))
	mux.Handle("POST /admin/v1/shards/{type}/{shard}/rebalance", h.action(h.rebalance))
	mux.Handle("POST /admin/v1/down", h.action(h.down))
	h.projectionRoutes(mux) // projections.go
	h.reminderRoutes(mux)   // reminders.go
	// The page is static and holds no data: open, so that a browser can
	// load it and log in when reads need the token. Without its slash it
	// redirects relatively, so it works behind a proxy's prefix too.
	shardMap := http.StripPrefix("/admin/map", shardmap.Handler())
	mux.Handle("GET /admin/map/", shardMap)
	mux.Handle("GET /admin/map", shardMap)
	mux.HandleFunc("/", h.noRoute)
	return h
}

// ServeHTTP routes r.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// noRoute answers what no route serves with the documented JSON 404
// (405 when the path has a route for another method), not net/http's text.
func (h *handler) noRoute(w http.ResponseWriter, r *http.Request) {
	var allowed []string
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodDelete} {
		if m == r.Method {
			continue
		}
		other := r.Clone(r.Context())
		other.Method = m
		if _, pattern := h.mux.Handler(other); pattern != "" && pattern != "/" {
			allowed = append(allowed, m)
		}
	}
	if len(allowed) > 0 {
		w.Header().Set("Allow", strings.Join(allowed, ", "))
		writeError(w, http.StatusMethodNotAllowed, CodeMethodNotAllowed, fmt.Errorf("admin: %s %s: method not allowed", r.Method, r.URL.Path))
		return
	}
	writeError(w, http.StatusNotFound, CodeNotFound, fmt.Errorf("admin: %s %s: no such route", r.Method, r.URL.Path))
}

// NewServer is the admin API over src in an http.Server with a timeout on
// every phase: a client that trickles its headers or body, or never reads
// the response, holds a connection only so long. The shard streams extend
// their write deadline before each write (http.ResponseController), so
// they outlive Options.WriteTimeout; an idle keep-alive connection closes
// after a minute.
func NewServer(src Source, opts Options) *http.Server {
	h := newHandler(src, opts)
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second, // bodies are at most 64 KiB
		WriteTimeout:      h.opts.WriteTimeout,
		IdleTimeout:       time.Minute,
		ErrorLog:          slog.NewLogLogger(h.log.Handler(), slog.LevelDebug),
	}
}

// errorBody is every error response.
type errorBody struct {
	Error string `json:"error"`
	Code  Code   `json:"code"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // JSON, not HTML: an error's "<nil>" stays readable
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, status int, code Code, err error) {
	writeJSON(w, status, errorBody{Error: err.Error(), Code: code})
}

// fail answers err with the status its kind calls for.
func (h *handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() != nil && errors.Is(err, r.Context().Err()) {
		return // the client went away: nobody reads an answer, and nothing failed here
	}
	status, code := http.StatusInternalServerError, CodeInternal
	switch {
	case errors.Is(err, ErrBadRequest):
		status, code = http.StatusBadRequest, CodeBadRequest
	case errors.Is(err, ErrUnknownType):
		status, code = http.StatusNotFound, CodeUnknownType
	case errors.Is(err, ErrUnknownShard):
		status, code = http.StatusNotFound, CodeUnknownShard
	case errors.Is(err, ErrUnknownNode):
		status, code = http.StatusNotFound, CodeUnknownNode
	case errors.Is(err, ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
		status, code = http.StatusServiceUnavailable, CodeUnavailable
	}
	if status >= 500 {
		h.log.Warn("admin: request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	writeError(w, status, code, err)
}

// authorize checks the bearer token; it has answered, and logged the
// refusal with the client's address, when it returns false. With
// cookieOK (reads) a valid session cookie stands in for the header.
func (h *handler) authorize(w http.ResponseWriter, r *http.Request, cookieOK bool) bool {
	auth := r.Header.Get("Authorization")
	token, ok := strings.CutPrefix(auth, "Bearer ")
	if auth == "" && cookieOK && h.opts.Token != "" {
		if c, err := r.Cookie(sessionCookie); err == nil && validSession(h.opts.Token, c.Value, time.Now()) {
			return true
		}
	}
	var status int
	var code Code
	var err error
	switch {
	case auth == "" || !ok:
		w.Header().Set("WWW-Authenticate", `Bearer realm="shoal"`)
		status, code, err = http.StatusUnauthorized, CodeUnauthorized, errors.New("admin: a bearer token is required")
	case h.opts.Token == "":
		status, code, err = http.StatusForbidden, CodeForbidden, errors.New("admin: no token is configured on this node: actions are off")
	case subtle.ConstantTimeCompare([]byte(token), []byte(h.opts.Token)) != 1:
		status, code, err = http.StatusForbidden, CodeForbidden, errors.New("admin: wrong token")
	default:
		return true
	}
	h.log.Warn("admin: request refused", "client", r.RemoteAddr, "method", r.Method, "path", r.URL.Path, "status", status, "code", code)
	writeError(w, status, code, err)
	return false
}

func (h *handler) read(fn http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h.opts.ReadsNeedToken && !h.authorize(w, r, true) {
			return
		}
		fn(w, r)
	})
}

func (h *handler) action(fn http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !h.authorize(w, r, false) {
			return
		}
		fn(w, r)
	})
}

type status struct {
	Status string `json:"status"`
	Error  string `json:"error,omitempty"`
}

func (h *handler) probe(check func() error) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		if err := check(); err != nil {
			writeJSON(w, http.StatusServiceUnavailable, status{Status: "unavailable", Error: err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, status{Status: "ok"})
	}
}

func (h *handler) members(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, h.src.Members())
}

func (h *handler) types(w http.ResponseWriter, _ *http.Request) {
	types := h.src.Types()
	if types == nil {
		types = []string{}
	}
	writeJSON(w, http.StatusOK, struct {
		Types []string `json:"types"`
	}{types})
}

func (h *handler) readShards(ctx context.Context, typeName string) (Shards, error) {
	ctx, cancel := context.WithTimeout(ctx, h.opts.ReadTimeout)
	defer cancel()
	return h.src.Shards(ctx, typeName)
}

func (h *handler) shards(w http.ResponseWriter, r *http.Request) {
	st, err := h.readShards(r.Context(), r.PathValue("type"))
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

func (h *handler) leases(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), h.opts.ReadTimeout)
	defer cancel()
	l, err := h.src.Leases(ctx)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, l)
}

// decode reads a JSON body into v: an empty body leaves v as it is
// (allowEmpty), unknown fields and trailing data are refused.
func decode(r *http.Request, w http.ResponseWriter, v any, allowEmpty bool) error {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		return fmt.Errorf("%w: body: %w", ErrBadRequest, err)
	}
	if len(strings.TrimSpace(string(body))) == 0 {
		if allowEmpty {
			return nil
		}
		return fmt.Errorf("%w: empty body", ErrBadRequest)
	}
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: body: %w", ErrBadRequest, err)
	}
	if dec.More() {
		return fmt.Errorf("%w: body: data after the JSON value", ErrBadRequest)
	}
	return nil
}

func accepted(w http.ResponseWriter) {
	writeJSON(w, http.StatusAccepted, status{Status: "accepted"})
}

func (h *handler) leave(w http.ResponseWriter, r *http.Request) {
	var req LeaveRequest
	if err := decode(r, w, &req, true); err != nil {
		h.fail(w, r, err)
		return
	}
	if err := h.src.Leave(r.Context(), req.Node); err != nil {
		h.fail(w, r, err)
		return
	}
	h.log.Info("admin: leave requested", "client", r.RemoteAddr, "target", req.Node)
	accepted(w)
}

// validShardID refuses what no shard id function produces: empty, over
// maxShardID bytes, not UTF-8, or with control characters.
func validShardID(id string) error {
	if id == "" || len(id) > maxShardID || !utf8.ValidString(id) || strings.ContainsFunc(id, unicode.IsControl) {
		return fmt.Errorf("%w: shard id %q: want 1 to %d printable UTF-8 bytes", ErrBadRequest, id, maxShardID)
	}
	return nil
}

func (h *handler) rebalance(w http.ResponseWriter, r *http.Request) {
	typeName, shard := r.PathValue("type"), r.PathValue("shard")
	if err := validShardID(shard); err != nil {
		h.fail(w, r, err)
		return
	}
	if err := h.src.Rebalance(r.Context(), typeName, shard); err != nil {
		h.fail(w, r, err)
		return
	}
	h.log.Info("admin: rebalance requested", "client", r.RemoteAddr, "entity_type", typeName, "shard_id", shard)
	accepted(w)
}

func (h *handler) down(w http.ResponseWriter, r *http.Request) {
	var req DownRequest
	if err := decode(r, w, &req, false); err != nil {
		h.fail(w, r, err)
		return
	}
	if req.Node == "" || req.Incarnation == nil {
		h.fail(w, r, fmt.Errorf("%w: down needs node and incarnation", ErrBadRequest))
		return
	}
	addr := cluster.UniqueAddress{Node: req.Node, Incarnation: *req.Incarnation}
	if err := h.src.Down(r.Context(), addr); err != nil {
		h.fail(w, r, err)
		return
	}
	h.log.Info("admin: incarnation downed", "client", r.RemoteAddr, "target", addr.String())
	accepted(w)
}
