package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/shoal-dev/shoal/journal"
	"github.com/shoal-dev/shoal/node/admin"
	"github.com/shoal-dev/shoal/projection"
	"github.com/shoal-dev/shoal/projection/sharded"
)

var _ admin.ProjectionSource = adminSource{}

// Projections implements admin.ProjectionSource: every instance's status
// from the offset store, so the answer is the same on every node.
func (s adminSource) Projections(ctx context.Context) ([]admin.Projection, error) {
	now := time.Now()
	var out []admin.Projection
	for _, p := range s.n.Projections() {
		states, err := p.Status(ctx)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", admin.ErrUnavailable, err)
		}
		view := admin.Projection{Name: p.Name(), Instances: make([]admin.ProjectionInstance, 0, len(states))}
		for _, st := range states {
			view.Instances = append(view.Instances, projectionView(st, now))
		}
		out = append(out, view)
	}
	return out, nil
}

func projectionView(st projection.InstanceState, now time.Time) admin.ProjectionInstance {
	v := admin.ProjectionInstance{
		Instance: fmt.Sprintf("%d-%d", st.Instance.Slices.Min, st.Instance.Slices.Max), Key: st.Instance.Key(),
		Holder: st.Holder, Epoch: st.Epoch, Offset: st.Offset.String(), HandledOffset: st.Report.Offset.String(),
		Paused: st.Paused, LagSeconds: st.Lag(now).Seconds(), LastError: st.Report.LastError, Pending: []string{},
	}
	if st.Held {
		v.Node = sharded.HolderNode(st.Holder)
	}
	if st.Report.LagEvents >= 0 && !st.ReportedAt.IsZero() {
		n := st.Report.LagEvents
		v.LagEvents = &n
	}
	if !st.ReportedAt.IsZero() {
		at := st.ReportedAt
		v.ReportedAt = &at
	}
	for _, q := range st.Pending {
		v.Pending = append(v.Pending, string(q.Kind))
	}
	return v
}

// ProjectionAction implements admin.ProjectionSource.
func (s adminSource) ProjectionAction(ctx context.Context, name, instance string, op admin.ProjectionOp, to journal.Offset) (admin.ProjectionRequest, error) {
	p := s.n.projection(name)
	if p == nil {
		return admin.ProjectionRequest{}, fmt.Errorf("%w: %q", admin.ErrUnknownProjection, name)
	}
	inst, err := p.Instance(instance)
	if err != nil {
		return admin.ProjectionRequest{}, fmt.Errorf("%w: %w", admin.ErrUnknownInstance, err)
	}
	var q projection.Request
	switch op {
	case admin.ProjectionPause:
		q, err = p.Pause(ctx, inst)
	case admin.ProjectionResume:
		q, err = p.Resume(ctx, inst)
	case admin.ProjectionRebuild:
		q, err = p.Rebuild(ctx, inst)
	case admin.ProjectionReset:
		if err := resettable(ctx, p, inst, to); err != nil {
			return admin.ProjectionRequest{}, err
		}
		q, err = p.Reset(ctx, inst, to)
	default:
		return admin.ProjectionRequest{}, fmt.Errorf("%w: operation %q", admin.ErrBadRequest, op)
	}
	switch {
	case errors.Is(err, projection.ErrUnknownInstance):
		return admin.ProjectionRequest{}, fmt.Errorf("%w: %s has not run yet: %w", admin.ErrUnknownInstance, inst, err)
	case err != nil:
		return admin.ProjectionRequest{}, err
	}
	out := admin.ProjectionRequest{Status: "accepted", Projection: name, Instance: fmt.Sprintf("%d-%d", inst.Slices.Min, inst.Slices.Max), Op: string(q.Kind), ID: q.ID}
	if op == admin.ProjectionReset {
		out.Offset = q.Offset.String()
	}
	return out, nil
}

// resettable refuses an offset of another journal than the one the
// instance's stored offset came from: the runner would refuse it later,
// where the operator no longer sees the answer.
func resettable(ctx context.Context, p *sharded.Projection, inst projection.Instance, to journal.Offset) error {
	if to.IsStart() {
		return nil
	}
	states, err := p.Status(ctx)
	if err != nil {
		return fmt.Errorf("%w: %w", admin.ErrUnavailable, err)
	}
	for _, st := range states {
		if st.Instance == inst && !st.Offset.IsStart() && st.Offset.Kind != to.Kind {
			return fmt.Errorf("%w: offset %s is not of the journal %s's offset %s came from", admin.ErrBadRequest, to, inst, st.Offset)
		}
	}
	return nil
}
