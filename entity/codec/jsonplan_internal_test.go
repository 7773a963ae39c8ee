package codec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"
)

// ownJSON has JSON methods of its own, as a ReplyTo has: MarshalJSON
// writes out (or fails), UnmarshalJSON keeps what it is given (and refuses
// "refuse"). Tests steer with it what a plan gets from a field's methods.
type ownJSON struct {
	out  string
	fail bool
}

func (o ownJSON) MarshalJSON() ([]byte, error) {
	if o.fail {
		return nil, errors.New("ownJSON refuses")
	}
	return []byte(o.out), nil
}

func (o *ownJSON) UnmarshalJSON(b []byte) error {
	if string(b) == `"refuse"` {
		return errors.New("ownJSON refuses to read")
	}
	o.out = string(b)
	return nil
}

type label string

type planInner struct {
	Name  string `json:"name"`
	Small int8
	Flag  bool `json:",omitempty"`
}

// planCommand has a field of every shape a plan covers.
type planCommand struct {
	ID      string
	Amount  int64  `json:"amount"`
	Count   uint16 `json:"count,omitempty"`
	Neg     int32
	Big     uint64
	Ok      bool
	Note    string `json:",omitempty"`
	Skipped string `json:"-"`
	hidden  int
	Inner   planInner
	Reply   ownJSON
	At      time.Time
	Label   label
	U8      uint8
}

// planRegistries returns planCommand registered under JSON, which takes
// its plan, and under stdJSON, which takes encoding/json: the reference.
func planRegistries(t testing.TB) (fast, std *Registry) {
	fast, std = NewRegistry(), NewRegistry()
	if err := Register[planCommand](fast, "cmd"); err != nil {
		t.Fatal(err)
	}
	if err := Register[planCommand](std, "cmd", WithSerializer(encodingJSON{})); err != nil {
		t.Fatal(err)
	}
	if fast.lookupType(reflect.TypeFor[planCommand]()).plan == nil {
		t.Fatal("planCommand got no plan")
	}
	return fast, std
}

// encodingJSON is the JSON serializer by another name, so that its
// registry takes encoding/json for every type.
type encodingJSON struct{}

func (encodingJSON) Marshal(v any) ([]byte, error)        { return json.Marshal(v) }
func (encodingJSON) Unmarshal(data []byte, ptr any) error { return json.Unmarshal(data, ptr) }

func sampleCommand() planCommand {
	return planCommand{
		ID: "pay-1", Amount: -1 << 63, Count: 7, Neg: -5, Big: 1<<64 - 1, Ok: true, Skipped: "x", hidden: 3,
		Inner: planInner{Name: "ünïcode", Small: -128, Flag: true},
		Reply: ownJSON{out: `{"node":"n1","incarnation":2,"id":3}`},
		At:    time.Date(2026, 11, 28, 4, 30, 0, 123, time.UTC), Label: "eur", U8: 255,
	}
}

// sameEncode fails t unless v encodes alike in both registries: the same
// bytes, or the same error.
func sameEncode(t *testing.T, fast, std *Registry, v planCommand) {
	t.Helper()
	_, got, gotErr := fast.Encode(v)
	_, want, wantErr := std.Encode(v)
	if !bytes.Equal(got, want) || fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
		t.Fatalf("Encode(%#v)\n = %s, %v\nencoding/json gives %s, %v", v, got, gotErr, want, wantErr)
	}
	_, gotApp, gotErr := fast.AppendEncode([]byte("prefix"), v)
	if want != nil {
		want = append([]byte("prefix"), want...)
	} else {
		want = []byte("prefix")
	}
	if !bytes.Equal(gotApp, want) || fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
		t.Fatalf("AppendEncode(%#v)\n = %s, %v\nencoding/json gives %s, %v", v, gotApp, gotErr, want, wantErr)
	}
}

// sameDecode fails t unless data decodes alike in both registries: the
// same value, or the same error.
func sameDecode(t *testing.T, fast, std *Registry, data []byte) {
	t.Helper()
	got, gotErr := fast.Decode("cmd", data)
	want, wantErr := std.Decode("cmd", data)
	if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) || !reflect.DeepEqual(got, want) {
		t.Fatalf("Decode(%q)\n = %#v, %v\nencoding/json gives %#v, %v", data, got, gotErr, want, wantErr)
	}
}

// TestPlanTakesPlainValues checks that the values a plan is for take it,
// both ways, and come out as encoding/json's: without this, a plan that
// always gave up would pass every comparison below.
func TestPlanTakesPlainValues(t *testing.T) {
	fast, _ := planRegistries(t)
	plan := fast.lookupType(reflect.TypeFor[planCommand]()).plan
	for _, v := range []planCommand{{Reply: ownJSON{out: "null"}}, sampleCommand()} {
		want, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := plan.appendJSON(nil, v)
		if !ok || !bytes.Equal(got, want) {
			t.Fatalf("appendJSON(%#v) = %s, %v; want %s from the plan", v, got, ok, want)
		}
		back, ok := plan.decodeJSON(want)
		var ref planCommand
		if err := json.Unmarshal(want, &ref); err != nil {
			t.Fatal(err)
		}
		if !ok || !reflect.DeepEqual(back, ref) {
			t.Fatalf("decodeJSON(%s) = %#v, %v; want %#v from the plan", want, back, ok, ref)
		}
	}
}

