package wire_test

import (
	"encoding/json"
	"errors"
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

func newCodec(t *testing.T) *codec.Registry {
	t.Helper()
	reg := codec.NewRegistry()
	codec.MustRegister[note](reg, "test.note")
	if err := wire.RegisterTypes(reg); err != nil {
		t.Fatal(err)
	}
	return reg
}

// protocolTypes parses package sharding/protocol and returns the names of
// the types with a ProtocolMessage method: every message of the protocol.
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

// Every type of package protocol that is a protocol.Message is registered,
// under shoal.sharding.<its name>, so a new protocol message cannot be
// forgotten here.
func TestEveryProtocolMessageIsRegistered(t *testing.T) {
	reg := newCodec(t)
	var listed []string
	for _, m := range wire.Messages() {
		name := reflect.TypeOf(m).Name()
		listed = append(listed, name)
		env, err := wire.Seal(reg, wire.Target{Type: "t"}, m)
		if err != nil {
			t.Fatalf("Seal(%s): %v", name, err)
		}
		manifest, ok := reg.Manifest(env)
		if !ok || manifest != wire.ManifestPrefix+name {
			t.Errorf("%s: registered as %q, %v; want %q", name, manifest, ok, wire.ManifestPrefix+name)
		}
	}
	slices.Sort(listed)
	if want := protocolTypes(t); !slices.Equal(listed, want) {
		t.Fatalf("wire lists %v,\nprotocol declares %v", listed, want)
	}
}

// The manifests are those the hand-written wire types had: a node of the
// previous build names every message as this one does.
func TestManifestsStable(t *testing.T) {
	reg := newCodec(t)
	for _, name := range []string{"Register", "RegisterProxy", "RegisterAck", "GetShardHome", "ShardHome",
		"ShardHomes", "HostShard", "ShardStarted", "BeginHandOff", "BeginHandOffAck", "HandOff", "ShardStopped",
		"Fence", "HandOver", "GracefulShutdownReq", "LeaveAck", "StopShards", "RebalanceShards", "LeaveRequest",
		"RegionStopped", "GetRegionStats", "Deliver", "Reply", "AskFailed"} {
		if _, err := reg.Decode("shoal.sharding."+name, []byte(`{}`)); err != nil {
			t.Errorf("shoal.sharding.%s: %v", name, err)
		}
	}
}

// Every protocol message, each of its fields set, crosses the codec and
// comes back equal: Seal, Encode, Decode, Open. A field added to a
// protocol struct is covered without a change here.
func TestEveryProtocolMessageRoundTrips(t *testing.T) {
	reg := newCodec(t)
	to := wire.Target{Type: "account", Coordinator: true}
	for _, zero := range wire.Messages() {
		for _, m := range []protocol.Message{zero, fill(t, reflect.TypeOf(zero)).Interface().(protocol.Message)} {
			name := reflect.TypeOf(m).Name()
			env, err := wire.Seal(reg, to, m)
			if err != nil {
				t.Fatalf("Seal(%s): %v", name, err)
			}
			manifest, payload, err := reg.Encode(env)
			if err != nil {
				t.Fatalf("Encode(%s): %v", name, err)
			}
			v, err := reg.Decode(manifest, payload)
			if err != nil {
				t.Fatalf("Decode(%s): %v", name, err)
			}
			got, ok := v.(wire.Addressed)
			if !ok || got.Target() != to {
				t.Fatalf("%s decodes as %#v", name, v)
			}
			opened, failed, err := wire.Open(reg, got)
			if err != nil || len(failed) > 0 {
				t.Fatalf("Open(%s): %v, failed %v", name, err, failed)
			}
			if !reflect.DeepEqual(opened, m) {
				t.Errorf("%s:\nsent     %+v\nreceived %+v\npayload  %s", name, m, opened, payload)
			}
		}
	}
}

// fill returns a value of t with every field set to something not zero:
// strings, numbers, true, two-element slices, one-entry maps, a note in a
// Deliver's Msg, a reply address in a ReplyTo.
func fill(t *testing.T, typ reflect.Type) reflect.Value {
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
	case reflect.Struct:
		for i := range typ.NumField() {
			v.Field(i).Set(fill(t, typ.Field(i).Type))
		}
	default:
		t.Fatalf("fill: add a case for %v", typ)
	}
	return v
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
	ho := protocol.HandOver{Shard: "s", From: "a#1", Msgs: []protocol.Deliver{
		{Shard: "s", EntityID: "1", Msg: note{Text: "kept"}},
		{Shard: "s", EntityID: "2", Msg: note{Text: "lost", ReplyTo: rt}},
		{Shard: "s", EntityID: "3", Start: true},
	}}
	env, err := wire.Seal(reg, wire.Target{Type: "t"}, ho)
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
	d, err := wire.Seal(reg, wire.Target{Type: "t"}, ho.Msgs[1])
	if err != nil {
		t.Fatal(err)
	}
	if m, failed, err := wire.Open(older, d); m != nil || len(failed) != 1 || err != nil {
		t.Fatalf("Open of an undecodable Deliver = %v, %v, %v", m, failed, err)
	}
}

