package node_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/journal"
	"github.com/shoal-dev/shoal/node/admin"
	"github.com/shoal-dev/shoal/projection"
	projectionpg "github.com/shoal-dev/shoal/projection/postgres"
	"github.com/shoal-dev/shoal/projection/projectiontest"
	"github.com/shoal-dev/shoal/projection/sharded"
	"github.com/shoal-dev/shoal/sharding"
)

type Counted struct{ N int }

// Two nodes run a projection with its offsets in Postgres; any node's
// admin API lists every instance with the node running it, and an
// operation asked of one node applies to an instance running on the
// other.
func TestProjectionsOperatedThroughAnyNode(t *testing.T) {
	dsn := pg.MigratedDSN(t)
	settings := sharding.Settings{NumberOfShards: 6}
	n1 := startNodeWith(t, dsn, "node-1", nil, settings, withAdmin)
	n2 := startNodeWith(t, dsn, "node-2", []string{n1.GossipAddr()}, settings, withAdmin)
	awaitUp(t, []*testNode{n1, n2})

	reg := codec.NewRegistry()
	codec.MustRegister[Counted](reg, "counted")
	src := projectiontest.NewSource()
	var mu sync.Mutex
	seen := map[string]bool{} // pid#seq
	add := func(pid string, seq uint64) {
		m, payload, err := reg.Encode(Counted{N: int(seq)})
		if err != nil {
			t.Fatal(err)
		}
		src.Append(journal.Event{PersistenceID: "Order|" + pid, SeqNr: seq, Manifest: m, Payload: payload, Timestamp: time.Now(), WriterID: "w"})
	}
	for i := range 20 {
		add(fmt.Sprintf("o%d", i), 1)
	}
	for _, n := range []*testNode{n1, n2} {
		store := projectionpg.NewStore(n.Pool())
		_, err := n.RunProjection(sharded.Config{
			Name: "orders", Instances: 4, Store: store, KeepAliveInterval: 500 * time.Millisecond, RestartBackoff: 500 * time.Millisecond,
			New: func(slices journal.SliceRange, holder string) (*projection.Projection, error) {
				return projection.New(projection.Config{
					Name: "orders", EntityType: "Order", Slices: slices, Source: src, Codec: reg,
					Settings: projection.Settings{Holder: holder, LeaseTTL: 3 * time.Second, SaveInterval: 100 * time.Millisecond},
				}, projection.AtLeastOnce(store, func(_ context.Context, env projection.Envelope[Counted]) error {
					mu.Lock()
					defer mu.Unlock()
					seen[fmt.Sprintf("%s#%d", env.PersistenceID, env.SeqNr)] = true
					return nil
				}, nil))
			},
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := n1.RunProjection(sharded.Config{Name: "orders", Instances: 4}); err == nil {
		t.Fatal("a second projection of one name was started")
	}

	// Every instance runs, on one of the two nodes, as node-1 lists it.
	var list admin.ProjectionList
	eventually(t, "every instance runs and is caught up", func() error {
		if code := adminCall(t, n1, "GET", "/admin/v1/projections", "", &list); code != 200 {
			return fmt.Errorf("GET projections: %d", code)
		}
		if len(list.Projections) != 1 || len(list.Projections[0].Instances) != 4 {
			return fmt.Errorf("projections %+v", list)
		}
		for _, in := range list.Projections[0].Instances {
			if in.Node == "" || in.ReportedAt == nil || in.LagEvents == nil || *in.LagEvents != 0 {
				return fmt.Errorf("instance %+v", in)
			}
		}
		return nil
	})
	// An instance on node-2, paused through node-1's API.
	var target admin.ProjectionInstance
	eventually(t, "an instance runs on node-2", func() error {
		adminCall(t, n1, "GET", "/admin/v1/projections", "", &list)
		for _, in := range list.Projections[0].Instances {
			if strings.HasPrefix(in.Node, "node-2") {
				target = in
				return nil
			}
		}
		return fmt.Errorf("none on node-2: %+v", list.Projections[0].Instances)
	})
	var req admin.ProjectionRequest
	if code := adminCall(t, n1, "POST", "/admin/v1/projections/orders/"+target.Instance+"/pause", "", &req); code != 202 || req.ID == 0 {
		t.Fatalf("pause through node-1: %d %+v", code, req)
	}
	eventually(t, "the instance on node-2 is paused", func() error {
		for _, p := range n2.Projections() {
			for _, st := range p.Local() {
				if fmt.Sprintf("%d-%d", st.Instance.Slices.Min, st.Instance.Slices.Max) == target.Instance && st.Paused {
					return nil
				}
			}
		}
		return fmt.Errorf("not paused on node-2")
	})
	var after admin.ProjectionList
	eventually(t, "node-2's API shows it paused", func() error {
		adminCall(t, n2, "GET", "/admin/v1/projections", "", &after)
		for _, in := range after.Projections[0].Instances {
			if in.Instance == target.Instance && in.Paused && len(in.Pending) == 0 {
				return nil
			}
		}
		return fmt.Errorf("projections %+v", after)
	})
	if code := adminCall(t, n2, "POST", "/admin/v1/projections/orders/"+target.Instance+"/reset", `{"offset":"bogus"}`, nil); code != 400 {
		t.Errorf("reset to a bogus offset: %d, want 400", code)
	}
	if code := adminCall(t, n2, "POST", "/admin/v1/projections/nope/0/pause", "", nil); code != 404 {
		t.Errorf("pause of an unknown projection: %d, want 404", code)
	}
	if code := adminCall(t, n2, "POST", "/admin/v1/projections/orders/9/pause", "", nil); code != 404 {
		t.Errorf("pause of an unknown instance: %d, want 404", code)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 20 {
		t.Errorf("handled %d events, want 20", len(seen))
	}
}
