package codec_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/shoal-dev/shoal/entity/codec"
)

type point struct{ X, Y int }

// pointSerializer writes a point as two bytes and builds it itself on
// decode, counting the calls of each method.
type pointSerializer struct{ unmarshals, values, appends *int }

func (pointSerializer) Marshal(v any) ([]byte, error) {
	p := v.(point)
	return []byte{byte(p.X), byte(p.Y)}, nil
}

func (s pointSerializer) Unmarshal(data []byte, ptr any) error {
	*s.unmarshals++
	*ptr.(*point) = point{int(data[0]), int(data[1])}
	return nil
}

func (s pointSerializer) DecodeValue(data []byte) (any, error) {
	*s.values++
	if len(data) != 2 {
		return nil, errors.New("not two bytes")
	}
	return point{int(data[0]), int(data[1])}, nil
}

func (s pointSerializer) AppendMarshal(dst []byte, v any) ([]byte, error) {
	*s.appends++
	p := v.(point)
	return append(dst, byte(p.X), byte(p.Y)), nil
}

// A ValueDecoder builds the decoded value itself, and an Appender appends
// to the caller's buffer; AppendEncode of a serializer that is none
// appends what Marshal returned, and on error leaves the buffer as it was.
func TestValueDecoderAndAppender(t *testing.T) {
	var unmarshals, values, appends int
	reg := codec.NewRegistry()
	codec.MustRegister[point](reg, "point", codec.WithSerializer(pointSerializer{&unmarshals, &values, &appends}))
	codec.MustRegister[string](reg, "string")

	manifest, out, err := reg.AppendEncode([]byte("head"), point{3, 4})
	if err != nil || manifest != "point" || !bytes.Equal(out, []byte{'h', 'e', 'a', 'd', 3, 4}) || appends != 1 {
		t.Fatalf("AppendEncode = %q, %v, %v (appends %d)", manifest, out, err, appends)
	}
	v, err := reg.Decode("point", out[4:])
	if err != nil || v != (point{3, 4}) || values != 1 || unmarshals != 0 {
		t.Fatalf("Decode = %v, %v (DecodeValue %d, Unmarshal %d)", v, err, values, unmarshals)
	}
	if _, err := reg.Decode("point", []byte{1}); err == nil {
		t.Fatal("Decode of a bad payload: no error")
	}
	if manifest, out, err = reg.AppendEncode([]byte("x"), "hi"); err != nil || manifest != "string" || string(out) != `x"hi"` {
		t.Fatalf("AppendEncode of a JSON type = %q, %q, %v", manifest, out, err)
	}
	if _, out, err = reg.AppendEncode([]byte("x"), 1.5); !errors.Is(err, codec.ErrUnregisteredType) || string(out) != "x" {
		t.Fatalf("AppendEncode of an unregistered type = %q, %v", out, err)
	}
}

// AppendPrefixed writes the manifest and the payload each after its
// length as a uvarint, for payloads whose length takes one byte or more.
func TestAppendPrefixed(t *testing.T) {
	r := codec.NewRegistry()
	codec.MustRegister[Note](r, "note")
	for _, size := range []int{0, 1, 100, 127, 128, 300, 20000} {
		v := Note{Text: strings.Repeat("x", size)}
		_, payload, err := r.Encode(v)
		if err != nil {
			t.Fatal(err)
		}
		want := binary.AppendUvarint([]byte("head"), uint64(len("note")))
		want = append(want, "note"...)
		want = binary.AppendUvarint(want, uint64(len(payload)))
		want = append(want, payload...)
		m, got, err := r.AppendPrefixed([]byte("head"), v)
		if err != nil || m != "note" || !bytes.Equal(got, want) {
			t.Fatalf("text of %d bytes: AppendPrefixed = %q, %v; want %q", size, m, err, want)
		}
	}
	if m, got, err := r.AppendPrefixed([]byte("head"), point{}); !errors.Is(err, codec.ErrUnregisteredType) || m != "" || string(got) != "head" {
		t.Fatalf("unregistered: %q, %q, %v; want dst unchanged and ErrUnregisteredType", m, got, err)
	}
}
