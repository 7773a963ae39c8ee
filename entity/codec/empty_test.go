package codec_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/shoal-dev/shoal/entity/codec"
)

// tick is a marker message: a struct without fields.
type tick struct{}

// stdJSON is the JSON serializer by another name, so that its registry
// takes encoding/json for every type: the reference the marker path of
// codec.JSON must match.
type stdJSON struct{}

func (stdJSON) Marshal(v any) ([]byte, error)        { return json.Marshal(v) }
func (stdJSON) Unmarshal(data []byte, ptr any) error { return json.Unmarshal(data, ptr) }

// markerRegistries returns tick registered under codec.JSON and under
// stdJSON.
func markerRegistries(t testing.TB) (fast, std *codec.Registry) {
	fast, std = codec.NewRegistry(), codec.NewRegistry()
	codec.MustRegister[tick](fast, "tick")
	codec.MustRegister[tick](std, "tick", codec.WithSerializer(stdJSON{}))
	return fast, std
}

// sameDecode fails t unless data decodes alike in both registries: the
// same value, or the same error.
func sameDecode(t *testing.T, fast, std *codec.Registry, data []byte) {
	t.Helper()
	got, gotErr := fast.Decode("tick", data)
	want, wantErr := std.Decode("tick", data)
	if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) || got != want {
		t.Fatalf("decode %q: got (%#v, %v), encoding/json gives (%#v, %v)", data, got, gotErr, want, wantErr)
	}
}

func TestMarkerTypeDecodesAsEncodingJSON(t *testing.T) {
	fast, std := markerRegistries(t)
	for _, in := range []string{
		`{}`, ` { } `, "\t{\r\n}\n", `null`, ` null `, `{"x":1}`, `{"x":{"y":[1,2]}}`, `{"x":1,}`,
		``, ` `, `{`, `}`, `{}}`, `{}{}`, `{} x`, `[]`, `1`, `"x"`, `true`, `nul`, `nulll`, `NULL`,
		"\v{}", "\u00a0{}", "\xef\xbb\xbf{}", `{"x"}`, `{"\u0000":1}`, `{ "x" : null }`,
	} {
		sameDecode(t, fast, std, []byte(in))
	}
}

func TestMarkerTypeEncodesAsEncodingJSON(t *testing.T) {
	fast, std := markerRegistries(t)
	m, got, err := fast.Encode(tick{})
	_, want, _ := std.Encode(tick{})
	if err != nil || m != "tick" || !bytes.Equal(got, want) {
		t.Fatalf("Encode = %q, %q, %v; encoding/json gives %q", m, got, err, want)
	}
	m, got, err = fast.AppendEncode([]byte("x"), tick{})
	if err != nil || m != "tick" || string(got) != "x"+string(want) {
		t.Fatalf("AppendEncode = %q, %q, %v; want x%s", m, got, err, want)
	}
}

// A marker type encodes and decodes without encoding/json, which
// allocates for every call.
func TestMarkerTypeAllocatesNothing(t *testing.T) {
	fast, _ := markerRegistries(t)
	buf, payload := make([]byte, 0, 16), []byte(" {} ")
	if n := testing.AllocsPerRun(100, func() {
		if _, _, err := fast.AppendEncode(buf, tick{}); err != nil {
			t.Fatal(err)
		}
		if _, err := fast.Decode("tick", payload); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("%v allocations per encode and decode, want 0", n)
	}
}

// A struct without fields that marshals itself keeps doing so.
type selfMarshalled struct{}

func (selfMarshalled) MarshalJSON() ([]byte, error) { return []byte(`"self"`), nil }
func (*selfMarshalled) UnmarshalJSON(b []byte) error {
	if string(b) != `"self"` {
		return fmt.Errorf("want \"self\", got %s", b)
	}
	return nil
}

func TestMarkerTypeWithOwnJSONKeepsIt(t *testing.T) {
	r := codec.NewRegistry()
	codec.MustRegister[selfMarshalled](r, "self")
	if _, p, err := r.Encode(selfMarshalled{}); err != nil || string(p) != `"self"` {
		t.Fatalf("Encode = %q, %v; want \"self\"", p, err)
	}
	if _, err := r.Decode("self", []byte(`{}`)); err == nil {
		t.Fatal("Decode of {} succeeded; its UnmarshalJSON refuses it")
	}
}

func FuzzMarkerTypeDecode(f *testing.F) {
	for _, s := range []string{`{}`, ` { } `, `null`, `{"x":1}`, `[]`, `{`, "{\n}"} {
		f.Add([]byte(s))
	}
	fast, std := markerRegistries(f)
	f.Fuzz(func(t *testing.T, data []byte) { sameDecode(t, fast, std, data) })
}
