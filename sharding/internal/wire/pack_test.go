package wire_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/sharding/internal/protocol"
	"github.com/shoal-dev/shoal/sharding/internal/wire"
)

// A packed Deliver leaves its user message as it is, and the codec's
// encoding of its envelope has the bytes of the sealed one: reply
// addresses and trace context included.
func TestPackEncodesAsSeal(t *testing.T) {
	reg := newCodec(t)
	var rt entity.ReplyTo[string]
	if err := json.Unmarshal([]byte(`{"node":"n2","incarnation":4,"id":11}`), &rt); err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 300) // a payload whose length takes two bytes
	for i := range big {
		big[i] = 'x'
	}
	for _, d := range []protocol.Deliver{
		{Shard: "1", EntityID: "e", Msg: plain{N: 7}},
		{Shard: "1", EntityID: "e", Msg: note{Text: "ask", ReplyTo: rt}, Ask: true},
		{Shard: "1", EntityID: "e", Msg: note{Text: string(big)}},
		{Shard: "2", EntityID: "f", Start: true},
		{Shard: "1", EntityID: "e", Msg: plain{N: 1}, Trace: &protocol.TraceContext{Parent: "00-ab-cd-01", State: "k=v"}},
	} {
		sealed, err := wire.NewEncoder(reg).Seal(wire.Target{Type: "t"}, d)
		if err != nil {
			t.Fatal(err)
		}
		packed, err := wire.NewEncoder(reg).Pack(wire.Target{Type: "t"}, d)
		if err != nil {
			t.Fatal(err)
		}
		if got, ok := packed.Msg.(protocol.Deliver); !ok || got.Msg != d.Msg && d.Msg != nil {
			t.Fatalf("packed %+v, want the Deliver as it was", packed.Msg)
		}
		_, want, err := reg.Encode(sealed)
		if err != nil {
			t.Fatal(err)
		}
		_, got, err := reg.Encode(packed)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%+v: packed encodes as %x, %v\nsealed as %x", d, got, err, want)
		}
		_, appended, err := reg.AppendEncode([]byte("head"), packed)
		if err != nil || !bytes.Equal(appended, append([]byte("head"), want...)) {
			t.Fatalf("%+v: AppendEncode of the packed = %x, %v", d, appended, err)
		}
	}
	// Encoded without the codec's serializer, a packed Deliver is refused.
	packed, _ := wire.NewEncoder(reg).Pack(wire.Target{Type: "t"}, protocol.Deliver{Msg: plain{}})
	if _, err := wire.AppendEnvelope(nil, packed); !errors.Is(err, wire.ErrNotSealed) {
		t.Fatalf("AppendEnvelope of a packed Deliver: %v, want ErrNotSealed", err)
	}
	if _, err := wire.NewEncoder(reg).Pack(wire.Target{}, protocol.Deliver{Msg: struct{ X int }{1}}); !errors.Is(err, codec.ErrUnregisteredType) {
		t.Fatalf("Pack of an unregistered user message: %v", err)
	}
}

// Packing and encoding a tell into a buffer costs nothing beyond the user
// message's own encoding.
func TestPackAllocations(t *testing.T) {
	reg := newCodec(t)
	var msg protocol.Message = protocol.Deliver{Shard: "12", EntityID: "account-42", Msg: plain{N: 1}}
	buf := make([]byte, 0, 256)
	userAllocs := testing.AllocsPerRun(100, func() {
		if _, _, err := reg.AppendEncode(buf[:0], plain{N: 1}); err != nil {
			t.Fatal(err)
		}
	})
	enc := wire.NewEncoder(reg)
	n := testing.AllocsPerRun(100, func() {
		env, err := enc.Pack(wire.Target{Type: "account"}, msg)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := reg.AppendEncode(buf[:0], env); err != nil {
			t.Fatal(err)
		}
	})
	// The one allocation: the Envelope in the interface AppendEncode takes.
	if n-userAllocs > 1 {
		t.Fatalf("pack and encode of a tell: %v allocations besides the user message's", n-userAllocs)
	}
}

// A packed Deliver's user message is encoded with the sender's codec,
// not with the codec of the transport that encodes the envelope: the
// nodes of one process share a network whose codec knows only the wire.
func TestPackEncodesWithTheSendersCodec(t *testing.T) {
	sender := newCodec(t)
	network := codec.NewRegistry()
	if err := wire.RegisterTypes(network); err != nil {
		t.Fatal(err)
	}
	d := protocol.Deliver{Shard: "1", EntityID: "e", Msg: plain{N: 7}}
	sealed, err := wire.NewEncoder(sender).Seal(wire.Target{Type: "t"}, d)
	if err != nil {
		t.Fatal(err)
	}
	_, want, err := network.Encode(sealed)
	if err != nil {
		t.Fatal(err)
	}
	packed, err := wire.NewEncoder(sender).Pack(wire.Target{Type: "t"}, d)
	if err != nil {
		t.Fatal(err)
	}
	if _, got, err := network.Encode(packed); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("packed, encoded by the network's codec: %x, %v; want %x", got, err, want)
	}
}
