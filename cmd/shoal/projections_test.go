package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/shoal-dev/shoal/journal"
	"github.com/shoal-dev/shoal/node/admin"
)

// projectionNode is fakeNode running the projection "orders"; it records
// the operations asked.
type projectionNode struct {
	*fakeNode
	ops []string
}

func (p *projectionNode) Projections(context.Context) ([]admin.Projection, error) {
	lag := int64(42)
	return []admin.Projection{{Name: "orders", Instances: []admin.ProjectionInstance{
		{Instance: "0-511", Node: "node-a#1", Offset: "postgres:9:120", LagSeconds: 2.25, LagEvents: &lag},
		{Instance: "512-1023", Offset: "start", Paused: true},
	}}}, nil
}

func (p *projectionNode) ProjectionAction(_ context.Context, name, instance string, op admin.ProjectionOp, to journal.Offset) (admin.ProjectionRequest, error) {
	if name != "orders" {
		return admin.ProjectionRequest{}, fmt.Errorf("%w: %q", admin.ErrUnknownProjection, name)
	}
	if instance != "0-511" {
		return admin.ProjectionRequest{}, fmt.Errorf("%w: %q", admin.ErrUnknownInstance, instance)
	}
	p.ops = append(p.ops, fmt.Sprintf("%s %s", op, to))
	return admin.ProjectionRequest{Status: "accepted", Projection: name, Instance: instance, Op: string(op), ID: int64(len(p.ops))}, nil
}

func startProjectionNode(t *testing.T) (*projectionNode, string) {
	p := &projectionNode{fakeNode: &fakeNode{}}
	srv := httptest.NewServer(admin.New(p, admin.Options{Token: "tok", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}))
	t.Cleanup(srv.Close)
	t.Setenv("SHOAL_ADMIN", "")
	t.Setenv("SHOAL_TOKEN", "")
	return p, srv.URL
}

func TestProjectionsTable(t *testing.T) {
	_, url := startProjectionNode(t)
	out, err := runCmd("projections", "--admin", url)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"NAME INSTANCE NODE OFFSET LAG PAUSED",
		"orders 0-511 node-a#1 postgres:9:120 2.2s / 42 events no",
		"orders 512-1023 - start 0.0s yes",
	}
	if got := lines(out); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("projections table:\n%s", out)
	}
	out, err = runCmd("projections", "--admin", url, "--json")
	if err != nil || !strings.Contains(out, `"lagEvents": 42`) {
		t.Fatalf("projections --json: %v\n%s", err, out)
	}
}

func TestProjectionOperations(t *testing.T) {
	p, url := startProjectionNode(t)
	for _, args := range [][]string{
		{"projection", "pause", "orders", "0-511"},
		{"projection", "resume", "orders", "0-511"},
		{"projection", "rebuild", "orders", "0-511"},
		{"projection", "reset", "orders", "0-511", "--offset", "postgres:9:100"},
	} {
		out, err := runCmd(append(args, "--admin", url, "--token", "tok")...)
		if err != nil || !strings.Contains(out, "requested (request ") {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
	if want := "[pause start resume start rebuild start reset postgres:9:100]"; fmt.Sprint(p.ops) != want {
		t.Fatalf("operations %v, want %v", p.ops, want)
	}

	for _, c := range []struct {
		args []string
		code int
	}{
		{[]string{"projection", "pause", "orders"}, 2},
		{[]string{"projection", "explode", "orders", "0-511"}, 2},
		{[]string{"projection", "reset", "orders", "0-511"}, 2},                      // no --offset
		{[]string{"projection", "pause", "orders", "0-511", "--offset", "start"}, 2}, // --offset is reset's
		{[]string{"projection"}, 2},
	} {
		if _, err := runCmd(append(c.args, "--admin", url, "--token", "tok")...); exitCode(err) != c.code {
			t.Errorf("%v: %v (exit %d), want exit %d", c.args, err, exitCode(err), c.code)
		}
	}
	var ae *APIError
	_, err := runCmd("projection", "pause", "orders", "9", "--admin", url, "--token", "tok")
	if !errors.As(err, &ae) || ae.Status != 404 || ae.Code != admin.CodeUnknownInstance || exitCode(err) != 1 {
		t.Errorf("pause of an unknown instance: %v", err)
	}
	_, err = runCmd("projection", "reset", "orders", "0-511", "--offset", "garbage", "--admin", url, "--token", "tok")
	if !errors.As(err, &ae) || ae.Status != 400 || ae.Code != admin.CodeBadRequest {
		t.Errorf("reset to a bad offset: %v", err)
	}
	if _, err := runCmd("projection", "pause", "orders", "0-511", "--admin", url); !strings.Contains(fmt.Sprint(err), "--token") {
		t.Errorf("pause without a token: %v", err)
	}
	if len(p.ops) != 4 {
		t.Errorf("refused commands acted: %v", p.ops)
	}
}
