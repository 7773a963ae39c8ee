package peers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/cluster/tcp"
	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/sharding"
)

// The Shoal side: an entity type whose commands are an empty tell and a
// ping answered with an empty reply.
type command interface{ isCommand() }

// Empty is the told message: no fields.
type Empty struct{}

// Ping asks for a Pong.
type Ping struct{ ReplyTo entity.ReplyTo[Pong] }

// Pong is the empty reply.
type Pong struct{}

func (Empty) isCommand() {}
func (Ping) isCommand()  {}

var targetKey = entity.NewTypeKey[command]("Target")

func newCodec() *codec.Registry {
	reg := codec.NewRegistry()
	codec.MustRegister[Empty](reg, "peers.Empty")
	codec.MustRegister[Ping](reg, "peers.Ping")
	codec.MustRegister[Pong](reg, "peers.Pong")
	return reg
}

// target counts Empty in arrived and answers Ping.
func target(arrived *atomic.Int64) func(entity.Context[command]) entity.Behavior[command] {
	return func(entity.Context[command]) entity.Behavior[command] {
		return entity.Receive(func(ctx entity.Context[command], c command) entity.Behavior[command] {
			switch c := c.(type) {
			case Empty:
				arrived.Add(1)
			case Ping:
				_ = entity.Reply(ctx, c.ReplyTo, Pong{})
			}
			return entity.Same[command]()
		})
	}
}

// shoalNode is one Shoal node as node.Node wires it, without its stores,
// leases and gossip: the entity runtime, sharding over cluster/tcp on
// loopback.
type shoalNode struct {
	self   cluster.UniqueAddress
	sys    *entity.System
	net    *tcp.Transport
	sh     *sharding.Sharding
	region *sharding.Region[command]
}

// shoalPair is two Shoal nodes on loopback TCP in this process, the target
// entities of both told from the first, and on the first also direct
// entity cells (no sharding) for the local baseline.
type shoalPair struct {
	nodes   [2]*shoalNode
	arrived atomic.Int64
	// remote: entities hosted by the second node; local: by the first;
	// direct: cells spawned on the first outside sharding.
	remote, local []sharding.EntityRef[command]
	direct        []*entity.Cell[command]
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// newShoalPair starts the two nodes and finds targets entities hosted by
// each.
func newShoalPair(tb testing.TB, targets int) *shoalPair {
	tb.Helper()
	p := &shoalPair{}
	var lns [2]net.Listener
	var members []cluster.Member
	for i := range lns {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		lns[i] = ln
		members = append(members, cluster.Member{
			Address:  cluster.UniqueAddress{Node: fmt.Sprintf("shoal-%d", i+1), Incarnation: 1},
			Endpoint: ln.Addr().String(), Status: cluster.Up, JoinOrder: uint64(i + 1),
		})
	}
	view, err := cluster.NewView(members...)
	if err != nil {
		tb.Fatal(err)
	}
	for i, m := range members {
		n := &shoalNode{self: m.Address}
		reg := newCodec()
		lm := cluster.NewLocalMembership(m.Address, view)
		// The transport starts before sharding: its handler reaches
		// sharding once New has returned.
		var inbound atomic.Pointer[sharding.Sharding]
		if n.net, err = tcp.Listen(tcp.Config{
			Self: m.Address, Codec: reg, Membership: lm,
			Handler: func(from cluster.UniqueAddress, msg any) {
				if sh := inbound.Load(); sh != nil {
					sh.Receive(from, msg)
				}
			},
			Listener: lns[i], ClusterName: "peers", Logger: quiet(),
		}); err != nil {
			tb.Fatal(err)
		}
		// Replies to the other node take the cluster transport, which
		// sharding.New attaches as the runtime's reply route.
		if n.sys, err = entity.NewSystem(entity.Config{
			NodeID: m.Address.Node, Incarnation: m.Address.Incarnation, Codec: reg, Logger: quiet(),
		}); err != nil {
			tb.Fatal(err)
		}
		if n.sh, err = sharding.New(n.sys, sharding.Config{Transport: n.net, Membership: lm, Logger: quiet()}); err != nil {
			tb.Fatal(err)
		}
		inbound.Store(n.sh)
		if n.region, err = sharding.Init(n.sh, sharding.Entity[command]{
			Key: targetKey, Create: target(&p.arrived),
			Settings: sharding.Settings{NumberOfShards: 4 * targets, MinMembers: 2},
		}); err != nil {
			tb.Fatal(err)
		}
		p.nodes[i] = n
	}
	first, second := p.nodes[0], p.nodes[1]
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for k := 0; len(p.remote) < targets || len(p.local) < targets; k++ {
		if k > 100*targets {
			tb.Fatalf("found %d remote and %d local targets in %d entities", len(p.remote), len(p.local), k)
		}
		ref := first.region.EntityRefFor(fmt.Sprintf("t%d", k))
		if _, err := entity.Ask(ctx, ref, ping); err != nil {
			tb.Fatalf("ping %s: %v", ref.EntityID(), err)
		}
		// The ping answered, so the entity's shard is hosted on one node.
		shard := first.region.ShardID(ref.EntityID())
		_, onSecond := second.region.State().Shards[shard]
		_, onFirst := first.region.State().Shards[shard]
		switch {
		case onSecond:
			if len(p.remote) < targets {
				p.remote = append(p.remote, ref)
			}
		case onFirst:
			if len(p.local) < targets {
				p.local = append(p.local, ref)
			}
		}
	}
	props := &entity.Props[command]{Key: entity.NewTypeKey[command]("Direct"), Create: target(&p.arrived)}
	for i := range targets {
		p.direct = append(p.direct, entity.Spawn(first.sys, props, fmt.Sprintf("d%d", i)))
	}
	return p
}

func ping(to entity.ReplyTo[Pong]) command { return Ping{ReplyTo: to} }

func (p *shoalPair) close() {
	for _, n := range p.nodes {
		n.sh.Terminate()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = n.net.Close(ctx)
		cancel()
	}
}

// tellTo tells Empty through refs, retrying while a queue or buffer on
// the way is full (back-pressure, not failure).
func tellTo[R entity.Ref[command]](refs []R) func(i int) error {
	return func(i int) error {
		for {
			err := refs[i%len(refs)].Tell(Empty{})
			if !errors.Is(err, cluster.ErrQueueFull) && !errors.Is(err, sharding.ErrBufferFull) {
				return err
			}
			pause()
		}
	}
}

// peer returns the pair as a peer: the remote targets.
func (p *shoalPair) peer() peer {
	return peer{
		arrived: &p.arrived,
		tell:    tellTo(p.remote),
		ask: func(ctx context.Context, i int) error {
			_, err := entity.Ask(ctx, p.remote[i%len(p.remote)], ping)
			return err
		},
	}
}
