package memberlist_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/shoal-dev/shoal/cluster/memberlist"
)

// A node's life: listen, bootstrap a cluster or join one through seeds,
// read the view, and leave gracefully: Leaving first, hand the work off,
// then Leave. Two nodes on loopback.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := func(id string) *memberlist.Membership {
		m, err := memberlist.New(memberlist.Config{
			NodeID: id, Incarnation: 1, Endpoint: "127.0.0.1:7355", Roles: []string{"shard"},
			BindAddr: "127.0.0.1", BindPort: 0, ClusterName: "payments",
			SecretKey: []byte("0123456789abcdef"), Timing: memberlist.FastTiming(),
		})
		if err != nil {
			log.Fatal(err)
		}
		return m
	}

	first := start("node-1")
	if err := first.Bootstrap(ctx); err != nil { // the first node of a new cluster
		log.Fatal(err)
	}
	second := start("node-2")
	if err := second.Join(ctx, []string{first.Addr()}); err != nil {
		log.Fatal(err) // memberlist.ErrNoSeedReachable: no seed answered
	}
	for _, m := range second.View().Members() {
		fmt.Println(m.Address, m.Status)
	}

	// … serve; then shut down gracefully:
	for _, m := range []*memberlist.Membership{second, first} {
		_ = m.SetLeaving(ctx) // no longer a candidate for oldest
		// hand shards off here
		if err := m.Leave(ctx); err != nil {
			log.Print(err)
		}
	}
	// Output:
	// node-1#1 Up
	// node-2#1 Up
}
