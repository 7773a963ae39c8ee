package peers

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tochemey/goakt/v4/actor"
	"github.com/tochemey/goakt/v4/log"
	"github.com/tochemey/goakt/v4/remote"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// goaktTarget counts told Empty messages and answers an asked BoolValue
// (empty on the wire too) with Empty.
type goaktTarget struct{ arrived *atomic.Int64 }

func (*goaktTarget) PreStart(*actor.Context) error { return nil }
func (*goaktTarget) PostStop(*actor.Context) error { return nil }
func (t *goaktTarget) Receive(ctx *actor.ReceiveContext) {
	switch ctx.Message().(type) {
	case *emptypb.Empty:
		t.arrived.Add(1)
	case *wrapperspb.BoolValue:
		ctx.Response(&emptypb.Empty{})
	default:
		ctx.Unhandled()
	}
}

// goaktPair is two GoAkt actor systems with remoting on loopback TCP,
// compression off (Shoal's frames are not compressed either), the
// targets spawned on the second and looked up from the first.
type goaktPair struct {
	systems [2]actor.ActorSystem
	arrived atomic.Int64
	pids    []*actor.PID
}

func newGoAktPair(tb testing.TB, targets int) *goaktPair {
	tb.Helper()
	ctx := context.Background()
	g := &goaktPair{}
	var ports [2]int
	for i := range g.systems {
		ports[i] = freePort(tb)
		sys, err := actor.NewActorSystem(fmt.Sprintf("goakt-%d", i+1),
			actor.WithLogger(log.DiscardLogger),
			actor.WithRemote(remote.NewConfig("127.0.0.1", ports[i], remote.WithCompression(remote.NoCompression))))
		if err != nil {
			tb.Fatal(err)
		}
		if err := sys.Start(ctx); err != nil {
			tb.Fatal(err)
		}
		g.systems[i] = sys
	}
	for i := range targets {
		name := fmt.Sprintf("t%d", i)
		if _, err := g.systems[1].Spawn(ctx, name, &goaktTarget{arrived: &g.arrived}); err != nil {
			tb.Fatal(err)
		}
		pid, err := g.systems[0].NoSender().RemoteLookup(ctx, "127.0.0.1", ports[1], name)
		if err != nil {
			tb.Fatal(err)
		}
		g.pids = append(g.pids, pid)
	}
	return g
}

func (g *goaktPair) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, sys := range g.systems {
		_ = sys.Stop(ctx)
	}
}

func (g *goaktPair) peer() peer {
	ctx := context.Background()
	return peer{
		arrived: &g.arrived,
		tell: func(i int) error {
			return actor.Tell(ctx, g.pids[i%len(g.pids)], &emptypb.Empty{})
		},
		ask: func(ctx context.Context, i int) error {
			_, err := actor.Ask(ctx, g.pids[i%len(g.pids)], &wrapperspb.BoolValue{}, 10*time.Second)
			return err
		},
	}
}

// freePort returns a loopback port that was free a moment ago.
func freePort(tb testing.TB) int {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
