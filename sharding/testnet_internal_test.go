package sharding

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/cluster/inproc"
	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/sharding/internal/protocol"
	"github.com/shoal-dev/shoal/sharding/internal/wire"
	"github.com/shoal-dev/shoal/timers"
)

// newTestNet returns a cluster/inproc network for the package's own
// multi-node tests, its codec sharding's wire alone, delivered by its Run
// (on the bubble's clock inside a synctest bubble) until the test's last
// cleanup.
func newTestNet(t testing.TB) *inproc.Network {
	t.Helper()
	reg := codec.NewRegistry()
	if err := wire.RegisterTypes(reg); err != nil {
		t.Fatal(err)
	}
	// A test may send a burst larger than a link's default bound from
	// one goroutine before Run delivers any of it. What the network cannot
	// decode is the test's to check, not a log line's.
	net, err := inproc.NewNetwork(inproc.Config{Codec: reg, Clock: timers.Real{}, QueueCapacity: 1 << 20,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = net.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return net
}

// startOn starts sharding on sys over net, as a node does: its transport
// joins net as cfg.Membership's self and hands what arrives to Receive.
func startOn(t testing.TB, net *inproc.Network, sys *entity.System, cfg Config) *Sharding {
	t.Helper()
	var sh atomic.Pointer[Sharding]
	ct, err := net.Join(cfg.Membership.Self(), func(from cluster.UniqueAddress, m any) {
		if s := sh.Load(); s != nil {
			s.Receive(from, m)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Transport = ct
	s, err := New(sys, cfg)
	if err != nil {
		t.Fatal(err)
	}
	sh.Store(s)
	return s
}

// sentProtocol is the protocol message inside what a node sent on the
// network, and the address it was for; ok is false for anything else (a
// reply to an ask).
func sentProtocol(to cluster.UniqueAddress, m any) (at Address, msg Message, ok bool) {
	env, isEnv := m.(wire.Envelope)
	if !isEnv {
		return Address{}, nil, false
	}
	msg, ok = env.Msg.(protocol.Message)
	return Address{Node: to, Type: env.To.Type, Coordinator: env.To.Coordinator}, msg, ok
}

// proxyPair starts, in the caller's bubble, two nodes on a network of
// their own: b hosts the Echo entities that create makes, and a, without
// their role, is a proxy that forwards every message to b. Both
// terminate with the test.
func proxyPair(t *testing.T, settings Settings, create func(entity.Context[string]) entity.Behavior[string]) (net *inproc.Network, a *Region[string]) {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	members := newTestCluster()
	net = newTestNet(t)
	reg := codec.NewRegistry()
	codec.MustRegister[string](reg, "test.string")
	start := func(name string, roles ...string) *Region[string] {
		sys, err := entity.NewSystem(entity.Config{NodeID: name, Logger: quiet, Codec: reg})
		if err != nil {
			t.Fatal(err)
		}
		s := startOn(t, net, sys, Config{Membership: members.Join(name, roles...)})
		t.Cleanup(s.Terminate)
		r, err := Init(s, Entity[string]{Key: entity.NewTypeKey[string]("Echo"), Create: create, Role: "host", Settings: settings})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	start("b", "host")
	return net, start("a")
}
