package tcp_test

import (
	"errors"
	"testing"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/cluster/tcp"
)

func TestMembershipResolver(t *testing.T) {
	view, err := cluster.NewView(
		cluster.Member{Address: addr("a", 1), Endpoint: "127.0.0.1:7001", Status: cluster.Up},
		cluster.Member{Address: addr("b", 2), Endpoint: "127.0.0.1:7002", Status: cluster.Up},
		cluster.Member{Address: addr("c", 1), Endpoint: "127.0.0.1:7003", Status: cluster.Down},
	)
	if err != nil {
		t.Fatal(err)
	}
	resolve := tcp.MembershipResolver(cluster.NewLocalMembership(addr("a", 1), view))
	for _, tc := range []struct {
		to       cluster.UniqueAddress
		endpoint string
		err      error
	}{
		{addr("a", 1), "127.0.0.1:7001", nil},
		{addr("b", 2), "127.0.0.1:7002", nil},
		{addr("b", 1), "", cluster.ErrStaleIncarnation}, // replaced by b#2
		{addr("c", 1), "", cluster.ErrStaleIncarnation}, // down
		{addr("b", 3), "", cluster.ErrUnreachable},      // not yet in the view
		{addr("d", 1), "", cluster.ErrUnreachable},
	} {
		endpoint, err := resolve(tc.to)
		if endpoint != tc.endpoint || !errors.Is(err, tc.err) || (tc.err == nil && err != nil) {
			t.Errorf("resolve(%s) = %q, %v; want %q, %v", tc.to, endpoint, err, tc.endpoint, tc.err)
		}
	}
}

func TestListenRefusesAnIncompleteConfig(t *testing.T) {
	valid := func() tcp.Config {
		return tcp.Config{
			Self: addr("a", 1), Codec: pingRegistry(), Handler: func(cluster.UniqueAddress, any) {},
			Resolve: newDirectory().resolve, ListenAddr: "127.0.0.1:0",
		}
	}
	for name, breakIt := range map[string]func(*tcp.Config){
		"no node id":        func(c *tcp.Config) { c.Self = cluster.UniqueAddress{} },
		"no codec":          func(c *tcp.Config) { c.Codec = nil },
		"no handler":        func(c *tcp.Config) { c.Handler = nil },
		"no resolver":       func(c *tcp.Config) { c.Resolve = nil },
		"nowhere to listen": func(c *tcp.Config) { c.ListenAddr = "" },
	} {
		cfg := valid()
		breakIt(&cfg)
		if _, err := tcp.Listen(cfg); !errors.Is(err, cluster.ErrInvalidConfig) {
			t.Errorf("%s: Listen = %v, want ErrInvalidConfig", name, err)
		}
	}
}
