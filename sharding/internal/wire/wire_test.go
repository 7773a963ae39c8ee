package wire_test

import (
	"encoding/json"
	"errors"
	"github.com/shoal-dev/shoal/cluster"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/sharding/internal/protocol"
	"github.com/shoal-dev/shoal/sharding/internal/wire"
)

// note is a user message with a reply address inside.
type note struct {
	Text    string
	ReplyTo entity.ReplyTo[string]
}

// plain is a user message that holds no reply address.
type plain struct{ N int }

// nested holds reply addresses below pointers, slices and interfaces.
type nested struct {
	Inner *note
	List  []note
	Any   any
}

func newCodec(t testing.TB) *codec.Registry {
	t.Helper()
	reg := codec.NewRegistry()
	codec.MustRegister[note](reg, "test.note")
	codec.MustRegister[plain](reg, "test.plain")
	codec.MustRegister[nested](reg, "test.nested")
	if err := wire.RegisterTypes(reg); err != nil {
		t.Fatal(err)
	}
	return reg
}

// protocolTypes parses package protocol and returns the names of the
// types with a ProtocolMessage method: every message of the protocol.
func protocolTypes(t *testing.T) []string {
	t.Helper()
	pkgs, err := parser.ParseDir(token.NewFileSet(), "../protocol", func(fi fs.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, 0)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range pkgs {
		for _, f := range p.Files {
			for _, d := range f.Decls {
				fn, ok := d.(*ast.FuncDecl)
				if !ok || fn.Recv == nil || fn.Name.Name != "ProtocolMessage" {
					continue
				}
				typ := fn.Recv.List[0].Type
				if s, ok := typ.(*ast.StarExpr); ok {
					typ = s.X
				}
				names = append(names, typ.(*ast.Ident).Name)
			}
		}
	}
	slices.Sort(names)
	if len(names) < 20 {
		t.Fatalf("found only %d protocol types in ../protocol: %v", len(names), names)
	}
	return names
}

// The type id table is append-only: these numbers are on the wire of
// every node of this wire version. A new message takes the next number
// and is added at the end here; a line here never changes.
func TestTypeIDsPinned(t *testing.T) {
	pinned := []string{
		1: "Register", 2: "RegisterProxy", 3: "RegisterAck", 4: "GetShardHome", 5: "ShardHome",
		6: "ShardHomes", 7: "HostShard", 8: "ShardStarted", 9: "BeginHandOff", 10: "BeginHandOffAck",
		11: "HandOff", 12: "ShardStopped", 13: "Fence", 14: "HandOver", 15: "GracefulShutdownReq",
		16: "LeaveAck", 17: "StopShards", 18: "RebalanceShards", 19: "LeaveRequest", 20: "RegionStopped",
		21: "MembersDown", 22: "GetRegionStats", 23: "Deliver", 24: "Reply", 25: "AskFailed",
		26: "Flush", 27: "FlushAck",
	}
	types := wire.Types()
	if len(types) < len(pinned)-1 {
		t.Fatalf("the table has %d types, %d are pinned: an id was removed", len(types), len(pinned)-1)
	}
	for _, typ := range types {
		if int(typ.ID) < len(pinned) && pinned[typ.ID] != typ.Name {
			t.Errorf("type id %d is %s, pinned as %s", typ.ID, typ.Name, pinned[typ.ID])
		}
		if reflect.TypeOf(typ.Zero).Name() != typ.Name {
			t.Errorf("type id %d: named %s, its Go type is %T", typ.ID, typ.Name, typ.Zero)
		}
		if typ.ID >= 128 {
			t.Errorf("type id %d: the encoder writes ids as one byte", typ.ID)
		}
	}
	for i, typ := range types {
		if typ.ID != wire.TypeID(i+1) {
			t.Fatalf("type ids are not 1..n in order: %d at %d", typ.ID, i)
		}
	}
}

// Every type of package protocol that is a protocol.Message is in the
// table, so a new protocol message cannot be forgotten here.
func TestEveryProtocolMessageHasATypeID(t *testing.T) {
	var listed []string
	for _, m := range wire.Messages() {
		listed = append(listed, reflect.TypeOf(m).Name())
	}
	slices.Sort(listed)
	if want := protocolTypes(t); !slices.Equal(listed, want) {
		t.Fatalf("wire lists %v,\nprotocol declares %v", listed, want)
	}
}

// samples returns every message of the table twice: its zero value and
// one with every field set (see fill), sealed as Seal would.
func samples(t testing.TB) []wire.Envelope {
	t.Helper()
	reg := newCodec(t)
	to := wire.Target{Type: "account", Coordinator: true}
	var out []wire.Envelope
	for _, typ := range wire.Types() {
		for _, v := range []any{typ.Zero, fill(t, reflect.TypeOf(typ.Zero)).Interface()} {
			if m, ok := v.(protocol.Message); ok {
				env, err := wire.NewEncoder(reg).Seal(to, m)
				if err != nil {
					t.Fatalf("Seal(%T): %v", m, err)
				}
				out = append(out, env)
				continue
			}
			out = append(out, wire.Envelope{Msg: v})
		}
	}
	return out
}

// Every message, zero and with each of its fields set, crosses the codec
// and comes back equal: Seal, Encode, Decode, Open. A field added to a
// protocol struct is set by fill, so it must be encoded too.
func TestEveryMessageRoundTrips(t *testing.T) {
	reg := newCodec(t)
	for _, env := range samples(t) {
		name := reflect.TypeOf(env.Msg).Name()
		manifest, payload, err := reg.Encode(env)
		if err != nil {
			t.Fatalf("Encode(%s): %v", name, err)
		}
		if manifest != wire.EnvelopeManifest {
			t.Fatalf("%s: manifest %q", name, manifest)
		}
		v, err := reg.Decode(manifest, payload)
		if err != nil {
			t.Fatalf("Decode(%s): %v", name, err)
		}
		got := v.(wire.Envelope)
		if !reflect.DeepEqual(got, env) {
			t.Errorf("%s:\nsent     %+v\nreceived %+v\nbytes    %x", name, env, got, payload)
		}
		if _, ok := env.Msg.(protocol.Message); !ok {
			continue
		}
		opened, failed, err := wire.Open(reg, got)
		if err != nil || len(failed) > 0 {
			t.Fatalf("Open(%s): %v, failed %v", name, err, failed)
		}
		again, _ := wire.NewEncoder(reg).Seal(env.To, opened)
		if !reflect.DeepEqual(again, env) {
			t.Errorf("%s opened as %+v", name, opened)
		}
	}
}

// fill returns a value of t with every field set to something not zero:
// strings, numbers, true, two-element slices, one-entry maps, a note in a
// Deliver's Msg, a reply address in a ReplyTo.
func fill(t testing.TB, typ reflect.Type) reflect.Value {
	t.Helper()
	v := reflect.New(typ).Elem()
	if u, ok := v.Addr().Interface().(json.Unmarshaler); ok {
		if err := u.UnmarshalJSON([]byte(`{"node":"n1","incarnation":3,"id":9}`)); err != nil {
			t.Fatalf("fill %v: %v", typ, err)
		}
		return v
	}
	switch typ.Kind() {
	case reflect.String:
		v.SetString("s-" + typ.Name())
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(7)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(7)
	case reflect.Slice:
		v.Set(reflect.MakeSlice(typ, 0, 2))
		v.Set(reflect.Append(v, fill(t, typ.Elem()), fill(t, typ.Elem())))
	case reflect.Map:
		v.Set(reflect.MakeMap(typ))
		v.SetMapIndex(fill(t, typ.Key()), fill(t, typ.Elem()))
	case reflect.Interface:
		var rt entity.ReplyTo[string]
		if err := json.Unmarshal([]byte(`{"node":"n2","incarnation":4,"id":11}`), &rt); err != nil {
			t.Fatal(err)
		}
		v.Set(reflect.ValueOf(note{Text: "hello", ReplyTo: rt}))
	case reflect.Pointer:
		p := reflect.New(typ.Elem())
		p.Elem().Set(fill(t, typ.Elem()))
		v.Set(p)
	case reflect.Struct:
		for i := range typ.NumField() {
			v.Field(i).Set(fill(t, typ.Field(i).Type))
		}
	default:
		t.Fatalf("fill: add a case for %v", typ)
	}
	return v
}

// A Deliver carries the reply addresses inside its user message as a
// field of its own, and a message whose type cannot hold one carries none.
func TestDeliverCarriesReplyAddresses(t *testing.T) {
	reg := newCodec(t)
	var rt entity.ReplyTo[string]
	if err := json.Unmarshal([]byte(`{"node":"n2","incarnation":4,"id":11}`), &rt); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		msg  any
		want []entity.ReplyAddress
	}{
		{note{Text: "ask", ReplyTo: rt}, []entity.ReplyAddress{rt.Address()}},
		{note{Text: "tell"}, nil},
		{plain{N: 1}, nil},
		{nested{Inner: &note{ReplyTo: rt}}, []entity.ReplyAddress{rt.Address()}},
		{nested{List: []note{{}, {ReplyTo: rt}}}, []entity.ReplyAddress{rt.Address()}},
		{nested{Any: note{ReplyTo: rt}}, []entity.ReplyAddress{rt.Address()}},
	} {
		env, err := wire.NewEncoder(reg).Seal(wire.Target{Type: "t"}, protocol.Deliver{Shard: "1", EntityID: "e", Msg: tc.msg})
		if err != nil {
			t.Fatal(err)
		}
		if got := wire.Asks(env); !slices.Equal(got, tc.want) {
			t.Errorf("%+v: asks %v, want %v", tc.msg, got, tc.want)
		}
	}
}