func TestPlanEncodesAsEncodingJSON(t *testing.T) {
	fast, std := planRegistries(t)
	for _, mutate := range []func(*planCommand){
		func(*planCommand) {},
		func(c *planCommand) { *c = planCommand{} },
		func(c *planCommand) { c.ID = `quote"` },
		func(c *planCommand) { c.ID = `back\slash` },
		func(c *planCommand) { c.Note = "<b>&</b>" },
		func(c *planCommand) { c.Note = "tab\there" },
		func(c *planCommand) { c.Note = "\x7f del" },
		func(c *planCommand) { c.Inner.Name = "line\u2028sep" },
		func(c *planCommand) { c.Inner.Name = "para\u2029sep" },
		func(c *planCommand) { c.Inner.Name = "bad \xff utf-8" },
		func(c *planCommand) { c.Label = "€uro" },
		func(c *planCommand) { c.Reply.out = `{"a": 1}` },
		func(c *planCommand) { c.Reply.out = `{"a":"<"}` },
		func(c *planCommand) { c.Reply.out = `{"a":"\u00e9"}` },
		func(c *planCommand) { c.Reply.out = `"é"` },
		func(c *planCommand) { c.Reply.out = `[1,2.5e-3,true,null,{}]` },
		func(c *planCommand) { c.Reply.out = `{"a":1` },
		func(c *planCommand) { c.Reply.out = `` },
		func(c *planCommand) { c.Reply.out = `01` },
		func(c *planCommand) { c.Reply.out = `1 2` },
		func(c *planCommand) { c.Reply.fail = true },
		func(c *planCommand) { c.At = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) },
	} {
		v := sampleCommand()
		mutate(&v)
		sameEncode(t, fast, std, v)
	}
}

func TestPlanDecodesAsEncodingJSON(t *testing.T) {
	fast, std := planRegistries(t)
	canonical, err := json.Marshal(sampleCommand())
	if err != nil {
		t.Fatal(err)
	}
	sameDecode(t, fast, std, canonical)
	for _, in := range decodeSeeds(canonical) {
		sameDecode(t, fast, std, []byte(in))
	}
}

// decodeSeeds are canonical's near misses: each a way JSON may differ from
// what a plan writes.
func decodeSeeds(canonical []byte) []string {
	c := string(canonical)
	return []string{
		`{}`, ` {}`, `{} `, `null`, `{"ID":"a"}`, `{"amount":5,"ID":"a"}`, `{"ID":"a","ID":"b"}`,
		`{"id":"a"}`, `{"Id":"a"}`, `{"ID":"a","Unknown":1}`, `{"ID":"a",}`, `{"ID" :"a"}`, `{"ID":"a\"b"}`,
		`{"ID":"a\u0041"}`, `{"ID":"\xff"}`, `{"ID":"é"}`, "{\"ID\":\"a\tb\"}", `{"ID":null}`, `{"ID":1}`,
		`{"amount":9223372036854775807}`, `{"amount":-9223372036854775808}`, `{"amount":9223372036854775808}`,
		`{"amount":123456789012345678}`, `{"amount":1234567890123456789}`, `{"amount":-0}`, `{"amount":01}`,
		`{"amount":1.0}`, `{"amount":1e3}`, `{"amount":-}`, `{"amount":"1"}`, `{"amount":true}`,
		`{"Neg":2147483648}`, `{"Neg":-2147483648}`, `{"U8":256}`, `{"U8":255}`, `{"U8":-1}`,
		`{"count":65535}`, `{"count":65536}`, `{"Big":18446744073709551615}`, `{"Big":18446744073709551616}`,
		`{"Ok":true}`, `{"Ok":false}`, `{"Ok":tru}`, `{"Ok":truex}`, `{"Ok":1}`,
		`{"Inner":{}}`, `{"Inner":{"name":"x","Small":-128,"Flag":true}}`, `{"Inner":{"Small":-129}}`,
		`{"Inner":null}`, `{"Inner":{"Flag":true,"name":"x"}}`, `{"Inner":[]}`,
		`{"Reply":{"x":[1,{"y":"\u00e9"}]}}`, `{"Reply":"refuse"}`, `{"Reply":null}`, `{"Reply":{"x":1}x}`,
		`{"Reply":{"x":01}}`, `{"Reply":{"x":"a\q"}}`, `{"Reply":[1,]}`, `{"Reply":-1.5E+10}`,
		`{"At":"2026-11-28T04:30:00Z"}`, `{"At":"yesterday"}`, `{"Label":"x"}`, `{"Skipped":"x"}`, `{"hidden":1}`,
		c[:len(c)-1], c + "x", strings.Replace(c, `:`, `: `, 1), strings.ToLower(c),
	}
}

