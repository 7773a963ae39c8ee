package wire_test

import (
	"errors"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/shoal-dev/shoal/sharding/internal/wire"
)

// FuzzDecodeEnvelope feeds the envelope decoder (every message's, replies
// included) arbitrary bytes: it never panics, fails only with its typed
// errors, and what it accepts encodes again and decodes to the same
// message. The seeds are the golden and compat files, so plain go test
// runs every message's decoder.
func FuzzDecodeEnvelope(f *testing.F) {
	for _, dir := range []string{"golden", "compat"} {
		files, _ := filepath.Glob(filepath.Join("testdata", dir, "*.hex"))
		for _, path := range files {
			f.Add(readHex(f, path))
		}
	}
	f.Add([]byte{})
	f.Add([]byte{byte(wire.IDDeliver)})
	f.Add([]byte{99, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		env, err := wire.DecodeEnvelope(b)
		if err != nil {
			if !errors.Is(err, wire.ErrShort) && !errors.Is(err, wire.ErrCorrupt) && !errors.Is(err, wire.ErrUnknownTypeID) {
				t.Fatalf("untyped error: %v", err)
			}
			return
		}
		again, err := wire.AppendEnvelope(nil, env)
		if err != nil {
			t.Fatalf("decoded %+v does not encode: %v", env, err)
		}
		back, err := wire.DecodeEnvelope(again)
		if err != nil || !reflect.DeepEqual(back, env) {
			t.Fatalf("re-encoded %+v decodes as %+v, %v", env, back, err)
		}
	})
}