// A Deliver that only starts its entity carries no user message, and one
// of a list that does not decode is reported with its reply addresses
// while the others of the hand-over are kept.
func TestOpenReportsUndecodable(t *testing.T) {
	reg := newCodec(t)
	var rt entity.ReplyTo[string]
	if err := json.Unmarshal([]byte(`{"node":"n2","incarnation":4,"id":11}`), &rt); err != nil {
		t.Fatal(err)
	}
	ho := protocol.HandOver{Shard: "s", From: cluster.UniqueAddress{Node: "a", Incarnation: 1}, Msgs: []protocol.Deliver{
		{Shard: "s", EntityID: "1", Msg: note{Text: "kept"}},
		{Shard: "s", EntityID: "2", Msg: note{Text: "lost", ReplyTo: rt}},
		{Shard: "s", EntityID: "3", Start: true},
	}}
	env, err := wire.NewEncoder(reg).Seal(wire.Target{Type: "t"}, ho)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := ho.Msgs[0].Msg.(note); !ok {
		t.Fatal("Seal changed the message it was given")
	}
	if asks := wire.Asks(env); !slices.Equal(asks, []entity.ReplyAddress{rt.Address()}) {
		t.Fatalf("Asks = %v, want %v", asks, rt.Address())
	}
	// The receiver's codec knows no note.
	older := codec.NewRegistry()
	if err := wire.RegisterTypes(older); err != nil {
		t.Fatal(err)
	}
	m, failed, err := wire.Open(older, env)
	if err != nil {
		t.Fatal(err)
	}
	if len(failed) != 2 || !errors.Is(failed[0].Err, codec.ErrUnknownManifest) || failed[1].Deliver.EntityID != "2" ||
		!slices.Equal(failed[1].Encoded().ReplyTo, []entity.ReplyAddress{rt.Address()}) {
		t.Fatalf("failed = %+v", failed)
	}
	got := m.(protocol.HandOver)
	if len(got.Msgs) != 1 || got.Msgs[0].EntityID != "3" || got.Msgs[0].Msg != nil {
		t.Fatalf("kept %+v, want the StartEntity only", got.Msgs)
	}
	// A lone Deliver that does not decode is dropped whole.
	d, err := wire.NewEncoder(reg).Seal(wire.Target{Type: "t"}, ho.Msgs[1])
	if err != nil {
		t.Fatal(err)
	}
	if m, failed, err := wire.Open(older, d); m != nil || len(failed) != 1 || err != nil {
		t.Fatalf("Open of an undecodable Deliver = %v, %v, %v", m, failed, err)
	}
}

