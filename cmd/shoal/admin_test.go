package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/node/admin"
)

// fakeNode is a node's admin API over fixed data; it records the actions.
type fakeNode struct {
	left   []string
	moved  []string // type/shard
	downed []cluster.UniqueAddress
}

func (f *fakeNode) Ready() error { return nil }
func (f *fakeNode) Alive() error { return nil }
func (f *fakeNode) Members() admin.Members {
	return admin.Members{Self: "node-b#2", Oldest: "node-a#1", Members: []admin.Member{
		{Node: "node-a", Incarnation: 1, ID: "node-a#1", TransportAddr: "10.0.0.1:7001", GossipAddr: "10.0.0.1:7946",
			Status: "Up", Roles: []string{"payment"}, AppVersion: "1.0", JoinOrder: 1},
		{Node: "node-b", Incarnation: 2, ID: "node-b#2", TransportAddr: "10.0.0.2:7001", GossipAddr: "10.0.0.2:7946",
			Status: "Leaving", Roles: []string{}, JoinOrder: 2, Unreachable: true},
		{Node: "node-c", Incarnation: 3, ID: "node-c#3", Status: "Down", Roles: []string{}, JoinOrder: 3},
	}}
}
func (f *fakeNode) Types() []string { return []string{"payment"} }
func (f *fakeNode) Shards(_ context.Context, typeName string) (admin.Shards, error) {
	if typeName != "payment" {
		return admin.Shards{}, fmt.Errorf("%w: %q", admin.ErrUnknownType, typeName)
	}
	return admin.Shards{Type: "payment", Coordinator: admin.Coordinator{Node: "node-a", Incarnation: 1, Epoch: 7},
		Nodes: []string{"node-a#1", "node-b#2"},
		Shards: []admin.Shard{
			{ID: "2", Node: "node-a#1", State: admin.StateActive, Entities: 4},
			{ID: "10", Node: "node-b#2", State: admin.StateHandingOff, Entities: 12},
			{ID: "11", State: admin.StateUnallocated, Entities: -1},
		}}, nil
}
func (f *fakeNode) Leases(context.Context) (admin.Leases, error) {
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	return admin.Leases{
		Nodes: []admin.NodeLease{{Node: "node-a", Incarnation: 1, ExpiresAt: at},
			{Node: "node-c", Incarnation: 3, ExpiresAt: at.Add(-time.Hour), Expired: true}},
		Coordinators: []admin.CoordinatorLease{{Type: "payment", Holder: "node-a#1", Epoch: 7, ExpiresAt: at}},
	}, nil
}
func (f *fakeNode) Leave(_ context.Context, node string) error {
	if node != "node-b" {
		return fmt.Errorf("%w: %q", admin.ErrUnknownNode, node)
	}
	f.left = append(f.left, node)
	return nil
}
func (f *fakeNode) Rebalance(_ context.Context, typeName, shard string) error {
	if typeName != "payment" {
		return fmt.Errorf("%w: %q", admin.ErrUnknownType, typeName)
	}
	if shard != "2" {
		return fmt.Errorf("%w: %q", admin.ErrUnknownShard, shard)
	}
	f.moved = append(f.moved, typeName+"/"+shard)
	return nil
}
func (f *fakeNode) Down(_ context.Context, node cluster.UniqueAddress) error {
	if node.Node != "node-c" {
		return fmt.Errorf("%w: %s", admin.ErrUnknownNode, node)
	}
	f.downed = append(f.downed, node)
	return nil
}

func startFakeNode(t *testing.T) (*fakeNode, string) {
	f := &fakeNode{}
	srv := httptest.NewServer(admin.New(f, admin.Options{Token: "tok", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}))
	t.Cleanup(srv.Close)
	t.Setenv("SHOAL_ADMIN", "")
	t.Setenv("SHOAL_TOKEN", "")
	return f, srv.URL
}

func runCmd(args ...string) (string, error) {
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := run(ctx, args, &out, &errOut)
	return out.String(), err
}

// lines splits output into lines with runs of spaces collapsed, so that
// tests check the cells, not the exact padding.
func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		out = append(out, strings.Join(strings.Fields(l), " "))
	}
	return out
}

