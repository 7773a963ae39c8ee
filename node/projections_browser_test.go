package node_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/internal/browsertest"
	"github.com/shoal-dev/shoal/journal"
	"github.com/shoal-dev/shoal/projection"
	projectionpg "github.com/shoal-dev/shoal/projection/postgres"
	"github.com/shoal-dev/shoal/projection/projectiontest"
	"github.com/shoal-dev/shoal/projection/sharded"
	"github.com/shoal-dev/shoal/sharding"
)

// The shard-map page's projections panel, in a real headless browser
// against a real node: it lists the instances with the node running them,
// and shows one paused through the admin API.
func TestShardMapPageListsProjections(t *testing.T) {
	dsn := pg.MigratedDSN(t)
	n1 := startNodeWith(t, dsn, "node-1", nil, sharding.Settings{NumberOfShards: 6}, withAdmin)
	awaitUp(t, []*testNode{n1})
	reg := codec.NewRegistry()
	codec.MustRegister[Counted](reg, "counted")
	src := projectiontest.NewSource()
	store := projectionpg.NewStore(n1.Pool())
	if _, err := n1.RunProjection(sharded.Config{
		Name: "orders", Instances: 2, Store: store, KeepAliveInterval: 500 * time.Millisecond,
		New: func(slices journal.SliceRange, holder string) (*projection.Projection, error) {
			return projection.New(projection.Config{
				Name: "orders", EntityType: "Order", Slices: slices, Source: src, Codec: reg,
				Settings: projection.Settings{Holder: holder, LeaseTTL: 3 * time.Second},
			}, projection.AtLeastOnce(store, func(context.Context, projection.Envelope[Counted]) error { return nil }, nil))
		},
	}); err != nil {
		t.Fatal(err)
	}

	b := browsertest.Start(t)
	tab := b.Tab()
	browsertest.Load(t, tab, "http://"+n1.AdminAddr()+"/admin/map/")
	browsertest.WaitFor(t, tab, "both instances listed as running on node-1", fmt.Sprintf(`(() => {
		const rows = [...document.querySelectorAll('#projections tr.projection')];
		return !document.getElementById('projections').hidden && rows.length === 2 &&
			rows.map((r) => r.dataset.instance).join(',') === '0-511,512-1023' &&
			rows.every((r) => r.dataset.projection === 'orders' && r.dataset.node === %q && r.dataset.paused === 'false');
	})()`, n1.Self().String()))

	if code := adminCall(t, n1, "POST", "/admin/v1/projections/orders/512-1023/pause", "", nil); code != 202 {
		t.Fatalf("pause: %d", code)
	}
	browsertest.WaitFor(t, tab, "the paused instance shown paused", `(() => {
		const r = document.querySelector('#projections tr.projection[data-instance="512-1023"]');
		return r !== null && r.dataset.paused === 'true';
	})()`)
	browsertest.Screenshot(t, tab, "shardmap-projections.png")
}
