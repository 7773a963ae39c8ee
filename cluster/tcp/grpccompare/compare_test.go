// Package grpccompare measures the design the tcp package did not take:
// the same frames, queue and batching writer as cluster/tcp, but carried
// by a gRPC bidirectional stream instead of a TCP connection. It is a
// module of its own so that Shoal does not depend on gRPC:
//
//	cd cluster/tcp/grpccompare && go test -bench . -count 5
package grpccompare

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/cluster/frame"
	"github.com/shoal-dev/shoal/cluster/inproc"
	"github.com/shoal-dev/shoal/cluster/tcp"
	"github.com/shoal-dev/shoal/entity/codec"
)

type benchMsg struct {
	Shard, EntityID string
	Seq             int
}

var sample = benchMsg{Shard: "shard-17", EntityID: "entity-123456", Seq: 42}

var (
	from = cluster.UniqueAddress{Node: "a", Incarnation: 1}
	to   = cluster.UniqueAddress{Node: "b", Incarnation: 1}
)

func registry() *codec.Registry {
	reg := codec.NewRegistry()
	codec.MustRegister[benchMsg](reg, "bench")
	return reg
}

type counter struct {
	n        atomic.Int64
	target   int64
	progress chan struct{}
	done     chan struct{}
}

func newCounter(target int) *counter {
	return &counter{target: int64(target), progress: make(chan struct{}, 1), done: make(chan struct{})}
}

func (c *counter) handle(cluster.UniqueAddress, any) {
	n := c.n.Add(1)
	if n%128 == 0 {
		select {
		case c.progress <- struct{}{}:
		default:
		}
	}
	if n == c.target {
		close(c.done)
	}
}

type sender interface {
	Send(to cluster.UniqueAddress, msg any) error
}

func pump(b *testing.B, s sender, c *counter, n int) {
	for i := 0; i < n; {
		err := s.Send(to, sample)
		switch {
		case err == nil:
			i++
		case errors.Is(err, cluster.ErrQueueFull):
			select {
			case <-c.progress:
			case <-c.done:
			case <-time.After(30 * time.Second):
				b.Fatalf("no progress: %d of %d", c.n.Load(), n)
			}
		default:
			b.Fatal(err)
		}
	}
	select {
	case <-c.done:
	case <-time.After(30 * time.Second):
		b.Fatalf("%d of %d handled", c.n.Load(), n)
	}
}

// rawCodec passes byte slices through gRPC untouched.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *v.(*[]byte), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*v.(*[]byte) = append((*v.(*[]byte))[:0], data...)
	return nil
}
func (rawCodec) Name() string { return "shoal-raw" }

var streamDesc = grpc.StreamDesc{StreamName: "Stream", ServerStreams: true, ClientStreams: true}

// grpcLink is cluster/tcp's link over a gRPC stream: Send encodes and
// queues (never blocking), one goroutine drains the queue into SendMsg
// calls of up to maxBatch bytes of length-prefixed frames.
type grpcLink struct {
	reg      *codec.Registry
	maxBatch int
	mu       sync.Mutex
	queue    [][]byte
	wake     chan struct{}
}

func (l *grpcLink) Send(to cluster.UniqueAddress, msg any) error {
	body, err := frame.Encode(l.reg, from, to, msg, frame.DefaultMaxSize)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.queue) >= tcp.DefaultQueueCapacity {
		return cluster.ErrQueueFull
	}
	l.queue = append(l.queue, body)
	select {
	case l.wake <- struct{}{}:
	default:
	}
	return nil
}

func (l *grpcLink) run(ctx context.Context, stream grpc.ClientStream) {
	var buf []byte
	for {
		l.mu.Lock()
		n := 0
		buf = buf[:0]
		for n < len(l.queue) && (n == 0 || len(buf)+4+len(l.queue[n]) <= l.maxBatch) {
			buf = binary.BigEndian.AppendUint32(buf, uint32(len(l.queue[n])))
			buf = append(buf, l.queue[n]...)
			n++
		}
		l.queue = l.queue[n:]
		l.mu.Unlock()
		if n == 0 {
			select {
			case <-l.wake:
				continue
			case <-ctx.Done():
				return
			}
		}
		if err := stream.SendMsg(&buf); err != nil {
			return
		}
	}
}

