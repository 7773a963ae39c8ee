package admin_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/journal"
	"github.com/shoal-dev/shoal/node/admin"
)

// projectionFake is a node that runs the projection "orders" with the
// instances 0-511 and 512-1023; it records the operations.
type projectionFake struct {
	*fakeSource
	mu  sync.Mutex
	ops []string // "instance op offset"
}

func (f *projectionFake) Projections(context.Context) ([]admin.Projection, error) {
	lag := int64(3)
	at := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	return []admin.Projection{{Name: "orders", Instances: []admin.ProjectionInstance{
		{Instance: "0-511", Key: "orders/0-511", Node: "node-a", Holder: "node-a#ab", Epoch: 2, Offset: "postgres:7:10",
			HandledOffset: "postgres:7:12", LagSeconds: 1.5, LagEvents: &lag, ReportedAt: &at, Pending: []string{}},
		{Instance: "512-1023", Key: "orders/512-1023", Offset: "start", HandledOffset: "start", Paused: true, Pending: []string{"resume"}},
	}}}, nil
}

func (f *projectionFake) ProjectionAction(_ context.Context, name, instance string, op admin.ProjectionOp, to journal.Offset) (admin.ProjectionRequest, error) {
	if name != "orders" {
		return admin.ProjectionRequest{}, fmt.Errorf("%w: %q", admin.ErrUnknownProjection, name)
	}
	if instance != "0-511" && instance != "512-1023" {
		return admin.ProjectionRequest{}, fmt.Errorf("%w: %q", admin.ErrUnknownInstance, instance)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ops = append(f.ops, fmt.Sprintf("%s %s %s", instance, op, to))
	return admin.ProjectionRequest{Status: "accepted", Projection: name, Instance: instance, Op: string(op), ID: int64(len(f.ops))}, nil
}

func TestProjectionsListEveryInstance(t *testing.T) {
	h := admin.New(&projectionFake{fakeSource: newFake()}, admin.Options{Token: token, Logger: quiet()})
	code, body := do(t, h, "GET", "/admin/v1/projections", "", "")
	if code != 200 {
		t.Fatalf("GET projections: %d %s", code, body)
	}
	got := decodeAs[map[string][]map[string]any](t, body)["projections"]
	if len(got) != 1 || got[0]["name"] != "orders" {
		t.Fatalf("projections %s", body)
	}
	insts := got[0]["instances"].([]any)
	a, b := insts[0].(map[string]any), insts[1].(map[string]any)
	if a["instance"] != "0-511" || a["node"] != "node-a" || a["offset"] != "postgres:7:10" || a["lagEvents"] != 3.0 ||
		a["lagSeconds"] != 1.5 || a["epoch"] != 2.0 || a["paused"] != false || a["reportedAt"] != "2030-01-01T00:00:00Z" {
		t.Errorf("first instance %v", a)
	}
	if b["lagEvents"] != nil || b["reportedAt"] != nil || b["paused"] != true || b["node"] != "" {
		t.Errorf("second instance %v: want null lag in events and report, paused, no node", b)
	}

	// A node that runs no projection lists none.
	plain := admin.New(newFake(), admin.Options{Token: token, Logger: quiet()})
	if code, body := do(t, plain, "GET", "/admin/v1/projections", "", ""); code != 200 || body != "{\"projections\":[]}\n" {
		t.Errorf("GET projections of a node without: %d %q", code, body)
	}
	if code, body := do(t, plain, "POST", "/admin/v1/projections/orders/0-511/pause", "Bearer "+token, ""); code != 404 ||
		decodeAs[errBody](t, body).Code != admin.CodeUnknownProjection {
		t.Errorf("pause on a node without projections: %d %s", code, body)
	}
}

func TestProjectionActions(t *testing.T) {
	f := &projectionFake{fakeSource: newFake()}
	h := admin.New(f, admin.Options{Token: token, Logger: quiet()})
	auth := "Bearer " + token
	for _, c := range []struct {
		path, auth, body string
		code             int
		want             admin.Code
	}{
		{"/admin/v1/projections/orders/0-511/pause", "", "", 401, admin.CodeUnauthorized},
		{"/admin/v1/projections/orders/0-511/rebuild", "Bearer wrong", "", 403, admin.CodeForbidden},
		{"/admin/v1/projections/books/0-511/pause", auth, "", 404, admin.CodeUnknownProjection},
		{"/admin/v1/projections/orders/0-9/resume", auth, "", 404, admin.CodeUnknownInstance},
		{"/admin/v1/projections/orders/0-511/reset", auth, `{"offset":"not an offset"}`, 400, admin.CodeBadRequest},
		{"/admin/v1/projections/orders/0-511/reset", auth, `{"offset":""}`, 400, admin.CodeBadRequest},
		{"/admin/v1/projections/orders/0-511/reset", auth, ``, 400, admin.CodeBadRequest},
		{"/admin/v1/projections/orders/0-511/reset", auth, `{"offset":"start","x":1}`, 400, admin.CodeBadRequest},
		{"/admin/v1/projections/orders/0-511/pause", auth, `{"x":1}`, 400, admin.CodeBadRequest},
	} {
		code, body := do(t, h, "POST", c.path, c.auth, c.body)
		if code != c.code || decodeAs[errBody](t, body).Code != c.want || decodeAs[errBody](t, body).Error == "" {
			t.Errorf("POST %s %q with %q: %d %s, want %d %s", c.path, c.body, c.auth, code, body, c.code, c.want)
		}
	}
	if len(f.ops) != 0 {
		t.Fatalf("refused requests acted: %v", f.ops)
	}
	for _, c := range []struct{ path, body string }{
		{"/admin/v1/projections/orders/0-511/pause", ""},
		{"/admin/v1/projections/orders/512-1023/resume", "{}"},
		{"/admin/v1/projections/orders/0-511/rebuild", ""},
		{"/admin/v1/projections/orders/0-511/reset", `{"offset":"start"}`},
		{"/admin/v1/projections/orders/0-511/reset", `{"offset":"postgres:7:10"}`},
	} {
		code, body := do(t, h, "POST", c.path, auth, c.body)
		if code != 202 || decodeAs[admin.ProjectionRequest](t, body).Status != "accepted" {
			t.Errorf("POST %s %s: %d %s", c.path, c.body, code, body)
		}
	}
	want := []string{"0-511 pause start", "512-1023 resume start", "0-511 rebuild start", "0-511 reset start", "0-511 reset postgres:7:10"}
	if fmt.Sprint(f.ops) != fmt.Sprint(want) {
		t.Errorf("operations %v, want %v", f.ops, want)
	}
}