// Bad input gets typed errors: a message that is not a protocol message
// crossing nodes, a user message the codec does not know, an unsealed
// Deliver, every truncation of every message, corrupt fields, an unknown
// type id.
func TestBadInputIsTyped(t *testing.T) {
	reg := newCodec(t)
	type local struct{ protocol.LeaveRequest }
	if _, err := wire.NewEncoder(reg).Seal(wire.Target{}, local{}); !errors.Is(err, wire.ErrUnknownType) {
		t.Fatalf("Seal of a local type: %v, want ErrUnknownType", err)
	}
	if _, err := wire.AppendEnvelope(nil, wire.Envelope{Msg: local{}}); !errors.Is(err, wire.ErrUnknownType) {
		t.Fatalf("AppendEnvelope of a local type: %v, want ErrUnknownType", err)
	}
	if _, err := wire.NewEncoder(reg).Seal(wire.Target{}, protocol.Deliver{Msg: struct{ X int }{1}}); !errors.Is(err, codec.ErrUnregisteredType) {
		t.Fatalf("Seal of an unregistered user message: %v, want codec.ErrUnregisteredType", err)
	}
	unsealed := wire.Envelope{Msg: protocol.HandOver{Msgs: []protocol.Deliver{{Msg: note{}}}}}
	if _, _, err := reg.Encode(unsealed); !errors.Is(err, wire.ErrNotSealed) {
		t.Fatalf("Encode of an unsealed hand-over: %v, want ErrNotSealed", err)
	}
	if out, err := wire.AppendEnvelope([]byte("keep"), unsealed); string(out) != "keep" || err == nil {
		t.Fatalf("a refused AppendEnvelope left %q", out)
	}

	for _, env := range samples(t) {
		b, err := wire.AppendEnvelope(nil, env)
		if err != nil {
			t.Fatal(err)
		}
		for n := range len(b) {
			if _, err := wire.DecodeEnvelope(b[:n]); !errors.Is(err, wire.ErrShort) && !errors.Is(err, wire.ErrCorrupt) {
				t.Fatalf("%T cut to %d of %d bytes: %v, want ErrShort", env.Msg, n, len(b), err)
			}
		}
		if _, err := wire.DecodeEnvelope(append(b, 0)); !errors.Is(err, wire.ErrCorrupt) {
			t.Fatalf("%T with a byte after its body: %v, want ErrCorrupt", env.Msg, err)
		}
	}

	_, err := wire.DecodeEnvelope([]byte{99, 0})
	var unknown *wire.UnknownTypeError
	if !errors.As(err, &unknown) || unknown.ID != 99 || !errors.Is(err, wire.ErrUnknownTypeID) {
		t.Fatalf("type id 99: %v, want an *UnknownTypeError", err)
	}
	for name, b := range map[string][]byte{
		"bool 2":            {byte(wire.IDShardStopped), 0, 0, 4, 0, 0, 0, 2},
		"target flags":      {byte(wire.IDLeaveRequest), 0, 0x80, 0},
		"count too large":   {byte(wire.IDStopShards), 0, 0, 2, 100, 0},
		"varint overflow":   {byte(wire.IDLeaveAck), 0, 0, 11, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f},
		"payload, no manif": {byte(wire.IDDeliver), 0, 0, 9, 0, 0, 0, 0, 0, 2, 'h', 'i', 0},
	} {
		if _, err := wire.DecodeEnvelope(b); !errors.Is(err, wire.ErrCorrupt) {
			t.Errorf("%s: %v, want ErrCorrupt", name, err)
		}
	}
}

