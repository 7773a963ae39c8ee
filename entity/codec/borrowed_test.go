package codec_test

import (
	"testing"

	"github.com/shoal-dev/shoal/entity/codec"
)

// raw keeps its input: Unmarshal stores the payload itself, as a
// zero-copy binary serializer would.
type raw struct{ Data []byte }

type keeping struct{}

func (keeping) Marshal(v any) ([]byte, error) { return v.(raw).Data, nil }
func (keeping) Unmarshal(data []byte, ptr any) error {
	ptr.(*raw).Data = data
	return nil
}

// DecodeBorrowed returns values that outlive the payload's bytes being
// written again: decoded in place by the JSON serializer, which copies,
// and from a copy by a serializer or an upcaster that keeps its input.
func TestDecodeBorrowedSharesNothingWithThePayload(t *testing.T) {
	r := codec.NewRegistry()
	codec.MustRegister[Deposited](r, "deposited")
	codec.MustRegister[raw](r, "raw", codec.WithSerializer(keeping{}))
	codec.MustRegisterUpcaster(r, "raw.v0", func(payload []byte) ([]any, error) {
		return []any{raw{Data: payload}}, nil
	})
	cases := []struct {
		manifest, payload string
		want              func(any) bool
	}{
		{"deposited", `{"Account":"acc-1","Amount":5}`, func(v any) bool { return v.(Deposited).Account == "acc-1" }},
		{"raw", "payload", func(v any) bool { return string(v.(raw).Data) == "payload" }},
		{"raw.v0", "payload", func(v any) bool { return string(v.(raw).Data) == "payload" }},
	}
	for _, c := range cases {
		payload := []byte(c.payload)
		v, err := r.DecodeBorrowed(c.manifest, payload)
		if err != nil {
			t.Fatalf("%s: %v", c.manifest, err)
		}
		for i := range payload {
			payload[i] = 'X' // the lender writes it again
		}
		if !c.want(v) {
			t.Fatalf("%s: the value changed with the borrowed payload: %+v", c.manifest, v)
		}
	}
	// Decode, by contrast, lets the keeping serializer keep its input.
	payload := []byte("payload")
	v, err := r.Decode("raw", payload)
	if err != nil {
		t.Fatal(err)
	}
	payload[0] = 'X'
	if string(v.(raw).Data) != "Xayload" {
		t.Fatalf("Decode with a keeping serializer: %q; the test's serializer no longer keeps its input", v.(raw).Data)
	}
}
