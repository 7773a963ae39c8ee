package tcp_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/cluster/frame"
	"github.com/shoal-dev/shoal/cluster/inproc"
	"github.com/shoal-dev/shoal/cluster/tcp"
	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/internal/testcert"
)

type benchMsg struct {
	Shard, EntityID string
	Seq             int
}

var sample = benchMsg{Shard: "shard-17", EntityID: "entity-123456", Seq: 42}

func benchRegistry() *codec.Registry {
	reg := codec.NewRegistry()
	codec.MustRegister[benchMsg](reg, "bench")
	return reg
}

// counter is a receiving handler that tells the sender when it made
// progress, so a sender refused by a full queue waits instead of spinning.
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

// pump sends n messages from tr to to as fast as the link takes them, then
// waits for the last to be handled.
func pump(b *testing.B, tr cluster.Transport, to cluster.UniqueAddress, c *counter, n int) {
	pumpWith(b, func() error { return tr.Send(to, sample) }, c, n)
}

// pumpWith is pump of what send sends.
func pumpWith(b *testing.B, send func() error, c *counter, n int) {
	for i := 0; i < n; {
		err := send()
		switch {
		case err == nil:
			i++
		case errors.Is(err, cluster.ErrQueueFull):
			select {
			case <-c.progress:
			case <-c.done:
			case <-time.After(deadline):
				b.Fatalf("no progress with %d of %d handled", c.n.Load(), n)
			}
		default:
			b.Fatal(err)
		}
	}
	select {
	case <-c.done:
	case <-time.After(deadline):
		b.Fatalf("%d of %d handled", c.n.Load(), n)
	}
}

// BenchmarkLoopback is small messages from one node to another: the
// in-process transport (encode, queue, decode on another goroutine) is the
// baseline; tcp carries the same frames over 127.0.0.1, batched up to
// 64 KiB per write, or one frame per write ("unbatched"), or under TLS.
func BenchmarkLoopback(b *testing.B) {
	body, err := frame.Encode(benchRegistry(), addr("a", 1), addr("b", 1), sample, frame.DefaultMaxSize)
	if err != nil {
		b.Fatal(err)
	}
	frameBytes := int64(len(body) + 4) // with its length prefix

	b.Run("inproc", func(b *testing.B) {
		c := newCounter(b.N)
		nw, err := inproc.NewNetwork(inproc.Config{Codec: benchRegistry(), Clock: wallClock{}})
		if err != nil {
			b.Fatal(err)
		}
		a, _ := nw.Join(addr("a", 1), func(cluster.UniqueAddress, any) {})
		if _, err := nw.Join(addr("b", 1), c.handle); err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go nw.Run(ctx)
		b.SetBytes(frameBytes)
		b.ResetTimer()
		pump(b, a, addr("b", 1), c, b.N)
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	})

	ca := testcert.New(b, "bench CA")
	for _, tc := range []struct {
		name string
		tune func(*tcp.Config)
	}{
		{"tcp", nil},
		{"tcp-unbatched", func(c *tcp.Config) { c.MaxBatchBytes = 1 }},
		// One certificate for both nodes, so it names neither: allowed.
		{"tcp-tls", func(c *tcp.Config) {
			c.ServerTLS, c.ClientTLS = tcp.MutualTLS(ca.Leaf(b, "node"), ca.Pool)
			c.AllowAnyNodeCert = true
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			c := newCounter(b.N + 1)
			nw := newNetwork(b, benchRegistry(), tc.tune)
			nw.capacity = tcp.DefaultQueueCapacity
			nw.maxFrame = frame.DefaultMaxSize
			a := nw.start(b, addr("a", 1), func(cluster.UniqueAddress, any) {}, "")
			nw.start(b, addr("b", 1), c.handle, "")
			// Connect before timing: one message, flushed.
			if err := a.Send(addr("b", 1), sample); err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			defer cancel()
			if err := a.Flush(ctx, addr("b", 1)); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(frameBytes)
			b.ResetTimer()
			pump(b, a, addr("b", 1), c, b.N)
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
			if st := a.Stats(); st.Batches > 1 {
				b.ReportMetric(float64(st.Sent-1)/float64(st.Batches-1), "msgs/write")
			}
		})
	}
}

type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }
