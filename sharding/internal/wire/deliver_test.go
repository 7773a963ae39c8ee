package wire_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"unsafe"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/sharding/internal/protocol"
	"github.com/shoal-dev/shoal/sharding/internal/wire"
)

// AppendDeliver writes the bytes the codec writes for a packed Deliver,
// and DecodeDeliver reads them back as the codec's decoder does.
func TestAppendDeliverEncodesAsPack(t *testing.T) {
	reg := openingCodec(t)
	var rt entity.ReplyTo[string]
	if err := json.Unmarshal([]byte(`{"node":"n2","incarnation":4,"id":11}`), &rt); err != nil {
		t.Fatal(err)
	}
	to := wire.Target{Type: "t"}
	dec := wire.NewDecoder(reg)
	for _, d := range []protocol.Deliver{
		{Shard: "1", EntityID: "e", Msg: plain{N: 7}},
		{Shard: "1", EntityID: "e", Msg: note{Text: "ask", ReplyTo: rt}, Ask: true},
		{Shard: "1", EntityID: "e", Msg: note{Text: string(bytes.Repeat([]byte("x"), 300))}},
		{Shard: "2", EntityID: "f", Start: true},
		{Shard: "1", EntityID: "e", Msg: plain{N: 1}, Trace: &protocol.TraceContext{Parent: "00-ab-cd-01", State: "k=v"}},
	} {
		packed, err := wire.NewEncoder(reg).Pack(to, d)
		if err != nil {
			t.Fatal(err)
		}
		_, want, err := reg.Encode(packed)
		if err != nil {
			t.Fatal(err)
		}
		got, err := wire.NewEncoder(reg).AppendDeliver([]byte("head"), to, &d)
		if err != nil || !bytes.Equal(got, append([]byte("head"), want...)) {
			t.Fatalf("%+v: AppendDeliver = %x, %v\nthe codec writes %x", d, got, err, want)
		}
		decoded, err := reg.Decode(wire.EnvelopeManifest, want)
		if err != nil {
			t.Fatal(err)
		}
		gotTo, gotD, isDeliver, err := dec.DecodeDeliver(want)
		if err != nil || !isDeliver || gotTo != to || !reflect.DeepEqual(gotD, decoded.(wire.Envelope).Msg) {
			t.Fatalf("DecodeDeliver = %v %+v %v %v, the codec decodes %+v", gotTo, gotD, isDeliver, err, decoded)
		}
	}
	if got, err := wire.NewEncoder(reg).AppendDeliver([]byte("head"), to, &protocol.Deliver{Msg: struct{ X int }{1}}); !errors.Is(err, codec.ErrUnregisteredType) || string(got) != "head" {
		t.Fatalf("AppendDeliver of an unregistered user message: %q, %v", got, err)
	}
}

