package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/sharding"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Principal is who a bearer token stands for.
type Principal struct {
	CustomerID string
	ClientID   int64
}

// Authorizer resolves a bearer token (OAuth2 in the original).
type Authorizer interface {
	Authorize(ctx context.Context, token string) (Principal, error)
}

// StubAuthorizer accepts every token as customer "dummy" of client 0, as
// the original sample did.
type StubAuthorizer struct{}

// Authorize implements Authorizer.
func (StubAuthorizer) Authorize(context.Context, string) (Principal, error) {
	return Principal{CustomerID: "dummy", ClientID: 0}, nil
}

// API is the client-facing HTTP API:
//
//	PUT /00/ec/settlements/{walletShopId}/{orderId}/payment   {"amount": 1000}
//	PUT /00/ec/settlements/{walletShopId}/{orderId}/cancel
//	GET /00/ec/settlements/{walletShopId}   the shop's settlements and totals (read model)
//
// with headers X-Tenant-Id (example or tenant-a) and Authorization: Bearer,
// and the probes of a load balancer or orchestrator:
//
//	/ready   200 {"status":"up"} when the node serves, else 503 with the reason
//	/alive   200 {"status":"up"} unless the node must be restarted (503)
type API struct {
	Payments *sharding.Region[Command]
	Auth     Authorizer
	// AskTimeout bounds the wait for the entity's answer; past it the
	// client gets 500 CODE-012. Default 15s.
	AskTimeout time.Duration
	Log        *slog.Logger
	// Ready and Alive answer the probes: nil is up. A nil func is always
	// up (a node of its own serves while it listens).
	Ready, Alive func() error
	// Members, when set, lists the cluster's members in /ready's answer,
	// as this node sees them.
	Members func() []string
	// Counters, when set, serves the counter endpoints (counter.go).
	Counters *sharding.Region[CounterCommand]
	// ReadModel answers the shop endpoint (settlements.go); nil answers 503.
	ReadModel ReadModel
	// Tracer makes each payment request's server span, which continues the
	// caller's trace (its traceparent header): the span's trace id is the
	// request's trace_id in logs and events, and the ask carries the span
	// to the entity, wherever it runs. Default: otel's no-op tracer, with
	// which a request without traceparent gets a random trace_id.
	Tracer trace.Tracer
}

// MaxHeaderBytes bounds a request's header fields (names and values); a
// request with more is answered 431 with the JSON body. The server's own,
// larger limit (http.Server.MaxHeaderBytes) answers in plain text.
const MaxHeaderBytes = 16 << 10

// Handler routes the API's endpoints. Every answer, routing errors
// included, has the {code, message} body: an unknown path is 404 CODE-002,
// a wrong method 405 CODE-003, headers over MaxHeaderBytes 431 CODE-003,
// and a path that is not clean (`..`, `//`) is 404, not redirected.
func (a *API) Handler() http.Handler {
	mux := http.NewServeMux()
	const payment, cancel = "/00/ec/settlements/{walletShopId}/{orderId}/payment", "/00/ec/settlements/{walletShopId}/{orderId}/cancel"
	mux.HandleFunc("PUT "+payment, a.settle)
	mux.HandleFunc("PUT "+cancel, a.cancel)
	mux.HandleFunc(payment, methodNotAllowed)
	mux.HandleFunc(cancel, methodNotAllowed)
	const shop = "/00/ec/settlements/{walletShopId}"
	mux.HandleFunc("GET "+shop, a.shop)
	mux.HandleFunc(shop, allowOnly(http.MethodGet))
	mux.HandleFunc("/ready", probe(a.Ready, a.Members))
	mux.HandleFunc("/alive", probe(a.Alive, nil))
	if a.Counters != nil {
		timeout := a.AskTimeout
		if timeout <= 0 {
			timeout = DefaultSettings().AskTimeout
		}
		counterAPI{counters: a.Counters, askTimeout: timeout}.register(mux)
	}
	mux.HandleFunc("/", notFound)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if headerBytes(r.Header) > MaxHeaderBytes {
			writeJSON(w, http.StatusRequestHeaderFieldsTooLarge, errorBody{Code: string(CodeValidation), Message: "request header fields too large"})
			return
		}
		// ServeMux would redirect an unclean path to its clean form.
		if p := r.URL.Path; p == "" || p[0] != '/' || path.Clean(p) != p {
			notFound(w, r)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// probeBody is the answer of /ready and /alive.
type probeBody struct {
	Status  string   `json:"status"`
	Reason  string   `json:"reason,omitempty"`
	Members []string `json:"members,omitempty"`
}

func probe(check func() error, members func() []string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		body, status := probeBody{Status: "up"}, http.StatusOK
		if check != nil {
			if err := check(); err != nil {
				body, status = probeBody{Status: "down", Reason: err.Error()}, http.StatusServiceUnavailable
			}
		}
		if members != nil {
			body.Members = members()
		}
		writeJSON(w, status, body)
	}
}

func notFound(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusNotFound, errorBody{Code: string(CodeNotFound), Message: "no such endpoint"})
}

