package wire_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"testing"
	"unsafe"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/sharding/internal/protocol"
	"github.com/shoal-dev/shoal/sharding/internal/wire"
)

// openingCodec is newCodec with the transport's decoder.
func openingCodec(t testing.TB) *codec.Registry {
	t.Helper()
	reg := codec.NewRegistry()
	codec.MustRegister[note](reg, "test.note")
	codec.MustRegister[plain](reg, "test.plain")
	codec.MustRegister[nested](reg, "test.nested")
	if err := wire.RegisterOpeningTypes(reg); err != nil {
		t.Fatal(err)
	}
	return reg
}

// The transport's decoder opens a Deliver's user message as it reads it
// when the message carries no reply address, and leaves it encoded when
// it does (a refusal must fail those asks, Asks lists them) or when it
// does not decode; either way Open returns what the plain decoder and
// Open return, and Asks the same reply addresses.
func TestOpeningDecoderOpensTellsOnly(t *testing.T) {
	plainReg, opening := newCodec(t), openingCodec(t)
	var rt entity.ReplyTo[string]
	if err := json.Unmarshal([]byte(`{"node":"n2","incarnation":4,"id":11}`), &rt); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		msg    any
		opened bool
	}{
		{plain{N: 7}, true},
		{note{Text: "tell"}, true},
		{note{Text: "ask", ReplyTo: rt}, false},
		{nil, false}, // a StartEntity: nothing to open
	} {
		d := protocol.Deliver{Shard: "1", EntityID: "e", Msg: tc.msg, Start: tc.msg == nil}
		env, err := wire.NewEncoder(plainReg).Seal(wire.Target{Type: "t"}, d)
		if err != nil {
			t.Fatal(err)
		}
		manifest, payload, err := plainReg.Encode(env)
		if err != nil {
			t.Fatal(err)
		}
		fromPlain, err := plainReg.Decode(manifest, payload)
		if err != nil {
			t.Fatal(err)
		}
		fromOpening, err := opening.Decode(manifest, payload)
		if err != nil {
			t.Fatal(err)
		}
		got := fromOpening.(wire.Envelope).Msg.(protocol.Deliver)
		if _, encoded := got.Msg.(wire.Encoded); encoded == tc.opened && tc.msg != nil {
			t.Errorf("%+v: decoded as %+v, opened %v", tc.msg, got.Msg, !encoded)
		}
		if a, b := wire.Asks(fromPlain.(wire.Envelope)), wire.Asks(fromOpening.(wire.Envelope)); !slices.Equal(a, b) {
			t.Errorf("%+v: asks %v, want %v", tc.msg, b, a)
		}
		want, _, err := wire.Open(plainReg, fromPlain.(wire.Envelope))
		if err != nil {
			t.Fatal(err)
		}
		m, failed, err := wire.Open(opening, fromOpening.(wire.Envelope))
		if err != nil || len(failed) > 0 || !reflect.DeepEqual(m, want) {
			t.Errorf("%+v: opened %+v, %v, %v; want %+v", tc.msg, m, failed, err, want)
		}
	}
	// A user message the receiver does not know stays encoded, and Open
	// reports it.
	older := codec.NewRegistry()
	if err := wire.RegisterOpeningTypes(older); err != nil {
		t.Fatal(err)
	}
	env, err := wire.NewEncoder(plainReg).Seal(wire.Target{Type: "t"}, protocol.Deliver{Shard: "1", EntityID: "e", Msg: plain{N: 1}})
	if err != nil {
		t.Fatal(err)
	}
	manifest, payload, _ := plainReg.Encode(env)
	v, err := older.Decode(manifest, payload)
	if err != nil {
		t.Fatal(err)
	}
	if m, failed, err := wire.Open(older, v.(wire.Envelope)); m != nil || len(failed) != 1 || !errors.Is(failed[0].Err, codec.ErrUnknownManifest) || err != nil {
		t.Fatalf("Open of an undecodable Deliver = %v, %v, %v", m, failed, err)
	}
}

// Receiving a tell costs the envelope, the Deliver in it and the user
// message: the strings it repeats (entity type, shard, entity id,
// manifest) are shared with the envelopes before it, and Open builds
// nothing more.
func TestOpeningDecoderAllocations(t *testing.T) {
	reg := openingCodec(t)
	env, err := wire.NewEncoder(reg).Seal(wire.Target{Type: "account"}, protocol.Deliver{Shard: "12", EntityID: "account-42", Msg: plain{N: 1}})
	if err != nil {
		t.Fatal(err)
	}
	manifest, payload, err := reg.Encode(env)
	if err != nil {
		t.Fatal(err)
	}
	decodeAndOpen := func() protocol.Message {
		v, err := reg.Decode(manifest, payload)
		if err != nil {
			t.Fatal(err)
		}
		m, _, err := wire.Open(reg, v.(wire.Envelope))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	first, second := decodeAndOpen().(protocol.Deliver), decodeAndOpen().(protocol.Deliver)
	if unsafe.StringData(first.EntityID) != unsafe.StringData(second.EntityID) || unsafe.StringData(first.Shard) != unsafe.StringData(second.Shard) {
		t.Error("the second envelope's entity id and shard are copies, not the first's strings")
	}
	// The user message's own decoding (JSON here) comes on top.
	userManifest, userPayload, err := reg.Encode(plain{N: 1})
	if err != nil {
		t.Fatal(err)
	}
	userAllocs := testing.AllocsPerRun(100, func() {
		if _, err := reg.Decode(userManifest, userPayload); err != nil {
			t.Fatal(err)
		}
	})
	if n := testing.AllocsPerRun(100, func() { decodeAndOpen() }) - userAllocs; n > 2 {
		t.Errorf("decode and open of a tell: %v allocations besides the user message's, want at most 2 (the envelope and its Deliver)", n)
	}
}
