package wire_test

import (
	"testing"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/sharding/internal/protocol"
	"github.com/shoal-dev/shoal/sharding/internal/wire"
)

// handwritten is the shape of the mirror struct wire had before its form
// was derived from protocol.Deliver: the baseline of BenchmarkDeliver.
type handwritten struct {
	To    wire.Target `json:"to"`
	Entry struct {
		Shard    string                `json:"shard"`
		EntityID string                `json:"id"`
		Start    bool                  `json:"start,omitempty"`
		Manifest string                `json:"m,omitempty"`
		Payload  []byte                `json:"p,omitempty"`
		ReplyTo  []entity.ReplyAddress `json:"r,omitempty"`
	} `json:"entry"`
}

// BenchmarkDeliver sends one Deliver through the codec and back: the
// user message encoded, the envelope encoded, then both decoded. The
// "handwritten" case does it as the converter to the mirror struct did.
//
//	go test -run '^$' -bench Deliver -count 5 ./sharding/wire
func BenchmarkDeliver(b *testing.B) {
	reg := codec.NewRegistry()
	codec.MustRegister[note](reg, "test.note")
	codec.MustRegister[handwritten](reg, "test.handwritten")
	if err := wire.RegisterTypes(reg); err != nil {
		b.Fatal(err)
	}
	to := wire.Target{Type: "account"}
	d := protocol.Deliver{Shard: "17", EntityID: "account-42", Msg: note{Text: "deposit 100"}}
	b.Run("handwritten", func(b *testing.B) {
		for b.Loop() {
			var h handwritten
			h.To, h.Entry.Shard, h.Entry.EntityID = to, d.Shard, d.EntityID
			var err error
			if h.Entry.Manifest, h.Entry.Payload, err = reg.Encode(d.Msg); err != nil {
				b.Fatal(err)
			}
			h.Entry.ReplyTo = entity.ReplyAddresses(d.Msg)
			m, p, err := reg.Encode(h)
			if err != nil {
				b.Fatal(err)
			}
			v, err := reg.Decode(m, p)
			if err != nil {
				b.Fatal(err)
			}
			got := v.(handwritten)
			msg, err := reg.Decode(got.Entry.Manifest, got.Entry.Payload)
			if err != nil {
				b.Fatal(err)
			}
			_ = protocol.Deliver{Shard: got.Entry.Shard, EntityID: got.Entry.EntityID, Msg: msg}
		}
	})
	b.Run("derived", func(b *testing.B) {
		for b.Loop() {
			env, err := wire.Seal(reg, to, d)
			if err != nil {
				b.Fatal(err)
			}
			m, p, err := reg.Encode(env)
			if err != nil {
				b.Fatal(err)
			}
			v, err := reg.Decode(m, p)
			if err != nil {
				b.Fatal(err)
			}
			if _, _, err := wire.Open(reg, v.(wire.Addressed)); err != nil {
				b.Fatal(err)
			}
		}
	})
}
