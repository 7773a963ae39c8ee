package wire_test

import (
	"encoding/json"
	"testing"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/cluster/frame"
	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/sharding/internal/protocol"
	"github.com/shoal-dev/shoal/sharding/internal/wire"
)

// count is the empty command of the remote benchmarks.
type count struct{}

// BenchmarkDeliverFrame sends a Deliver through everything between two
// nodes' regions but the socket: Seal (the user message encoded by the
// codec), the frame encoded, then the frame decoded and the envelope
// opened. "empty" carries count{}, "typical" a command with a text and a
// reply address. frame-B is the frame's size, length prefix excluded.
//
//	go test -run '^$' -bench DeliverFrame -count 6 ./sharding/internal/wire
func BenchmarkDeliverFrame(b *testing.B) {
	reg := newCodec(b)
	if err := registerCount(reg); err != nil {
		b.Fatal(err)
	}
	from := cluster.UniqueAddress{Node: "node-1", Incarnation: 1732700000123}
	to := cluster.UniqueAddress{Node: "node-2", Incarnation: 1732700000456}
	var rt entity.ReplyTo[string]
	if err := json.Unmarshal([]byte(`{"node":"node-1","incarnation":1732700000123,"id":4711}`), &rt); err != nil {
		b.Fatal(err)
	}
	target := wire.Target{Type: "counter"}
	for _, bc := range []struct {
		name string
		d    protocol.Deliver
	}{
		{"empty", protocol.Deliver{Shard: "17", EntityID: "c-42", Msg: count{}}},
		{"typical", protocol.Deliver{Shard: "17", EntityID: "account-42", Msg: note{Text: "deposit 100", ReplyTo: rt}, Ask: true}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var size int
			enc := wire.NewEncoder(reg)
			for b.Loop() {
				env, err := enc.Seal(target, bc.d)
				if err != nil {
					b.Fatal(err)
				}
				body, err := frame.Encode(reg, from, to, env, frame.DefaultMaxSize)
				if err != nil {
					b.Fatal(err)
				}
				size = len(body)
				_, v, err := frame.Decode(reg, to, body)
				if err != nil {
					b.Fatal(err)
				}
				if _, _, err := wire.Open(reg, v.(wire.Envelope)); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(size), "frame-B")
		})
	}
}

// BenchmarkEnvelopeCodec is the envelope's share of BenchmarkDeliverFrame:
// a Deliver sealed once, then its envelope encoded and decoded by the
// codec, the user message staying bytes.
//
//	go test -run '^$' -bench EnvelopeCodec -count 6 ./sharding/internal/wire
func BenchmarkEnvelopeCodec(b *testing.B) {
	reg := newCodec(b)
	if err := registerCount(reg); err != nil {
		b.Fatal(err)
	}
	var rt entity.ReplyTo[string]
	if err := json.Unmarshal([]byte(`{"node":"node-1","incarnation":1732700000123,"id":4711}`), &rt); err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		d    protocol.Deliver
	}{
		{"empty", protocol.Deliver{Shard: "17", EntityID: "c-42", Msg: count{}}},
		{"typical", protocol.Deliver{Shard: "17", EntityID: "account-42", Msg: note{Text: "deposit 100", ReplyTo: rt}, Ask: true}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			env, err := wire.NewEncoder(reg).Seal(wire.Target{Type: "counter"}, bc.d)
			if err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				m, p, err := reg.Encode(env)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := reg.Decode(m, p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkTellEnvelope is a remote tell's envelope as the transport
// handles it: AppendDeliver on the sender (the user message encoded in
// place), DecodeDeliver on the receiver (strings shared, the user message
// opened).
//
//	go test -run '^$' -bench TellEnvelope -count 6 ./sharding/internal/wire
func BenchmarkTellEnvelope(b *testing.B) {
	reg := openingCodec(b)
	if err := registerCount(reg); err != nil {
		b.Fatal(err)
	}
	dec := wire.NewDecoder(reg)
	to := wire.Target{Type: "counter"}
	d := protocol.Deliver{Shard: "17", EntityID: "c-42", Msg: count{}}
	buf := make([]byte, 0, 256)
	enc := wire.NewEncoder(reg)
	b.Run("append", func(b *testing.B) {
		for b.Loop() {
			if _, err := enc.AppendDeliver(buf[:0], to, &d); err != nil {
				b.Fatal(err)
			}
		}
	})
	env, err := enc.AppendDeliver(nil, to, &d)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("decode", func(b *testing.B) {
		for b.Loop() {
			if _, _, _, err := dec.DecodeDeliver(env); err != nil {
				b.Fatal(err)
			}
		}
	})
}