var methodNotAllowed = allowOnly(http.MethodPut)

// allowOnly answers 405 naming the one method allowed.
func allowOnly(method string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Allow", method)
		writeJSON(w, http.StatusMethodNotAllowed, errorBody{Code: string(CodeValidation), Message: "method not allowed; use " + method})
	}
}

func headerBytes(h http.Header) int {
	n := 0
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(v) + 4 // ": " and CRLF
		}
	}
	return n
}

// statusOf maps an error code to its HTTP status (AppExceptionHandler).
var statusOf = map[Code]int{
	CodeForbidden:                 http.StatusForbidden,
	CodeNotFound:                  http.StatusNotFound,
	CodeValidation:                http.StatusBadRequest,
	CodeTimeOut:                   http.StatusGatewayTimeout,
	CodeIssuingServiceBadRequest:  http.StatusInternalServerError,
	CodeIssuingServiceUnavailable: http.StatusServiceUnavailable,
	CodeIssuingServiceServerError: http.StatusInternalServerError,
	CodeIssuingServiceTimeout:     http.StatusInternalServerError,
	CodeAlreadyCanceled:           http.StatusBadRequest,
	CodeUnpredictable:             http.StatusInternalServerError,
}

// request is what every endpoint validates first.
type request struct {
	key       OrderKey
	principal Principal
	traceID   string
}

func (a *API) settle(w http.ResponseWriter, r *http.Request) {
	r, span := a.startSpan(r, "PUT payment")
	defer span.End()
	req, ok := a.validate(w, r)
	if !ok {
		return
	}
	amount, err := decodeAmount(r.Body)
	if err != nil {
		writeFailure(w, ValidationFailure(err.Error()))
		return
	}
	if amount <= 0 || amount > 9_999_999_999 {
		writeFailure(w, ValidationFailure("amount must be between 1 and 9999999999"))
		return
	}
	a.ask(w, r, req, func(to entity.ReplyTo[Response]) Command {
		return Settle{
			SettleRequest: SettleRequest{
				ClientID:     req.principal.ClientID,
				CustomerID:   req.principal.CustomerID,
				WalletShopID: req.key.WalletShopID,
				OrderID:      req.key.OrderID,
				Amount:       amount,
			},
			TraceID: req.traceID,
			ReplyTo: to,
		}
	})
}

func (a *API) cancel(w http.ResponseWriter, r *http.Request) {
	r, span := a.startSpan(r, "PUT cancel")
	defer span.End()
	req, ok := a.validate(w, r)
	if !ok {
		return
	}
	a.ask(w, r, req, func(to entity.ReplyTo[Response]) Command {
		return Cancel{
			CancelRequest: CancelRequest{
				ClientID:     req.principal.ClientID,
				CustomerID:   req.principal.CustomerID,
				WalletShopID: req.key.WalletShopID,
				OrderID:      req.key.OrderID,
			},
			TraceID: req.traceID,
			ReplyTo: to,
		}
	})
}

// validate checks the headers and the path; on failure it has answered.
func (a *API) validate(w http.ResponseWriter, r *http.Request) (request, bool) {
	principal, tenant, ok := a.validateCaller(w, r)
	if !ok {
		return request{}, false
	}
	shop, order := r.PathValue("walletShopId"), r.PathValue("orderId")
	if !validShop(shop) {
		writeFailure(w, ValidationFailure("walletShopId must be 1 to 40 half-width characters"))
		return request{}, false
	}
	if order == "" || len(order) > 27 || !alphanumeric(order) {
		writeFailure(w, ValidationFailure("orderId must be 1 to 27 half-width alphanumeric characters"))
		return request{}, false
	}
	return request{
		key:       OrderKey{Tenant: tenant, ClientID: principal.ClientID, WalletShopID: shop, OrderID: order},
		principal: principal,
		traceID:   traceIDOf(r.Context()),
	}, true
}

// validateCaller checks the bearer token and the tenant header; on failure
// it has answered.
func (a *API) validateCaller(w http.ResponseWriter, r *http.Request) (Principal, Tenant, bool) {
	// 401 carries CODE-001, as the original's rejection handler answered.
	// The scheme is case-insensitive (RFC 7235 §2.1).
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
		w.Header().Set("WWW-Authenticate", "Bearer")
		writeJSON(w, http.StatusUnauthorized, errorBody{Code: string(CodeForbidden), Message: "bearer token required"})
		return Principal{}, "", false
	}
	principal, err := a.Auth.Authorize(r.Context(), token)
	if err != nil {
		w.Header().Set("WWW-Authenticate", `Bearer error="invalid_token"`)
		writeJSON(w, http.StatusUnauthorized, errorBody{Code: string(CodeForbidden), Message: "invalid bearer token"})
		return Principal{}, "", false
	}
	tenant, err := ParseTenant(r.Header.Get("X-Tenant-Id"))
	if err != nil {
		writeFailure(w, ValidationFailure("X-Tenant-Id must be one of example, tenant-a"))
		return Principal{}, "", false
	}
	return principal, tenant, true
}

// validShop: 1 to 40 half-width characters.
func validShop(shop string) bool { return shop != "" && len(shop) <= 40 && halfWidth(shop) }

// halfWidth: printable ASCII.
func halfWidth(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

func alphanumeric(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z') {
			return false
		}
	}
	return true
}

func (a *API) ask(w http.ResponseWriter, r *http.Request, req request, build func(entity.ReplyTo[Response]) Command) {
	timeout := a.AskTimeout
	if timeout <= 0 {
		timeout = DefaultSettings().AskTimeout
	}
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	resp, err := entity.Ask(ctx, a.Payments.EntityRefFor(req.key.EntityID()), build)
	if retryAfter, ok := unavailable(err); ok {
		// The entity failed (its journal is down, say) and restarts after
		// a back-off: say so now rather than at the ask timeout.
		a.log().Warn("payment entity unavailable", "entity_id", req.key.EntityID(), "trace_id", req.traceID,
			"retry_after", retryAfter, "err", err)
		writeUnavailable(w, retryAfter)
		return
	}
	if err != nil {
		// An ask timeout, or no entity to ask: not a business failure.
		a.log().Warn("payment request failed", "entity_id", req.key.EntityID(), "trace_id", req.traceID, "err", err)
		if errors.Is(err, context.Canceled) {
			return // the client went away
		}
		writeFailure(w, Unpredictable())
		return
	}
	if !resp.OK() {
		writeFailure(w, *resp.Failure)
		return
	}
	writeJSON(w, http.StatusOK, successBody{OrderID: req.key.OrderID, WalletShopID: req.key.WalletShopID})
}

func (a *API) log() *slog.Logger {
	if a.Log != nil {
		return a.Log
	}
	return slog.Default()
}

