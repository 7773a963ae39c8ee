package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/shoal-dev/shoal/journal"
)

// Projections (docs/DESIGN.md, "The read side"): GET /admin/v1/projections
// lists every projection the node runs with each instance's status, read
// from the offset store, so any node shows every instance wherever it
// runs; POST /admin/v1/projections/{name}/{instance}/{pause|resume|
// rebuild|reset} queues an operation that the instance's holder applies at
// its next lease renewal (202 with the request). {instance} is the
// instance's slice range "min-max" or its index.

// Errors a ProjectionSource returns (wrapped) that the handler maps to 404.
var (
	ErrUnknownProjection = errors.New("admin: unknown projection")
	ErrUnknownInstance   = errors.New("admin: unknown projection instance")
)

// The codes of the projection routes' errors.
const (
	CodeUnknownProjection Code = "unknown_projection" // 404
	CodeUnknownInstance   Code = "unknown_instance"   // 404
)

// ProjectionSource is a Source whose node runs projections; with a Source
// that is none, the list is empty and every action is ErrUnknownProjection.
type ProjectionSource interface {
	// Projections lists every projection the node runs, by name, with all
	// its instances by range.
	Projections(ctx context.Context) ([]Projection, error)
	// ProjectionAction queues op for one instance (ErrUnknownProjection,
	// ErrUnknownInstance; ErrBadRequest for an offset the instance cannot
	// take). offset is OpReset's target.
	ProjectionAction(ctx context.Context, name, instance string, op ProjectionOp, offset journal.Offset) (ProjectionRequest, error)
}

// ProjectionOp is an operation on a projection instance.
type ProjectionOp string

// The operations, as in their paths.
const (
	ProjectionPause   ProjectionOp = "pause"
	ProjectionResume  ProjectionOp = "resume"
	ProjectionRebuild ProjectionOp = "rebuild"
	ProjectionReset   ProjectionOp = "reset"
)

// ProjectionList is the body of GET /admin/v1/projections.
type ProjectionList struct {
	Projections []Projection `json:"projections"`
}

// Projection is one projection and its instances.
type Projection struct {
	Name      string               `json:"name"`
	Instances []ProjectionInstance `json:"instances"`
}

// ProjectionInstance is one instance's status as the store holds it.
type ProjectionInstance struct {
	// Instance is its slice range, "min-max"; Key its stored key.
	Instance string `json:"instance"`
	Key      string `json:"key"`
	// Node is the node running it ("" when none holds its lease), Holder
	// the lease's holder name and Epoch its fencing token.
	Node   string `json:"node"`
	Holder string `json:"holder"`
	Epoch  int64  `json:"epoch"`
	// Offset is the stored offset; HandledOffset where the holder's
	// handling was at its last report (ahead between at-least-once saves).
	Offset        string `json:"offset"`
	HandledOffset string `json:"handledOffset"`
	Paused        bool   `json:"paused"`
	// LagSeconds is now minus the write time of the last event handled
	// (0 before the first); LagEvents the events stored after the handled
	// offset, null when the journal counts none.
	LagSeconds float64 `json:"lagSeconds"`
	LagEvents  *int64  `json:"lagEvents"`
	LastError  string  `json:"lastError,omitempty"`
	// ReportedAt is the holder's last report (null before the first);
	// Pending the operations queued and not applied yet.
	ReportedAt *time.Time `json:"reportedAt"`
	Pending    []string   `json:"pending"`
}

// ProjectionResetRequest is the body of POST .../reset.
type ProjectionResetRequest struct {
	// Offset is the journal offset's text form ("start" for the start).
	Offset string `json:"offset"`
}

// ProjectionRequest is the 202 answer to an action: the queued request.
type ProjectionRequest struct {
	Status     string `json:"status"` // "accepted"
	Projection string `json:"projection"`
	Instance   string `json:"instance"`
	Op         string `json:"op"`
	ID         int64  `json:"id"`
	Offset     string `json:"offset,omitempty"`
}

// projectionRoutes adds the projection routes to mux.
func (h *handler) projectionRoutes(mux *http.ServeMux) {
	mux.Handle("GET /admin/v1/projections", h.read(h.projections))
	for _, op := range []ProjectionOp{ProjectionPause, ProjectionResume, ProjectionRebuild, ProjectionReset} {
		mux.Handle("POST /admin/v1/projections/{name}/{instance}/"+string(op), h.action(h.projectionAction(op)))
	}
}

func (h *handler) projections(w http.ResponseWriter, r *http.Request) {
	out := ProjectionList{Projections: []Projection{}}
	if ps, ok := h.src.(ProjectionSource); ok {
		list, err := ps.Projections(r.Context())
		if err != nil {
			h.failProjection(w, r, err)
			return
		}
		if list != nil {
			out.Projections = list
		}
	}
	writeJSON(w, http.StatusOK, out)
}

func (h *handler) projectionAction(op ProjectionOp) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name, instance := r.PathValue("name"), r.PathValue("instance")
		var to journal.Offset
		if op == ProjectionReset {
			var req ProjectionResetRequest
			if err := decode(r, w, &req, false); err != nil {
				h.fail(w, r, err)
				return
			}
			off, err := journal.ParseOffset(req.Offset)
			if err != nil || req.Offset == "" {
				h.fail(w, r, fmt.Errorf("%w: offset %q: want an offset's text form or \"start\": %w", ErrBadRequest, req.Offset, err))
				return
			}
			to = off
		} else if err := decode(r, w, &struct{}{}, true); err != nil {
			h.fail(w, r, err)
			return
		}
		ps, ok := h.src.(ProjectionSource)
		if !ok {
			h.failProjection(w, r, fmt.Errorf("%w: %q: this node runs no projections", ErrUnknownProjection, name))
			return
		}
		req, err := ps.ProjectionAction(r.Context(), name, instance, op, to)
		if err != nil {
			h.failProjection(w, r, err)
			return
		}
		h.log.Info("admin: projection operation requested", "projection", name, "instance", instance, "op", string(op), "request", req.ID)
		writeJSON(w, http.StatusAccepted, req)
	}
}

// failProjection answers the projection routes' own errors, the rest as
// fail does.
func (h *handler) failProjection(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, ErrUnknownProjection):
		writeError(w, http.StatusNotFound, CodeUnknownProjection, err)
	case errors.Is(err, ErrUnknownInstance):
		writeError(w, http.StatusNotFound, CodeUnknownInstance, err)
	default:
		h.fail(w, r, err)
	}
}