// DecodeDeliver leaves the envelopes of other messages to Decode, and
// refuses bad input as Decode does.
func TestDecodeDeliverOfOtherEnvelopes(t *testing.T) {
	reg := openingCodec(t)
	dec := wire.NewDecoder(reg)
	b, err := wire.AppendEnvelope(nil, wire.Envelope{To: wire.Target{Type: "t"}, Msg: protocol.LeaveRequest{}})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, isDeliver, err := dec.DecodeDeliver(b); isDeliver || err != nil {
		t.Fatalf("DecodeDeliver of a LeaveRequest: %v, %v", isDeliver, err)
	}
	if e, err := dec.Decode(b); err != nil || e.Msg != (protocol.LeaveRequest{}) {
		t.Fatalf("Decode of a LeaveRequest: %+v, %v", e, err)
	}
	good, err := wire.NewEncoder(reg).AppendDeliver(nil, wire.Target{Type: "t"}, &protocol.Deliver{Shard: "1", EntityID: "e", Msg: plain{N: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, isDeliver, err := dec.DecodeDeliver(good[:len(good)-2]); !isDeliver || !errors.Is(err, wire.ErrShort) {
		t.Fatalf("DecodeDeliver of a cut envelope: %v, %v; want ErrShort", isDeliver, err)
	}
}

// Encoding a tell's envelope and decoding it again costs only the user
// message's own encoding and decoding: the Deliver is never put in an
// interface value.
func TestDeliverRoundTripAllocations(t *testing.T) {
	reg := openingCodec(t)
	dec := wire.NewDecoder(reg)
	to := wire.Target{Type: "account"}
	d := protocol.Deliver{Shard: "12", EntityID: "account-42", Msg: plain{N: 1}}
	buf := make([]byte, 0, 256)
	userManifest, userPayload, err := reg.Encode(plain{N: 1})
	if err != nil {
		t.Fatal(err)
	}
	userAllocs := testing.AllocsPerRun(100, func() {
		if _, _, err := reg.AppendEncode(buf[:0], plain{N: 1}); err != nil {
			t.Fatal(err)
		}
		if _, err := reg.Decode(userManifest, userPayload); err != nil {
			t.Fatal(err)
		}
	})
	enc := wire.NewEncoder(reg)
	n := testing.AllocsPerRun(100, func() {
		b, err := enc.AppendDeliver(buf[:0], to, &d)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, _, err := dec.DecodeDeliver(b); err != nil {
			t.Fatal(err)
		}
	})
	if n > userAllocs {
		t.Fatalf("a tell's envelope encoded and decoded: %v allocations besides the user message's %v", n-userAllocs, userAllocs)
	}
}

// DecodeDeliver's ids, target type and the manifest of a user message it
// leaves encoded are views of its input (no copy, nothing hashed), and
// Own gives them strings of their own; Decode's strings are never views.
func TestDecodeDeliverBorrowsUntilOwned(t *testing.T) {
	reg := openingCodec(t)
	dec := wire.NewDecoder(reg)
	var rt entity.ReplyTo[string]
	if err := json.Unmarshal([]byte(`{"node":"n2","incarnation":4,"id":11}`), &rt); err != nil {
		t.Fatal(err)
	}
	for _, d := range []protocol.Deliver{
		{Shard: "shard-1", EntityID: "entity-1", Msg: plain{N: 7}},
		{Shard: "shard-1", EntityID: "entity-1", Msg: note{Text: "ask", ReplyTo: rt}, Ask: true}, // left encoded
	} {
		src, err := wire.NewEncoder(reg).AppendDeliver(nil, wire.Target{Type: "type-1"}, &d)
		if err != nil {
			t.Fatal(err)
		}
		to, got, _, err := dec.DecodeDeliver(src)
		if err != nil {
			t.Fatal(err)
		}
		manifest := func(d protocol.Deliver) string {
			if e, ok := d.Msg.(wire.Encoded); ok {
				return e.Manifest
			}
			return ""
		}
		if d.Ask && manifest(got) == "" {
			t.Fatalf("%+v decoded as %+v: want its user message left encoded", d, got)
		}
		borrowed := []string{to.Type, got.Shard, got.EntityID}
		if m := manifest(got); m != "" {
			borrowed = append(borrowed, m)
		}
		for _, s := range borrowed {
			if !within(s, src) {
				t.Fatalf("%+v: DecodeDeliver's %q is a copy, want a view of its input", d, s)
			}
		}
		owned, ownedTo := got, to
		dec.Own(&owned, &ownedTo)
		decoded, err := dec.Decode(src)
		if err != nil {
			t.Fatal(err)
		}
		keep := append([]byte(nil), src...)
		clear(src) // what a view would see change
		if ownedTo.Type != "type-1" || owned.Shard != "shard-1" || owned.EntityID != "entity-1" || (manifest(got) != "" && manifest(owned) != "test.note") {
			t.Fatalf("owned: %+v to %+v, want their strings unchanged by a write to the input", owned, ownedTo)
		}
		if dd := decoded.Msg.(protocol.Deliver); decoded.To.Type != "type-1" || dd.Shard != "shard-1" || dd.EntityID != "entity-1" {
			t.Fatalf("Decode: %+v, want its strings unchanged by a write to the input", decoded)
		}
		if got.EntityID == "entity-1" {
			t.Fatal("a borrowed id did not change with its input: not a view")
		}
		copy(src, keep)
	}
}

// within reports whether s's bytes lie in b's array.
func within(s string, b []byte) bool {
	if len(s) == 0 || len(b) == 0 {
		return false
	}
	p, lo := uintptr(unsafe.Pointer(unsafe.StringData(s))), uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return p >= lo && p < lo+uintptr(len(b))
}

// AppendReply writes the bytes the codec writes for the envelope of a
// Reply, whatever the length of its body's prefix.
func TestAppendReplyEncodesAsTheCodec(t *testing.T) {
	reg := openingCodec(t)
	to := entity.ReplyAddress{Node: "n1", Incarnation: 3, AskID: 1 << 40}
	for _, r := range []wire.Reply{
		{To: to},
		{To: to, Manifest: "test.Count", Payload: []byte(`{"N":1}`)},
		{To: to, Manifest: entity.AskFailureManifest, Payload: bytes.Repeat([]byte("x"), 300)},
	} {
		_, want, err := reg.Encode(wire.Envelope{Msg: r})
		if err != nil {
			t.Fatal(err)
		}
		if got := wire.AppendReply([]byte("head"), r); !bytes.Equal(got, append([]byte("head"), want...)) {
			t.Fatalf("%+v: AppendReply = %x\nthe codec writes %x", r, got, want)
		}
	}
}

// DecodeDeliverInto writes what DecodeDeliver returns, whatever its
// outputs held before: a Deliver (an untraced one after a traced one),
// another envelope and one that does not decode leave no field behind.
func TestDecodeDeliverIntoOverwritesItsOutputs(t *testing.T) {
	reg := openingCodec(t)
	dec := wire.NewDecoder(reg)
	to := wire.Target{Type: "t"}
	var envs [][]byte
	for _, d := range []protocol.Deliver{
		{Shard: "1", EntityID: "e", Msg: plain{N: 1}, Trace: &protocol.TraceContext{Parent: "00-ab-cd-01"}},
		{Shard: "2", EntityID: "f", Msg: plain{N: 2}},
		{Shard: "3", EntityID: "g", Start: true},
	} {
		env, err := wire.NewEncoder(reg).AppendDeliver(nil, to, &d)
		if err != nil {
			t.Fatal(err)
		}
		envs = append(envs, env)
	}
	_, otherEnv, err := reg.Encode(wire.Envelope{To: to, Msg: protocol.Register{}})
	if err != nil {
		t.Fatal(err)
	}
	envs = append(envs, otherEnv, envs[0][:len(envs[0])-3], nil)
	gotTo := wire.Target{Type: "stale", Coordinator: true}
	got := protocol.Deliver{Shard: "x", EntityID: "y", Msg: plain{N: 9}, Start: true, Ask: true, Trace: &protocol.TraceContext{}}
	for i, env := range envs {
		wantTo, want, wantIs, wantErr := dec.DecodeDeliver(env)
		is, err := dec.DecodeDeliverInto(env, &gotTo, &got)
		if is != wantIs || (err == nil) != (wantErr == nil) || gotTo != wantTo || !reflect.DeepEqual(got, want) {
			t.Fatalf("envelope %d: Into gave %v %v %+v %+v, DecodeDeliver %v %v %+v %+v", i, is, err, gotTo, got, wantIs, wantErr, wantTo, want)
		}
	}
}
