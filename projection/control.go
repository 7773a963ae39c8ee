package projection

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/shoal-dev/shoal/journal"
)

// Operating instances from any node (docs/DESIGN.md, "The read side").
//
// An instance runs on one node, but an operator may ask any node. The
// operations go through the store rather than to the runner: a node writes
// a Request row for the instance (ControlStore.Request), and the runner
// holding the instance picks it up at its next heartbeat (every
// LeaseTTL/3, and right after it takes the lease), applies it between two
// groups as it applies Pause or Reset, and completes it with a write fenced
// by its epoch. The status works the same way backwards: at each
// heartbeat the runner stores a Report (handled offset, last event time,
// lag in events, last error) beside its lease, and Instances reads every
// row. So no node needs to know where an instance runs, a request made
// while no runner holds the instance waits for the next one (a pause
// before a restart holds), and a request survives the runner's crash. The
// price is latency: an operation applies within LeaseTTL/3, and a status
// is as old as the last heartbeat (ReportedAt says how old).
//
// A request whose runner applied it but crashed before completing it is
// applied again by the next holder: pause, resume and reset to an offset
// are idempotent; a rebuild runs again.

// OpKind names an operation requested through a ControlStore.
type OpKind string

const (
	OpPause   OpKind = "pause"
	OpResume  OpKind = "resume"
	OpReset   OpKind = "reset"
	OpRebuild OpKind = "rebuild"
)

// Validate checks the kind.
func (k OpKind) Validate() error {
	switch k {
	case OpPause, OpResume, OpReset, OpRebuild:
		return nil
	}
	return fmt.Errorf("%w: unknown operation %q", ErrInvalidConfig, string(k))
}

// Request is an operation waiting in the store for the instance's holder.
type Request struct {
	// ID orders an instance's requests: the runner applies them by ID.
	ID   int64
	Kind OpKind
	// Offset is OpReset's target (the zero Offset for the start).
	Offset journal.Offset
	// At is when it was requested (the store's clock).
	At time.Time
}

// Report is what a runner stores about itself at each heartbeat.
type Report struct {
	// Offset is where handling got to (ahead of the stored offset between
	// at-least-once saves).
	Offset journal.Offset
	// LastEventTime is the write timestamp of the last event handled;
	// zero before the first. A heartbeat with a zero one keeps the stored
	// one: a new holder that handled nothing yet is as far behind as the
	// last.
	LastEventTime time.Time
	// LagEvents is how many events of the range are stored after Offset;
	// -1 when the source counts no events (see EventCounter).
	LagEvents int64
	// LastError is the last failure the runner saw, "" after a success.
	LastError string
}

// InstanceState is an instance as the store holds it, readable from any
// node.
type InstanceState struct {
	Instance Instance
	// Offset is the stored offset.
	Offset journal.Offset
	Paused bool
	// Holder and Epoch are the lease's; Held reports whether it was
	// unexpired when read (Expires is on the store's clock).
	Holder  string
	Epoch   int64
	Expires time.Time
	Held    bool
	// UpdatedAt is the last change of offset, pause flag or holder.
	UpdatedAt time.Time
	// Report is the holder's last heartbeat report, stored at ReportedAt
	// (zero before the first).
	Report     Report
	ReportedAt time.Time
	// Pending are the requests not applied yet, by ID.
	Pending []Request
}

// Lag is how far the read model is behind the writers as of the last
// report: now minus the last event's timestamp, 0 before the first event.
func (s InstanceState) Lag(now time.Time) time.Duration {
	if s.Report.LastEventTime.IsZero() {
		return 0
	}
	return max(now.Sub(s.Report.LastEventTime), 0)
}

// ControlStore is a Store through which any node sees and operates
// instances it does not run. The memory store and projection/postgres's
// implement it and pass projectiontest.RunControlStore.
type ControlStore interface {
	Store
	// Heartbeat renews f's lease by ttl like Renew, stores rep, and
	// returns the instance's pending requests by ID; ErrFenced when f is
	// stale.
	Heartbeat(ctx context.Context, f Fence, ttl time.Duration, rep Report) ([]Request, error)
	// Complete removes request id of f's instance once f's holder applied
	// it (or refused it for good); ErrFenced when f is stale. An unknown
	// id is no error.
	Complete(ctx context.Context, f Fence, id int64) error
	// Request queues an operation for inst's holder; ErrUnknownInstance
	// when inst was never acquired, ErrInvalidConfig for a bad kind.
	Request(ctx context.Context, inst Instance, kind OpKind, to journal.Offset) (Request, error)
	// Instances lists the stored instances of the projection name (every
	// projection's when name is ""), by name then range.
	Instances(ctx context.Context, name string) ([]InstanceState, error)
}

// ErrUnknownInstance means the store holds no such instance.
var ErrUnknownInstance = errors.New("projection: unknown instance")

// ParseInstanceKey is Key's inverse: the instance of projection name whose
// stored key is key ("name/min-max").
func ParseInstanceKey(name, key string) (Instance, error) {
	rest, ok := strings.CutPrefix(key, name+"/")
	lo, hi, ok2 := strings.Cut(rest, "-")
	if !ok || !ok2 {
		return Instance{}, fmt.Errorf("%w: instance key %q of %q", ErrInvalidConfig, key, name)
	}
	minS, err1 := strconv.Atoi(lo)
	maxS, err2 := strconv.Atoi(hi)
	if err := errors.Join(err1, err2); err != nil {
		return Instance{}, fmt.Errorf("%w: instance key %q: %w", ErrInvalidConfig, key, err)
	}
	inst := Instance{Name: name, Slices: journal.SliceRange{Min: minS, Max: maxS}}
	return inst, inst.Validate()
}

// opFor turns a stored request into the runner's operation.
func opFor(r Request) op {
	switch r.Kind {
	case OpPause:
		return op{kind: opPause}
	case OpResume:
		return op{kind: opResume}
	case OpRebuild:
		return op{kind: opRebuild}
	default:
		return op{kind: opReset, to: r.Offset}
	}
}
