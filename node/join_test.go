package node_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/cluster/memberlist"
	"github.com/shoal-dev/shoal/node"
	"github.com/shoal-dev/shoal/sharding"
)

// sees reports whether n sees every one of others Up.
func sees(n *testNode, others ...*node.Node) error {
	for _, o := range others {
		m, ok := n.Membership().View().Member(o.Self())
		if !ok || m.Status != cluster.Up {
			return fmt.Errorf("%s does not see %s Up (%v)", n.Self(), o.Self(), m.Status)
		}
	}
	return nil
}

// A node joins through any live member among its seeds: the first seed
// (the node that started the cluster) is gone, and the next one lets it in.
func TestNodeJoinsThroughAnyLiveSeed(t *testing.T) {
	stores := node.NewMemoryStores()
	memory := func(c *node.Config) { c.Memory = stores }
	settings := sharding.Settings{NumberOfShards: 10}
	a := startNodeWith(t, "", "join-a", nil, settings, memory)
	b := startNodeWith(t, "", "join-b", []string{a.GossipAddr()}, settings, memory)
	awaitUp(t, []*testNode{a, b})
	aAddr := a.GossipAddr()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.Shutdown(ctx); err != nil {
		t.Fatalf("a leaves: %v", err)
	}
	c := startNodeWith(t, "", "join-c", []string{aAddr, b.GossipAddr()}, settings, memory)
	eventually(t, "b and c see each other Up", func() error {
		return errors.Join(sees(c, b.Node, c.Node), sees(b, c.Node))
	})
}

// A node whose seeds all are down when it starts keeps trying them, with
// back-off, and joins once one comes up (within Config.JoinTimeout).
func TestNodeRetriesItsSeedsUntilOneComesUp(t *testing.T) {
	stores := node.NewMemoryStores()
	// The seed's address, answered by nobody until the seed starts there.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	seedAddr := l.Addr().String()
	l.Close()

	cfg := node.DefaultConfig("late-joiner")
	cfg.Memory = stores
	cfg.Seeds = []string{seedAddr}
	cfg.Timing = testTiming()
	cfg.Leases = testLeases() // the seed's
	cfg.Codec = newCodec()
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	cfg.JoinTimeout = 5 * time.Minute
	cfg.JoinRetryMin, cfg.JoinRetryMax = 10*time.Millisecond, 100*time.Millisecond
	type started struct {
		n   *node.Node
		err error
	}
	done := make(chan started, 1)
	go func() {
		n, err := node.Start(context.Background(), cfg)
		done <- started{n, err}
	}()

	// Started before its seed, the joiner is still trying when the seed comes up.
	select {
	case s := <-done:
		if s.n != nil {
			s.n.Kill()
		}
		t.Fatalf("Start returned before any seed answered: %v", s.err)
	case <-time.After(300 * time.Millisecond):
	}
	seed := startNodeWith(t, "", "seed", nil, sharding.Settings{NumberOfShards: 10}, func(c *node.Config) {
		c.Memory, c.GossipAddr = stores, seedAddr
	})
	var s started
	select {
	case s = <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("the joiner did not join within 2 min of its seed coming up")
	}
	if s.err != nil {
		t.Fatalf("start: %v", s.err)
	}
	t.Cleanup(s.n.Kill)
	joiner := &testNode{Node: s.n}
	eventually(t, "seed and joiner see each other Up", func() error {
		return errors.Join(sees(joiner, seed.Node), sees(seed, s.n))
	})
}

// With a JoinTimeout, a node whose seeds never answer gives up with the
// typed error once it has passed.
func TestNodeGivesUpItsSeedsAfterJoinTimeout(t *testing.T) {
	cfg := node.DefaultConfig("give-up")
	cfg.Memory = node.NewMemoryStores()
	cfg.Seeds = []string{"127.0.0.1:1"}
	cfg.Timing = testTiming()
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	cfg.JoinTimeout = 300 * time.Millisecond
	cfg.JoinRetryMin, cfg.JoinRetryMax = 10*time.Millisecond, 50*time.Millisecond
	n, err := node.Start(context.Background(), cfg)
	if n != nil {
		n.Kill()
	}
	if !errors.Is(err, memberlist.ErrNoSeedReachable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("start: %v, want ErrNoSeedReachable after the join timeout", err)
	}
}