func TestMembersTableAndJSON(t *testing.T) {
	_, url := startFakeNode(t)
	out, err := runCmd("members", "--admin", url)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"MEMBER STATUS REACHABLE ORDER ROLES VERSION TRANSPORT GOSSIP",
		"node-a#1 Up yes 1 payment 1.0 10.0.0.1:7001 10.0.0.1:7946 oldest",
		"node-b#2 Leaving NO 2 - - 10.0.0.2:7001 10.0.0.2:7946 self",
		"node-c#3 Down - 3 - - - -", // left: reachability is not known, not "yes"
	}
	if got := lines(out); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("members table:\n%s", out)
	}
	// Columns are aligned (every row has its second column at one offset),
	// with no trailing blanks.
	rows := strings.Split(out, "\n")
	for _, r := range rows {
		if strings.HasSuffix(r, " ") {
			t.Fatalf("trailing blanks in %q", r)
		}
	}
	if i := strings.Index(rows[0], "STATUS"); strings.Index(rows[1], "Up") != i || strings.Index(rows[2], "Leaving") != i {
		t.Fatalf("columns not aligned:\n%s", out)
	}

	t.Setenv("SHOAL_ADMIN", url) // the environment instead of the flag
	out, err = runCmd("members", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var m admin.Members
	if err := json.Unmarshal([]byte(out), &m); err != nil || m.Self != "node-b#2" || len(m.Members) != 3 || m.Members[1].GossipAddr != "10.0.0.2:7946" {
		t.Fatalf("members --json: %v\n%s", err, out)
	}
}

func TestShardsTableAndJSON(t *testing.T) {
	_, url := startFakeNode(t)
	out, err := runCmd("shards", "payment", "--admin", url)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"type payment, coordinator node-a#1 (epoch 7), nodes node-a#1 node-b#2",
		"SHARD NODE STATE ENTITIES",
		"2 node-a#1 active 4",
		"10 node-b#2 handing-off 12",
		"11 - unallocated ?",
	}
	if got := lines(out); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("shards table:\n%s", out)
	}
	out, err = runCmd("shards", "--json", "--admin", url, "payment")
	if err != nil {
		t.Fatal(err)
	}
	var st admin.Shards
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.Coordinator.Epoch != 7 || len(st.Shards) != 3 || st.Shards[2].State != admin.StateUnallocated {
		t.Fatalf("shards --json: %v\n%s", err, out)
	}

	_, err = runCmd("shards", "nope", "--admin", url)
	var ae *APIError
	if !errors.As(err, &ae) || ae.Status != 404 || ae.Code != admin.CodeUnknownType || exitCode(err) != 1 {
		t.Fatalf("shards of an unknown type: %v", err)
	}
}

func TestLeave(t *testing.T) {
	f, url := startFakeNode(t)
	if _, err := runCmd("leave", "node-b", "--admin", url); !strings.Contains(fmt.Sprint(err), "--token") {
		t.Fatalf("leave without a token: %v", err)
	}
	if _, err := runCmd("leave", "node-b", "--admin", url, "--token", "wrong"); err == nil {
		t.Fatal("leave with a wrong token succeeded")
	}
	if len(f.left) != 0 {
		t.Fatalf("refused leaves acted: %v", f.left)
	}
	out, err := runCmd("leave", "node-b", "--admin", url, "--token", "tok")
	if err != nil || out != "node-b is leaving the cluster\n" {
		t.Fatalf("leave: %q %v", out, err)
	}
	t.Setenv("SHOAL_TOKEN", "tok")
	out, err = runCmd("leave", "--json", "node-b", "--admin", url)
	if err != nil || strings.TrimSpace(out) != "{\n  \"status\": \"accepted\"\n}" {
		t.Fatalf("leave --json: %q %v", out, err)
	}
	if len(f.left) != 2 {
		t.Fatalf("leaves: %v", f.left)
	}
	_, err = runCmd("leave", "node-z", "--admin", url)
	var ae *APIError
	if !errors.As(err, &ae) || ae.Code != admin.CodeUnknownNode {
		t.Fatalf("leave of an unknown node: %v", err)
	}
}

