package peers

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// protoPair is two protoactor-go actor systems with remoting (gRPC
// streams) on loopback TCP, the targets spawned on the second and
// addressed from the first by their PIDs.
type protoPair struct {
	systems [2]*actor.ActorSystem
	remotes [2]*remote.Remote
	arrived atomic.Int64
	pids    []*actor.PID
}

func newProtoPair(tb testing.TB, targets int) *protoPair {
	tb.Helper()
	p := &protoPair{}
	for i := range p.systems {
		sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet() }))
		r := remote.NewRemote(sys, remote.Configure("127.0.0.1", 0))
		r.Start()
		p.systems[i], p.remotes[i] = sys, r
	}
	props := actor.PropsFromFunc(func(c actor.Context) {
		switch c.Message().(type) {
		case *emptypb.Empty:
			p.arrived.Add(1)
		case *wrapperspb.BoolValue:
			c.Respond(&emptypb.Empty{})
		}
	})
	for i := range targets {
		name := fmt.Sprintf("t%d", i)
		if _, err := p.systems[1].Root.SpawnNamed(props, name); err != nil {
			tb.Fatal(err)
		}
		p.pids = append(p.pids, actor.NewPID(p.systems[1].Address(), name))
	}
	return p
}

func (p *protoPair) close() {
	for _, r := range p.remotes {
		r.Shutdown(true)
	}
}

func (p *protoPair) peer() peer {
	root := p.systems[0].Root
	return peer{
		arrived: &p.arrived,
		tell: func(i int) error {
			root.Send(p.pids[i%len(p.pids)], &emptypb.Empty{})
			return nil
		},
		ask: func(ctx context.Context, i int) error {
			_, err := root.RequestFuture(p.pids[i%len(p.pids)], &wrapperspb.BoolValue{}, 10*time.Second).Result()
			return err
		},
	}
}