func serveGRPC(b *testing.B, reg *codec.Registry, handle cluster.Handler) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ForceServerCodec(rawCodec{}))
	srv.RegisterService(&grpc.ServiceDesc{
		ServiceName: "shoal.Link",
		HandlerType: (*any)(nil),
		Streams: []grpc.StreamDesc{{StreamName: "Stream", ServerStreams: true, ClientStreams: true,
			Handler: func(_ any, stream grpc.ServerStream) error {
				var buf []byte
				for {
					if err := stream.RecvMsg(&buf); err != nil {
						return nil
					}
					for rest := buf; len(rest) >= 4; {
						n := binary.BigEndian.Uint32(rest)
						sender, msg, err := frame.Decode(reg, to, rest[4:4+n])
						if err != nil {
							return err
						}
						handle(sender, msg)
						rest = rest[4+n:]
					}
				}
			}}},
	}, struct{}{})
	go srv.Serve(ln)
	b.Cleanup(srv.Stop)
	return ln.Addr().String()
}

// BenchmarkLoopback compares, in one run, the in-process transport (the
// baseline), cluster/tcp, and the same design over a gRPC stream, with
// batches of up to 64 KiB and with one message per write.
func BenchmarkLoopback(b *testing.B) {
	b.Run("inproc", func(b *testing.B) {
		c := newCounter(b.N)
		nw, err := inproc.NewNetwork(inproc.Config{Codec: registry(), Clock: wallClock{}})
		if err != nil {
			b.Fatal(err)
		}
		a, _ := nw.Join(from, func(cluster.UniqueAddress, any) {})
		nw.Join(to, c.handle)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go nw.Run(ctx)
		b.ResetTimer()
		pump(b, a, c, b.N)
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	})
	for _, batch := range []int{64 << 10, 1} {
		name := map[int]string{1: "unbatched", 64 << 10: "batched"}[batch]
		b.Run("tcp-"+name, func(b *testing.B) {
			c := newCounter(b.N + 1)
			reg := registry()
			endpoints := map[cluster.UniqueAddress]string{}
			var mu sync.Mutex
			resolve := func(a cluster.UniqueAddress) (string, error) {
				mu.Lock()
				defer mu.Unlock()
				return endpoints[a], nil
			}
			start := func(self cluster.UniqueAddress, h cluster.Handler) *tcp.Transport {
				tr, err := tcp.Listen(tcp.Config{Self: self, Codec: reg, Handler: h, Resolve: resolve,
					ListenAddr: "127.0.0.1:0", MaxBatchBytes: batch})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { tr.Close(context.Background()) })
				mu.Lock()
				endpoints[self] = tr.Addr().String()
				mu.Unlock()
				return tr
			}
			a := start(from, func(cluster.UniqueAddress, any) {})
			start(to, c.handle)
			a.Send(to, sample)
			a.Flush(context.Background(), to)
			b.ResetTimer()
			pump(b, a, c, b.N)
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
		b.Run("grpc-"+name, func(b *testing.B) {
			c := newCounter(b.N)
			reg := registry()
			endpoint := serveGRPC(b, reg, c.handle)
			conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()),
				grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { conn.Close() })
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			stream, err := conn.NewStream(ctx, &streamDesc, "/shoal.Link/Stream")
			if err != nil {
				b.Fatal(err)
			}
			l := &grpcLink{reg: reg, maxBatch: batch, wake: make(chan struct{}, 1)}
			go l.run(ctx, stream)
			b.ResetTimer()
			pump(b, l, c, b.N)
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}

type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }
