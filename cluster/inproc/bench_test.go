package inproc_test

import (
	"testing"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/cluster/inproc"
	"github.com/shoal-dev/shoal/entity/codec"
)

type benchMsg struct {
	Shard, EntityID string
	Seq             int
}

func benchRegistry() *codec.Registry {
	reg := codec.NewRegistry()
	codec.MustRegister[benchMsg](reg, "bench")
	return reg
}

var sample = benchMsg{Shard: "shard-17", EntityID: "entity-123456", Seq: 42}

// BenchmarkCodecRoundTrip is the baseline: the codec work every message
// needs whatever carries it.
func BenchmarkCodecRoundTrip(b *testing.B) {
	reg := benchRegistry()
	b.ReportAllocs()
	for b.Loop() {
		m, p, err := reg.Encode(sample)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := reg.Decode(m, p); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSendDeliver is one message through the in-process network:
// Send (frame, enqueue) and its delivery (dequeue, decode, handler).
func BenchmarkSendDeliver(b *testing.B) {
	for _, batch := range []int{1, 64} {
		b.Run(map[int]string{1: "one-at-a-time", 64: "batches-of-64"}[batch], func(b *testing.B) {
			net, err := inproc.NewNetwork(inproc.Config{Codec: benchRegistry(), Clock: newClock()})
			if err != nil {
				b.Fatal(err)
			}
			to := cluster.UniqueAddress{Node: "b", Incarnation: 1}
			a, _ := net.Join(cluster.UniqueAddress{Node: "a", Incarnation: 1}, ignore)
			received := 0
			net.Join(to, func(cluster.UniqueAddress, any) { received++ })
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				if err := a.Send(to, sample); err != nil {
					b.Fatal(err)
				}
				if n++; n%batch == 0 {
					net.DeliverDue()
				}
			}
			net.DeliverDue()
			if received != n {
				b.Fatalf("received %d of %d", received, n)
			}
		})
	}
}
