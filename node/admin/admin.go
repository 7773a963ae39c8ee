// Package admin is a node's admin HTTP API (JSON over net/http): health
// probes, the members, the shard map of every entity type and the lease
// holders, a live stream of a type's shard map (server-sent events), and
// the operator's actions: a graceful leave, rebalancing one shard, downing
// an incarnation. It also mounts the shard-map page (package shardmap).
//
// The handler knows the node only through Source, so it is tested against
// a fake; package node implements Source and serves the handler on
// Config.AdminAddr.
//
// Authentication: actions always need "Authorization: Bearer <token>"
// (401 without, 403 with another token, or when no token is set: actions
// are then off). Reads need it too with Options.ReadsNeedToken; a browser,
// whose EventSource sends no header, may instead present the session
// cookie that POST /admin/v1/session sets for the token (HttpOnly,
// SameSite=Strict, reads only, never actions). The probes /ready and
// /alive and the shard-map page itself (static, no data) are always open.
// Refused requests and every action are logged with the client address.
//
// Errors are JSON, {"error": "...", "code": "..."}, with a fitting status;
// the codes are the Code constants (an unknown route is 404 not_found).
//
// NewServer wraps the handler in an http.Server with timeouts on every
// phase; the shard streams extend their write deadline before each write,
// and at most Options.MaxStreams of them are open at once. All streams of
// one type share one poller of the Source.
package admin

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/shoal-dev/shoal/cluster"
)

// Errors a Source returns (wrapped) that the handler maps to a status.
var (
	// ErrUnknownType: no region of that entity type runs on the node (404).
	ErrUnknownType = errors.New("admin: unknown entity type")
	// ErrUnknownShard: the shard has no home to move it from (404).
	ErrUnknownShard = errors.New("admin: unknown shard")
	// ErrUnknownNode: no member of that name (404).
	ErrUnknownNode = errors.New("admin: unknown node")
	// ErrBadRequest: the request itself is wrong (400): bad JSON, a
	// missing field, a malformed shard id.
	ErrBadRequest = errors.New("admin: bad request")
	// ErrUnavailable: the node cannot do it now, e.g. the member to ask is
	// unreachable (503): retry later.
	ErrUnavailable = errors.New("admin: unavailable")
)

// Code is the machine-readable kind of an error response.
type Code string

// The codes of error responses.
const (
	CodeUnauthorized Code = "unauthorized"  // 401: no bearer token
	CodeForbidden    Code = "forbidden"     // 403: wrong token, or actions off
	CodeUnknownType  Code = "unknown_type"  // 404
	CodeUnknownShard Code = "unknown_shard" // 404
	CodeUnknownNode  Code = "unknown_node"  // 404
	CodeBadRequest   Code = "bad_request"   // 400
	CodeUnavailable  Code = "unavailable"   // 503: the node cannot answer now
	CodeInternal     Code = "internal"      // 500
	CodeNotFound     Code = "not_found"     // 404: no such route
	// CodeMethodNotAllowed: 405, the route exists for another method.
	CodeMethodNotAllowed Code = "method_not_allowed"
	// CodeTooManyStreams: 503, Options.MaxStreams shard streams are open.
	CodeTooManyStreams Code = "too_many_streams"
)

// Source is what the handler needs of a node.
type Source interface {
	// Ready and Alive are the readiness and liveness probes: nil or why not.
	Ready() error
	Alive() error
	// Members is the node's view of the membership.
	Members() Members
	// Types lists the entity types started on the node, sorted.
	Types() []string
	// Shards is the shard map of typeName (ErrUnknownType).
	Shards(ctx context.Context, typeName string) (Shards, error)
	// Leases lists the node and coordinator leases in the store.
	Leases(ctx context.Context) (Leases, error)
	// Leave makes node ("" for this node) leave the cluster gracefully;
	// it returns once the leave has begun (ErrUnknownNode).
	Leave(ctx context.Context, node string) error
	// Rebalance moves one shard of typeName: it is handed off and placed
	// again (ErrUnknownType, ErrUnknownShard).
	Rebalance(ctx context.Context, typeName, shard string) error
	// Down marks an incarnation down in the lease store: it fences itself
	// at its next renewal, and its shards move once its lease expired. An
	// incarnation that is neither a member nor holds a lease is
	// ErrUnknownNode.
	Down(ctx context.Context, node cluster.UniqueAddress) error
}

// Members is the body of GET /admin/v1/members.
type Members struct {
	Self    string   `json:"self"`
	Oldest  string   `json:"oldest"`
	Members []Member `json:"members"`
}