// unavailable reports whether err says that the entity cannot answer now
// and may soon (it matches sharding.ErrEntityUnavailable: the entity failed
// and its shard backs off before restarting it, or it could not recover),
// on this node or on another, and the wait to suggest: the rest of the
// back-off, which the *sharding.UnavailableError carries wherever it was
// raised (an ask of another node gets it inside its failure). A failure
// from a node that predates that field, or an entity that could not
// recover, carries none, and gets writeUnavailable's shortest wait.
func unavailable(err error) (retryAfter time.Duration, ok bool) {
	if !errors.Is(err, sharding.ErrEntityUnavailable) {
		return 0, false
	}
	if ue, ok := errors.AsType[*sharding.UnavailableError](err); ok {
		return ue.RetryAfter, true
	}
	return 0, true
}

// writeUnavailable answers 503 with Retry-After (whole seconds, at least
// 1) and the non-business CODE-012: nothing was done, the request may be retried.
func writeUnavailable(w http.ResponseWriter, retryAfter time.Duration) {
	secs := max(1, int((retryAfter+time.Second-1)/time.Second))
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	writeJSON(w, http.StatusServiceUnavailable, errorBody{Code: string(CodeUnpredictable),
		Message: "payment temporarily unavailable; retry after " + strconv.Itoa(secs) + "s"})
}

func writeFailure(w http.ResponseWriter, f Failure) {
	status, ok := statusOf[f.Code]
	if !ok {
		status = http.StatusInternalServerError
	}
	writeJSON(w, status, errorBody{Code: string(f.Code), Message: f.Message})
}

// errorBody is every failure's body; successBody a 200's. Structs, not
// maps: they encode without sorting keys (the field order is the sorted one).
type errorBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

type successBody struct {
	OrderID      string `json:"orderId"`
	WalletShopID string `json:"walletShopId"`
}

// writeJSON answers status with v's JSON, a newline, and the headers that
// say what it is and how long.
func writeJSON(w http.ResponseWriter, status int, v any) {
	jw := jsonWriters.Get().(*jsonWriter)
	defer jw.release()
	if err := jw.enc.Encode(v); err != nil {
		jw.buf.Reset()
		jw.buf.WriteString(`{"code":"CODE-012","message":"unexpected error"}` + "\n")
		status = http.StatusInternalServerError
	}
	h := w.Header()
	h["Content-Type"] = []string{"application/json"}
	h["Content-Length"] = []string{strconv.Itoa(jw.buf.Len())}
	w.WriteHeader(status)
	_, _ = w.Write(jw.buf.Bytes())
}

// jsonWriter is an encoder and its buffer, reused across answers.
type jsonWriter struct {
	buf bytes.Buffer
	enc *json.Encoder
}

var jsonWriters = sync.Pool{New: func() any {
	jw := new(jsonWriter)
	jw.enc = json.NewEncoder(&jw.buf)
	jw.enc.SetEscapeHTML(false) // JSON, not HTML: "<" stays readable in answers and errors
	return jw
}}

func (jw *jsonWriter) release() {
	jw.buf.Reset()
	jsonWriters.Put(jw)
}

// w3c reads the caller's W3C trace context from the request's headers.
var w3c propagation.TraceContext

// startSpan starts the request's server span named name, a child of the
// caller's trace context when the request carries one, and returns the
// request with the span in its context.
func (a *API) startSpan(r *http.Request, name string) (*http.Request, trace.Span) {
	ctx := r.Context()
	if r.Header.Get("traceparent") != "" {
		ctx = w3c.Extract(ctx, propagation.HeaderCarrier(r.Header))
	}
	tracer := a.Tracer
	if tracer == nil {
		tracer = noop.NewTracerProvider().Tracer("")
	}
	ctx, span := tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer))
	return r.WithContext(ctx), span
}

// traceIDOf is the trace id of ctx's span, the request's trace_id; a
// random one when ctx has none (no traceparent, no tracer making ids).
func traceIDOf(ctx context.Context) string {
	if sc := trace.SpanContextFromContext(ctx); sc.HasTraceID() {
		return sc.TraceID().String()
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
