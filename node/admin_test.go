package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/node"
	"github.com/shoal-dev/shoal/node/admin"
	"github.com/shoal-dev/shoal/sharding"
)

const adminToken = "test-token"

func withAdmin(cfg *node.Config) {
	cfg.AdminAddr = "127.0.0.1:0"
	cfg.AdminToken = adminToken
}

// adminCall sends one request to a node's admin API and decodes a 2xx
// answer into out (when not nil); it returns the status.
func adminCall(t *testing.T, n *testNode, method, path, body string, out any) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, "http://"+n.AdminAddr()+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if method == http.MethodPost {
		req.Header.Set("Authorization", "Bearer "+adminToken)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if out != nil && resp.StatusCode/100 == 2 {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: decode %q: %v", method, path, data, err)
		}
	}
	return resp.StatusCode
}

func shardsOf(t *testing.T, n *testNode) admin.Shards {
	t.Helper()
	var st admin.Shards
	if code := adminCall(t, n, "GET", "/admin/v1/shards/Ops", "", &st); code != 200 {
		t.Fatalf("GET shards: %d", code)
	}
	return st
}

// Three nodes with the admin API: members, types, the shard map and the
// leases as the API reports them; a shard rebalanced through the API
// moves (its entity keeps its state); a node asked through another's API
// leaves gracefully.
func TestAdminAPIOnThreeNodes(t *testing.T) {
	dsn := pg.MigratedDSN(t)
	// Every shard starts on node-1 (alone at first); no rebalance round
	// runs by itself, so only the API's rebalance moves a shard.
	settings := sharding.Settings{NumberOfShards: 6, RebalanceInterval: time.Hour}
	n1 := startNodeWith(t, dsn, "node-1", nil, settings, withAdmin)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var ids []string
	for i := range 12 {
		id := fmt.Sprintf("ops-%02d", i)
		ids = append(ids, id)
		if err := apply(ctx, n1.ops, id, "p1-"+id); err != nil {
			t.Fatal(err)
		}
	}
	seeds := []string{n1.GossipAddr()}
	n2 := startNodeWith(t, dsn, "node-2", seeds, settings, withAdmin)
	n3 := startNodeWith(t, dsn, "node-3", seeds, settings, withAdmin)
	nodes := []*testNode{n1, n2, n3}
	awaitUp(t, nodes)

	var members admin.Members
	if code := adminCall(t, n2, "GET", "/admin/v1/members", "", &members); code != 200 {
		t.Fatalf("GET members: %d", code)
	}
	if members.Self != n2.Self().String() || members.Oldest != n1.Self().String() || len(members.Members) != 3 {
		t.Fatalf("members %+v", members)
	}
	for _, m := range members.Members {
		if m.Status != "Up" || m.GossipAddr == "" || m.TransportAddr == "" || m.ID != fmt.Sprintf("%s#%d", m.Node, m.Incarnation) {
			t.Fatalf("member %+v", m)
		}
	}
	var types struct{ Types []string }
	if code := adminCall(t, n3, "GET", "/admin/v1/types", "", &types); code != 200 || len(types.Types) != 1 || types.Types[0] != "Ops" {
		t.Fatalf("GET types: %d %v", code, types)
	}

	var st admin.Shards
	eventually(t, "node-3 registered with the coordinator", func() error {
		if st = shardsOf(t, n3); st.Coordinator.Epoch == 0 {
			return fmt.Errorf("shards %+v", st)
		}
		return nil
	})
	if st.Coordinator.Node != "node-1" || st.Coordinator.Incarnation != n1.Self().Incarnation || st.Coordinator.Epoch == 0 || len(st.Nodes) != 3 {
		t.Fatalf("shards %+v", st)
	}
	total := 0
	for _, sh := range st.Shards {
		if sh.Node != n1.Self().String() || sh.State != admin.StateActive {
			t.Fatalf("shard %+v, want every shard active on node-1", sh)
		}
		total += sh.Entities
	}
	if total != len(ids) {
		t.Fatalf("%d entities in the map, want %d: %+v", total, len(ids), st.Shards)
	}

	var leases admin.Leases
	if code := adminCall(t, n2, "GET", "/admin/v1/leases", "", &leases); code != 200 {
		t.Fatalf("GET leases: %d", code)
	}
	live := map[string]bool{}
	for _, l := range leases.Nodes {
		live[fmt.Sprintf("%s#%d", l.Node, l.Incarnation)] = !l.Expired
	}
	for _, n := range nodes {
		if !live[n.Self().String()] {
			t.Fatalf("leases %+v lack a live lease of %s", leases, n.Self())
		}
	}
	if len(leases.Coordinators) != 1 || leases.Coordinators[0].Type != "Ops" || leases.Coordinators[0].Holder != n1.Self().String() ||
		leases.Coordinators[0].Epoch != st.Coordinator.Epoch {
		t.Fatalf("coordinator leases %+v, want Ops held by %s at epoch %d", leases.Coordinators, n1.Self(), st.Coordinator.Epoch)
	}

	// Rebalance one shard through node-2's API: node-1 holds every shard,
	// so the strategy places it on node-2 or node-3.
	moved := st.Shards[0]
	if code := adminCall(t, n2, "POST", "/admin/v1/shards/Ops/"+moved.ID+"/rebalance", "", nil); code != 202 {
		t.Fatalf("rebalance: %d", code)
	}
	var home string
	eventually(t, "the rebalanced shard runs elsewhere", func() error {
		for _, sh := range shardsOf(t, n1).Shards {
			if sh.ID == moved.ID && sh.State == admin.StateActive && sh.Node != "" && sh.Node != n1.Self().String() {
				home = sh.Node
				return nil
			}
		}
		return fmt.Errorf("shard %s not moved yet", moved.ID)
	})
	for _, id := range ids {
		if n1.ops.ShardID(id) != moved.ID {
			continue
		}
		s, err := read(ctx, n1.ops, id)
		if err != nil {
			t.Fatal(err)
		}
		if s.Node == "node-1" || !strings.HasPrefix(home, s.Node+"#") || len(s.Ops) != 1 || s.Ops[0] != "p1-"+id {
			t.Fatalf("%s after the rebalance to %s: %+v", id, home, s)
		}
	}

	// node-3 leaves because node-1's API asked it to.
	if code := adminCall(t, n1, "POST", "/admin/v1/leave", `{"node":"node-3"}`, nil); code != 202 {
		t.Fatalf("leave: %d", code)
	}
	select {
	case <-n3.Done():
	case <-time.After(60 * time.Second):
		t.Fatal("node-3 did not leave within 60 s")
	}
	eventually(t, "node-1 sees node-3 gone", func() error {
		var ms admin.Members
		adminCall(t, n1, "GET", "/admin/v1/members", "", &ms)
		for _, m := range ms.Members {
			if m.Node == "node-3" && m.Status != "Down" {
				return fmt.Errorf("node-3 is %s", m.Status)
			}
		}
		return nil
	})
	// Its shards live on: every entity answers with its state.
	for _, id := range ids {
		if s, err := read(ctx, n1.ops, id); err != nil || len(s.Ops) != 1 || s.Node == "node-3" {
			t.Fatalf("%s after node-3 left: %+v %v", id, s, err)
		}
	}
	// An unknown node is refused.
	if code := adminCall(t, n1, "POST", "/admin/v1/leave", `{"node":"node-9"}`, nil); code != 404 {
		t.Fatalf("leave of an unknown node: %d", code)
	}
}
