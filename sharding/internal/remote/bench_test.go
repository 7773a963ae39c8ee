package remote_test

import (
	"testing"

	"github.com/shoal-dev/shoal/sharding/internal/protocol"
	"github.com/shoal-dev/shoal/sharding/internal/wire"
)

// BenchmarkReceiveEncodedDeliver measures the receiving half of a remote
// tell: the handler a cluster transport calls with an envelope it hands
// over undecoded, which decodes the Deliver and hands it to its listener.
func BenchmarkReceiveEncodedDeliver(b *testing.B) {
	delivered := 0
	a, _, pa, pb := pair(b, newCodec(), nil, false,
		func(protocol.Message) error { return nil },
		func(protocol.Deliver) error { delivered++; return nil })
	env, err := wire.NewEncoder(pa.reg).AppendDeliver(nil, wire.Target{Type: "Counter"}, &protocol.Deliver{Shard: "17", EntityID: "c-42", Msg: Add{N: 3}})
	if err != nil {
		b.Fatal(err)
	}
	h := pb.encoded[wire.EnvelopeManifest]
	b.ReportAllocs()
	for b.Loop() {
		if err := h(a.Node(), env); err != nil {
			b.Fatal(err)
		}
	}
	if delivered != b.N {
		b.Fatalf("%d delivered of %d", delivered, b.N)
	}
}