// Bad input gets typed errors: a message that is not a protocol message
// crossing nodes, a user message the codec does not know, an unsealed
// Deliver, a payload that does not parse, a manifest nobody registered.
func TestBadInputIsTyped(t *testing.T) {
	reg := newCodec(t)
	type local struct{ protocol.LeaveRequest }
	if _, err := wire.Seal(reg, wire.Target{}, local{}); !errors.Is(err, wire.ErrUnknownType) {
		t.Fatalf("Seal of a local type: %v, want ErrUnknownType", err)
	}
	if _, err := wire.Seal(reg, wire.Target{}, protocol.Deliver{Msg: struct{ X int }{1}}); !errors.Is(err, codec.ErrUnregisteredType) {
		t.Fatalf("Seal of an unregistered user message: %v, want codec.ErrUnregisteredType", err)
	}
	unsealed := wire.Envelope[protocol.HandOver]{Msg: protocol.HandOver{Msgs: []protocol.Deliver{{Msg: note{}}}}}
	if _, _, err := reg.Encode(unsealed); !errors.Is(err, wire.ErrNotSealed) {
		t.Fatalf("Encode of an unsealed hand-over: %v, want ErrNotSealed", err)
	}
	for _, p := range []string{`{"to":`, `{"to":{"type":1}}`, `{"msgs":[{"msg":"x"}]}`, `[]`} {
		if _, err := reg.Decode(wire.ManifestPrefix+"HandOver", []byte(p)); err == nil {
			t.Errorf("corrupt payload %s decoded", p)
		}
	}
	if _, err := reg.Decode(wire.ManifestPrefix+"Nope", nil); !errors.Is(err, codec.ErrUnknownManifest) {
		t.Fatalf("unknown manifest: %v", err)
	}
}

// A failure travels on the reply route: a Reply under
// entity.AskFailureManifest. Its bytes, frame and payload, are pinned: a
// change breaks asks between nodes of two versions.
func TestAskFailureReplyWireForm(t *testing.T) {
	reg := newCodec(t)
	r := wire.Reply{
		To:       entity.ReplyAddress{Node: "n1", Incarnation: 7, AskID: 3},
		Manifest: entity.AskFailureManifest,
		Payload:  []byte(`{"code":1,"msg":"entity: ask: counter/a unhandled: entity: message unhandled"}`),
	}
	manifest, payload, err := reg.Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"to":{"node":"n1","incarnation":7,"id":3},"m":"shoal.reply.failed","p":"eyJjb2RlIjoxLCJtc2ciOiJlbnRpdHk6IGFzazogY291bnRlci9hIHVuaGFuZGxlZDogZW50aXR5OiBtZXNzYWdlIHVuaGFuZGxlZCJ9"}`
	if manifest != "shoal.sharding.Reply" || string(payload) != want {
		t.Fatalf("encoded %q %s,\nwant shoal.sharding.Reply %s", manifest, payload, want)
	}
	back, err := reg.Decode(manifest, payload)
	if err != nil || !reflect.DeepEqual(back, r) {
		t.Fatalf("decoded %+v, %v; want %+v", back, err, r)
	}
}
