package tcp

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/cluster/frame"
)

// FuzzHandshake feeds the decoder of a handshake frame (readControl, then
// the versioned payload) arbitrary bytes: it never panics, fails only with
// typed errors, and a payload it parses as a later version carries the
// rest that appendVersioned wrote.
func FuzzHandshake(f *testing.F) {
	a := cluster.UniqueAddress{Node: "a", Incarnation: 1}
	b := cluster.UniqueAddress{Node: "b", Incarnation: 2}
	for _, fr := range []frame.Frame{
		{From: a, To: b, Manifest: helloManifest, Payload: appendVersioned(nil, cluster.WireVersion, []byte("prod"))},
		{From: a, To: b, Manifest: helloManifest, Payload: []byte("prod")}, // version 1
		{From: b, To: a, Manifest: welcomeManifest, Payload: appendVersioned(nil, cluster.WireVersion, nil)},
		{From: b, To: a, Manifest: refuseManifest, Payload: appendVersioned(nil, 7, []byte("no"))},
		{From: b, To: a, Manifest: refuseManifest, Payload: []byte{0, 0x80}},
	} {
		var buf bytes.Buffer
		if err := frame.WriteFrame(&buf, fr, controlMaxSize); err != nil {
			f.Fatal(err)
		}
		f.Add(buf.Bytes())
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		fr, err := readControl(bufio.NewReader(bytes.NewReader(in)))
		if err != nil {
			if !errors.Is(err, frame.ErrTooLarge) && !errors.Is(err, frame.ErrCorrupt) && !isEOF(err) {
				t.Fatalf("untyped error: %v", err)
			}
			return
		}
		v, rest, err := parseVersioned(fr.Payload)
		switch {
		case err != nil:
			if !errors.Is(err, errBadHello) {
				t.Fatalf("untyped error: %v", err)
			}
		case v == 1:
			if !bytes.Equal(rest, fr.Payload) {
				t.Fatal("a version 1 payload was cut")
			}
		default:
			again, rest2, err := parseVersioned(appendVersioned(nil, v, rest))
			if err != nil || again != v || !bytes.Equal(rest2, rest) {
				t.Fatalf("version %d %q re-parsed as %d %q %v", v, rest, again, rest2, err)
			}
		}
	})
}

func isEOF(err error) bool { return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) }
