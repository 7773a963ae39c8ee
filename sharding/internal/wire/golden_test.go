package wire_test

import (
	"bytes"
	"encoding/hex"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/shoal-dev/shoal/sharding/internal/wire"
)

var update = flag.Bool("update", false, "rewrite the golden files of testdata/golden from the encoder")

// goldenSamples is one message of every type, each of its fields set: the
// bytes pinned in testdata.
func goldenSamples(t *testing.T) map[string]wire.Envelope {
	out := make(map[string]wire.Envelope)
	for _, env := range samples(t) {
		out[reflect.TypeOf(env.Msg).Name()] = env // the filled one comes second
	}
	return out
}

// readHex reads a golden file: hex digits, with whitespace and lines
// starting with # ignored.
func readHex(t testing.TB, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var digits strings.Builder
	for line := range strings.Lines(string(data)) {
		if !strings.HasPrefix(line, "#") {
			digits.WriteString(strings.Join(strings.Fields(line), ""))
		}
	}
	b, err := hex.DecodeString(digits.String())
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return b
}

func writeHex(t *testing.T, path, name string, b []byte) {
	t.Helper()
	var out bytes.Buffer
	out.WriteString("# " + name + ": an envelope as AppendEnvelope writes it (go test -update rewrites it).\n")
	for len(b) > 0 {
		n := min(len(b), 32)
		out.WriteString(hex.EncodeToString(b[:n]) + "\n")
		b = b[n:]
	}
	if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// Every message's bytes are pinned: the encoder writes exactly the golden
// file, and the golden file decodes to the message. A change here is a
// change of the wire: append fields only (docs/DESIGN.md, "Wire"), and
// then run go test -update to rewrite the file of the message.
func TestGoldenBytes(t *testing.T) {
	for name, env := range goldenSamples(t) {
		got, err := wire.AppendEnvelope(nil, env)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		path := filepath.Join("testdata", "golden", name+".hex")
		if *update {
			writeHex(t, path, name, got)
			continue
		}
		want := readHex(t, path)
		if !bytes.Equal(got, want) {
			t.Errorf("%s encodes as\n%x\nthe golden file has\n%x", name, got, want)
		}
		back, err := wire.DecodeEnvelope(want)
		if err != nil || !reflect.DeepEqual(back, env) {
			t.Errorf("%s: the golden bytes decode as %+v, %v; want %+v", name, back, err, env)
		}
	}
}

// The bytes of every earlier layout of a message, frozen in
// testdata/compat and never rewritten, still decode: a node of this
// release reads what one of the previous release of its wire version
// wrote, the fields appended since read as zero. Their encoding now
// starts with the frozen body: the fields they had kept their place.
func TestEarlierLayoutsDecode(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "compat", "*.hex"))
	if err != nil || len(files) < len(wire.Types()) {
		t.Fatalf("%d compat files, want one per type at least: %v", len(files), err)
	}
	for _, path := range files {
		old := readHex(t, path)
		env, err := wire.DecodeEnvelope(old)
		if err != nil {
			t.Errorf("%s: %v", path, err)
			continue
		}
		now, err := wire.AppendEnvelope(nil, env)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		oldHead, oldBody := wire.SplitEnvelope(old)
		nowHead, nowBody := wire.SplitEnvelope(now)
		if !bytes.Equal(oldHead, nowHead) || !bytes.HasPrefix(nowBody, oldBody) {
			t.Errorf("%s: re-encoded as %x, which does not extend %x", path, now, old)
		}
	}
}