func FuzzPlanDecodesAsEncodingJSON(f *testing.F) {
	canonical, _ := json.Marshal(sampleCommand())
	f.Add(canonical)
	for _, in := range decodeSeeds(canonical) {
		f.Add([]byte(in))
	}
	fast, std := planRegistries(f)
	f.Fuzz(func(t *testing.T, data []byte) { sameDecode(t, fast, std, data) })
}

func FuzzPlanEncodesAsEncodingJSON(f *testing.F) {
	f.Add("pay-1", int64(-5), uint16(0), int32(1), uint64(9), true, "", "n", int8(3), `{"a":1}`, false, int64(0), "")
	f.Add("<", int64(1), uint16(1), int32(-1), uint64(0), false, "\u2028", "\xff", int8(-1), `{"a": 1}`, true, int64(1)<<62, "é")
	fast, std := planRegistries(f)
	f.Fuzz(func(t *testing.T, id string, amount int64, count uint16, neg int32, big uint64, ok bool,
		note, name string, small int8, out string, fail bool, at int64, lbl string) {
		sameEncode(t, fast, std, planCommand{
			ID: id, Amount: amount, Count: count, Neg: neg, Big: big, Ok: ok, Note: note,
			Inner: planInner{Name: name, Small: small, Flag: ok},
			Reply: ownJSON{out: out, fail: fail}, At: time.Unix(0, at).UTC(), Label: label(lbl),
		})
	})
}

// ptrMarshal has MarshalJSON on its pointer only, which encoding/json
// does not call on a field of a value.
type ptrMarshal struct{ X int }

func (*ptrMarshal) MarshalJSON() ([]byte, error) { return []byte(`1`), nil }

func TestPlanLeavesOtherShapesToEncodingJSON(t *testing.T) {
	type embedded struct{ planInner }
	type own struct {
		V ownJSON `json:",omitempty"` // a struct: never left out
		R json.RawMessage
	}
	for _, typ := range []reflect.Type{
		reflect.TypeFor[struct{ F float64 }](),
		reflect.TypeFor[struct{ P *int }](),
		reflect.TypeFor[struct{ S []string }](),
		reflect.TypeFor[struct{ B []byte }](),
		reflect.TypeFor[struct{ M map[string]int }](),
		reflect.TypeFor[struct{ I any }](),
		reflect.TypeFor[struct{ A [2]int }](),
		reflect.TypeFor[embedded](),
		reflect.TypeFor[struct {
			N int `json:",string"`
		}](),
		reflect.TypeFor[struct {
			N int `json:"n,omitzero"`
		}](),
		reflect.TypeFor[struct {
			N int `json:"a-b"`
		}](),
		reflect.TypeFor[struct {
			A int
			B int `json:"A"`
		}](),
		reflect.TypeFor[struct {
			R json.RawMessage `json:",omitempty"`
		}](),
		reflect.TypeFor[struct{ P ptrMarshal }](),
		reflect.TypeFor[struct{ A netip.Addr }](), // text methods
		reflect.TypeFor[struct{ Nested struct{ F float32 } }](),
		reflect.TypeFor[ownJSON](),
		reflect.TypeFor[int](),
	} {
		if p := compileJSONPlan(typ); p != nil {
			t.Errorf("%v got a plan", typ)
		}
	}
	if p := compileJSONPlan(reflect.TypeFor[own]()); p == nil {
		t.Error("a struct of a field with JSON methods got no plan")
	}
}

// BenchmarkPlainStruct writes and reads a command of a payment's shape
// with its plan and, for the baseline, with encoding/json.
func BenchmarkPlainStruct(b *testing.B) {
	type authorize struct {
		PaymentID string
		Amount    int64
		Currency  string
		Capture   bool
		ReplyTo   ownJSON
	}
	v := authorize{PaymentID: "pay-12345", Amount: 1999, Currency: "EUR", Capture: true,
		ReplyTo: ownJSON{out: `{"node":"node-1","incarnation":3,"id":12345}`}}
	for _, c := range []struct {
		name string
		s    Serializer
	}{{"plan", JSON{}}, {"encoding-json", encodingJSON{}}} {
		r := NewRegistry()
		if err := Register[authorize](r, "authorize", WithSerializer(c.s)); err != nil {
			b.Fatal(err)
		}
		_, payload, err := r.Encode(v)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(c.name+"/encode", func(b *testing.B) {
			b.ReportAllocs()
			var buf []byte
			for b.Loop() {
				if _, buf, err = r.AppendEncode(buf[:0], v); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(c.name+"/decode", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := r.Decode("authorize", payload); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