// A body may end with fields this node does not know, appended by a newer
// release of this wire version: they are skipped, and the fields before
// them read as written.
func TestUnknownTrailingFieldsSkipped(t *testing.T) {
	m := protocol.ShardHome{Shard: "7", Region: mustAddr("b#2"), From: mustAddr("a#1"), Epoch: 5}
	b, err := wire.AppendEnvelope(nil, wire.Envelope{To: wire.Target{Type: "t"}, Msg: m})
	if err != nil {
		t.Fatal(err)
	}
	// id, target "t" and flags: 4 bytes, then the body's length.
	bodyAt := 4
	n := int(b[bodyAt])
	newer := append(append([]byte(nil), b[:bodyAt]...), byte(n+3))
	newer = append(newer, b[bodyAt+1:]...)
	newer = append(newer, 2, 'x', 'y') // a string field appended later
	got, err := wire.DecodeEnvelope(newer)
	if err != nil {
		t.Fatal(err)
	}
	if got.Msg != m {
		t.Fatalf("decoded %+v, want %+v", got.Msg, m)
	}
}

// Bodies of every size of length prefix (one byte up to 127, two, three)
// round-trip, nested ones (a HandOver's Delivers) included.
func TestLargeBodiesRoundTrip(t *testing.T) {
	for _, n := range []int{1, 100, 127, 128, 200, 16383, 16384, 100_000} {
		d := protocol.Deliver{Shard: "1", EntityID: "e", Msg: wire.Encoded{Manifest: "m", Payload: []byte(strings.Repeat("x", n))}}
		msgs := make([]protocol.Deliver, 0, 3)
		for range 3 {
			msgs = append(msgs, d)
		}
		for _, m := range []any{d, protocol.HandOver{Shard: "1", From: mustAddr("a#1"), Msgs: msgs}} {
			env := wire.Envelope{To: wire.Target{Type: "t"}, Msg: m}
			b, err := wire.AppendEnvelope([]byte("prefix"), env)
			if err != nil {
				t.Fatal(err)
			}
			if string(b[:6]) != "prefix" {
				t.Fatalf("AppendEnvelope changed what dst held")
			}
			got, err := wire.DecodeEnvelope(b[6:])
			if err != nil || !reflect.DeepEqual(got, env) {
				t.Fatalf("%T with a payload of %d bytes: %v", m, n, err)
			}
		}
	}
}

// mustAddr reads a node incarnation in its text form.
func mustAddr(s string) cluster.UniqueAddress {
	a, err := cluster.ParseUniqueAddress(s)
	if err != nil {
		panic(err)
	}
	return a
}
