package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/internal/browsertest"
	"github.com/shoal-dev/shoal/node/admin"
	"github.com/shoal-dev/shoal/sharding"
)

// The shard-map page in a real headless browser against three real nodes
// and the real admin API: it shows every shard on node-1, then follows a
// shard that the API rebalances to another node.
func TestShardMapPageFollowsARebalance(t *testing.T) {
	dsn := pg.MigratedDSN(t)
	// Every shard starts on node-1 (alone at first); no rebalance round
	// runs by itself, so only the API's rebalance moves a shard.
	settings := sharding.Settings{NumberOfShards: 6, RebalanceInterval: time.Hour}
	n1 := startNodeWith(t, dsn, "node-1", nil, settings, withAdmin)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := range 12 {
		id := fmt.Sprintf("ops-%02d", i)
		if err := apply(ctx, n1.ops, id, "p1-"+id); err != nil {
			t.Fatal(err)
		}
	}
	seeds := []string{n1.GossipAddr()}
	n2 := startNodeWith(t, dsn, "node-2", seeds, settings, withAdmin)
	n3 := startNodeWith(t, dsn, "node-3", seeds, settings, withAdmin)
	awaitUp(t, []*testNode{n1, n2, n3})
	var st admin.Shards
	eventually(t, "the coordinator knows all three nodes", func() error {
		if st = shardsOf(t, n2); st.Coordinator.Epoch == 0 || len(st.Nodes) != 3 {
			return fmt.Errorf("shards %+v", st)
		}
		return nil
	})

	b := browsertest.Start(t)
	tab := b.Tab()
	browsertest.Load(t, tab, "http://"+n2.AdminAddr()+"/admin/map/")

	home := n1.Self().String()
	columns, _ := json.Marshal(st.Nodes)
	browsertest.WaitFor(t, tab, "every shard active under node-1's column", fmt.Sprintf(`(() => {
		const home = %q, columns = %q, shards = %d, epoch = %q;
		const cells = [...document.querySelectorAll('#map .shard')];
		return document.getElementById('connection').dataset.state === 'live' &&
			document.getElementById('map').dataset.type === 'Ops' &&
			JSON.stringify([...document.querySelectorAll('#map > section.node')].map((c) => c.dataset.node)) === columns &&
			cells.length === shards &&
			cells.every((c) => c.dataset.state === 'active' && c.closest('section.node').dataset.node === home) &&
			document.getElementById('entity-total').textContent === '12' &&
			document.getElementById('coordinator').dataset.node === home &&
			document.getElementById('epoch').dataset.epoch === epoch;
	})()`, home, columns, len(st.Shards), fmt.Sprint(st.Coordinator.Epoch)))

	moved := st.Shards[0].ID
	if code := adminCall(t, n2, "POST", "/admin/v1/shards/Ops/"+moved+"/rebalance", "", nil); code != 202 {
		t.Fatalf("rebalance: %d", code)
	}
	browsertest.WaitFor(t, tab, "the rebalanced shard active under another node's column", fmt.Sprintf(`(() => {
		const c = document.querySelector('#map .shard[data-shard=%q]');
		return c !== null && c.dataset.state === 'active' && c.dataset.node !== %q &&
			c.closest('section.node').dataset.node === c.dataset.node;
	})()`, moved, home))
	browsertest.Screenshot(t, tab, "shardmap-three-nodes.png")

	// The page shows where the API says the shard is.
	shown := browsertest.Eval[string](t, tab, fmt.Sprintf(`document.querySelector('#map .shard[data-shard=%q]').dataset.node`, moved))
	for _, sh := range shardsOf(t, n1).Shards {
		if sh.ID == moved && (sh.Node != shown || sh.State != admin.StateActive) {
			t.Fatalf("the page shows shard %s on %s, the API says %+v", moved, shown, sh)
		}
	}
}