// Member is one member of the view.
type Member struct {
	Node          string   `json:"node"`
	Incarnation   uint64   `json:"incarnation"`
	ID            string   `json:"id"` // node#incarnation
	TransportAddr string   `json:"transportAddr"`
	GossipAddr    string   `json:"gossipAddr"`
	Status        string   `json:"status"`
	Roles         []string `json:"roles"`
	AppVersion    string   `json:"appVersion"`
	JoinOrder     uint64   `json:"joinOrder"`
	Unreachable   bool     `json:"unreachable"`
}

// Shards is the body of GET /admin/v1/shards/{type} and of each event of
// its stream.
type Shards struct {
	Type        string      `json:"type"`
	Coordinator Coordinator `json:"coordinator"`
	// Nodes are the node incarnations (node#incarnation) that may host
	// the type's shards, sorted.
	Nodes  []string `json:"nodes"`
	Shards []Shard  `json:"shards"`
}

// Coordinator names the incarnation hosting a type's coordinator and its
// fencing epoch; empty while there is none.
type Coordinator struct {
	Node        string `json:"node"`
	Incarnation uint64 `json:"incarnation"`
	Epoch       uint64 `json:"epoch"`
}

// Shard states.
const (
	StateActive      = "active"
	StateHandingOff  = "handing-off"
	StateUnallocated = "unallocated"
)

// Shard is one shard: its home ("" when unallocated), state and entities
// (-1 when its home did not report them).
type Shard struct {
	ID       string `json:"id"`
	Node     string `json:"node"`
	State    string `json:"state"`
	Entities int    `json:"entities"`
}

// Leases is the body of GET /admin/v1/leases.
type Leases struct {
	Nodes        []NodeLease        `json:"nodes"`
	Coordinators []CoordinatorLease `json:"coordinators"`
}

// NodeLease is the live (neither downed nor released) lease of one node
// incarnation; Expired marks one past its expiry (a crash nobody downed).
type NodeLease struct {
	Node        string    `json:"node"`
	Incarnation uint64    `json:"incarnation"`
	ExpiresAt   time.Time `json:"expiresAt"`
	Expired     bool      `json:"expired"`
}

// CoordinatorLease is the coordinator lease of one entity type.
type CoordinatorLease struct {
	Type      string    `json:"type"`
	Holder    string    `json:"holder"`
	Epoch     uint64    `json:"epoch"`
	ExpiresAt time.Time `json:"expiresAt"`
	Expired   bool      `json:"expired"`
}

// LeaveRequest is the body of POST /admin/v1/leave; an empty Node (or
// body) is this node.
type LeaveRequest struct {
	Node string `json:"node"`
}

// DownRequest is the body of POST /admin/v1/down; both fields are required.
type DownRequest struct {
	Node        string  `json:"node"`
	Incarnation *uint64 `json:"incarnation"`
}

// Options configure the handler.
type Options struct {
	// Token is the bearer token actions need (and reads, with
	// ReadsNeedToken). Empty: actions are refused.
	Token string
	// ReadsNeedToken protects the reads as well (not /ready and /alive).
	ReadsNeedToken bool
	// Logger logs actions and failures. Default slog.Default().
	Logger *slog.Logger
	// PollEvery is how often a shard-map stream looks for changes.
	// Default 500 ms.
	PollEvery time.Duration
	// PingEvery is how often a stream sends a ": ping" comment to keep
	// proxies from closing it. Default 15 s.
	PingEvery time.Duration
	// ReadTimeout bounds each read of a Source (the shard map asks every
	// hosting region). Default 5 s.
	ReadTimeout time.Duration
	// MaxStreams bounds the shard streams open at once; one more is
	// answered 503 too_many_streams. Default 32.
	MaxStreams int
	// WriteTimeout bounds writing a response (NewServer's WriteTimeout); a
	// shard stream gets it afresh for each event and ping. Default 30 s.
	WriteTimeout time.Duration
}

// LoginRequest is the body of POST /admin/v1/session.
type LoginRequest struct {
	Token string `json:"token"`
}

func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.PollEvery <= 0 {
		o.PollEvery = 500 * time.Millisecond
	}
	if o.PingEvery <= 0 {
		o.PingEvery = 15 * time.Second
	}
	if o.ReadTimeout <= 0 {
		o.ReadTimeout = 5 * time.Second
	}
	if o.MaxStreams <= 0 {
		o.MaxStreams = 32
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = 30 * time.Second
	}
	return o
}
