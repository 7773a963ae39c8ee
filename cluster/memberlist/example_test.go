package memberlist_test

import (
	"context"
	"log"
	"time"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/cluster/memberlist"
)

// A node's life: listen, join through seeds, follow the views, and leave
// gracefully: Leaving first, hand the work off, then Leave.
func Example() {
	ctx := context.Background()
	m, err := memberlist.New(memberlist.Config{
		NodeID: "node-1", Endpoint: "127.0.0.1:7355", Roles: []string{"shard"},
		BindAddr: "127.0.0.1", BindPort: 0, ClusterName: "payments",
		SecretKey: []byte("0123456789abcdef"),
	})
	if err != nil {
		log.Fatal(err)
	}
	view, cancel := m.Subscribe(func(c cluster.Change) {
		for _, e := range c.Events {
			log.Printf("%s %s", e.Kind, e.Member)
		}
	})
	defer cancel()
	log.Printf("starting with %d member(s)", view.Len())

	if err := m.Join(ctx, []string{"127.0.0.1:7946"}); err != nil {
		log.Fatal(err) // memberlist.ErrNoSeedReachable: no seed answered
	}

	// … serve; then shut down gracefully:
	leaveCtx, done := context.WithTimeout(ctx, 10*time.Second)
	defer done()
	_ = m.SetLeaving(leaveCtx) // no longer a candidate for oldest
	// hand shards off here
	if err := m.Leave(leaveCtx); err != nil {
		log.Print(err)
	}
}
