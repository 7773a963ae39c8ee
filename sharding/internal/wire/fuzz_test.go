package wire_test

import (
	"errors"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/shoal-dev/shoal/sharding/internal/protocol"
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

// FuzzOpeningDecoder feeds the transport's decoder (RegisterOpeningTypes:
// strings shared, tells opened as read) the same bytes as the plain one:
// both accept or both refuse, and Open gives the same message and the
// same failures.
func FuzzOpeningDecoder(f *testing.F) {
	for _, dir := range []string{"golden", "compat"} {
		files, _ := filepath.Glob(filepath.Join("testdata", dir, "*.hex"))
		for _, path := range files {
			f.Add(readHex(f, path))
		}
	}
	plainReg, opening := newCodec(f), openingCodec(f)
	dec := wire.NewDecoder(opening)
	for _, env := range samples(f) {
		if _, b, err := plainReg.Encode(env); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		want, werr := plainReg.Decode(wire.EnvelopeManifest, b)
		got, gerr := opening.Decode(wire.EnvelopeManifest, b)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("plain decoder: %v; opening decoder: %v", werr, gerr)
		}
		// DecodeDeliver, whose strings are views of b until owned, reads a
		// Deliver as the codec's decoder does.
		to, d, isDeliver, derr := dec.DecodeDeliver(b)
		if isDeliver && (derr == nil) != (gerr == nil) {
			t.Fatalf("DecodeDeliver: %v; opening decoder: %v", derr, gerr)
		}
		if werr != nil {
			return
		}
		wantEnv, gotEnv := want.(wire.Envelope), got.(wire.Envelope)
		if isDeliver {
			dec.Own(&d, &to)
			if to != gotEnv.To || !reflect.DeepEqual(d, gotEnv.Msg) {
				t.Fatalf("DecodeDeliver: %v %+v; the codec decodes %+v", to, d, gotEnv)
			}
		}
		if _, ok := wantEnv.Msg.(protocol.Message); !ok {
			if !reflect.DeepEqual(gotEnv, wantEnv) {
				t.Fatalf("decoded %+v, want %+v", gotEnv, wantEnv)
			}
			return
		}
		if !reflect.DeepEqual(wire.Asks(gotEnv), wire.Asks(wantEnv)) {
			t.Fatalf("asks %v, want %v", wire.Asks(gotEnv), wire.Asks(wantEnv))
		}
		wm, wf, werr := wire.Open(plainReg, wantEnv)
		gm, gf, gerr := wire.Open(opening, gotEnv)
		if !reflect.DeepEqual(gm, wm) || len(gf) != len(wf) || (werr == nil) != (gerr == nil) {
			t.Fatalf("opened %+v, %d failed, %v; want %+v, %d failed, %v", gm, len(gf), gerr, wm, len(wf), werr)
		}
	})
}