func TestAdminCommandsUsage(t *testing.T) {
	_, url := startFakeNode(t)
	for _, args := range [][]string{
		{"members"}, // no --admin
		{"members", "--admin", "not a url"},
		{"members", "extra", "--admin", url},
		{"shards", "--admin", url},
		{"shards", "a", "b", "--admin", url},
		{"leave", "--admin", url},
		{"types", "extra", "--admin", url},
		{"leases", "extra", "--admin", url},
		{"rebalance", "payment", "--admin", url},
		{"down", "node-c", "--admin", url},
		{"down", "node-c", "three", "--admin", url, "--token", "tok"},
		{"members", "--bogus"},
		{"remove-internal-data", "--dsn", "postgres://x"},
		{"remove-internal-data", "payment"}, // no --dsn
	} {
		t.Setenv("SHOAL_DSN", "")
		t.Setenv("DATABASE_URL", "")
		if _, err := runCmd(args...); !errors.Is(err, errUsage) || exitCode(err) != 2 {
			t.Errorf("run %q: %v, want usage (exit 2)", args, err)
		}
	}
}

func TestTypesAndLeases(t *testing.T) {
	_, url := startFakeNode(t)
	out, err := runCmd("types", "--admin", url)
	if err != nil || strings.Join(lines(out), "\n") != "TYPE\npayment" {
		t.Fatalf("types: %v\n%s", err, out)
	}
	out, err = runCmd("types", "--json", "--admin", url)
	if err != nil || !strings.Contains(out, `"payment"`) {
		t.Fatalf("types --json: %v\n%s", err, out)
	}
	out, err = runCmd("leases", "--admin", url)
	want := []string{
		"LEASE HOLDER EPOCH EXPIRES",
		"node node-a#1 - 2030-01-02T03:04:05Z",
		"node node-c#3 - 2030-01-02T02:04:05Z EXPIRED",
		"coordinator payment node-a#1 7 2030-01-02T03:04:05Z",
	}
	if err != nil || strings.Join(lines(out), "\n") != strings.Join(want, "\n") {
		t.Fatalf("leases: %v\n%s", err, out)
	}
	out, err = runCmd("leases", "--json", "--admin", url)
	var l admin.Leases
	if err != nil || json.Unmarshal([]byte(out), &l) != nil || len(l.Nodes) != 2 || l.Coordinators[0].Epoch != 7 {
		t.Fatalf("leases --json: %v\n%s", err, out)
	}
}

func TestRebalanceAndDown(t *testing.T) {
	f, url := startFakeNode(t)
	if _, err := runCmd("rebalance", "payment", "2", "--admin", url); !strings.Contains(fmt.Sprint(err), "--token") {
		t.Fatalf("rebalance without a token: %v", err)
	}
	if _, err := runCmd("down", "node-c", "3", "--admin", url, "--token", "wrong"); err == nil {
		t.Fatal("down with a wrong token succeeded")
	}
	if len(f.moved)+len(f.downed) != 0 {
		t.Fatalf("refused actions acted: %v %v", f.moved, f.downed)
	}
	out, err := runCmd("rebalance", "payment", "2", "--admin", url, "--token", "tok")
	if err != nil || out != "shard 2 of payment is handed off and placed again\n" {
		t.Fatalf("rebalance: %q %v", out, err)
	}
	_, err = runCmd("rebalance", "payment", "99", "--admin", url, "--token", "tok")
	var ae *APIError
	if !errors.As(err, &ae) || ae.Code != admin.CodeUnknownShard || exitCode(err) != 1 {
		t.Fatalf("rebalance of an unknown shard: %v", err)
	}
	out, err = runCmd("down", "--json", "node-c", "3", "--admin", url, "--token", "tok")
	if err != nil || !strings.Contains(out, `"accepted"`) {
		t.Fatalf("down --json: %q %v", out, err)
	}
	_, err = runCmd("down", "node-z", "1", "--admin", url, "--token", "tok")
	if !errors.As(err, &ae) || ae.Code != admin.CodeUnknownNode {
		t.Fatalf("down of an unknown node: %v", err)
	}
	if len(f.moved) != 1 || f.moved[0] != "payment/2" || len(f.downed) != 1 || f.downed[0] != (cluster.UniqueAddress{Node: "node-c", Incarnation: 3}) {
		t.Fatalf("acted: moved %v, downed %v", f.moved, f.downed)
	}
}
