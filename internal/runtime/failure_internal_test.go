package runtime

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

// readFailure reads a failure reply's bytes from testdata/failure.
func readFailure(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "failure", name))
	if err != nil {
		t.Fatal(err)
	}
	return bytes.TrimSpace(b)
}

// The bytes of a failure reply are pinned: the encoder writes the golden
// file, which decodes to the failure. The field appended for an
// unavailable entity is what a node reads its RetryAfter from.
func TestFailureReplyGoldenBytes(t *testing.T) {
	err := &UnavailableError{Type: "counter", EntityID: "e1", RetryAfter: 90 * time.Second, Cause: ErrPersistFailed}
	f := failureOf(err)
	got := encodeFailure(f)
	want := readFailure(t, "unavailable.json")
	if !bytes.Equal(got, want) {
		t.Fatalf("encodes as\n%s\nthe golden file has\n%s", got, want)
	}
	back, derr := decodeFailure(want)
	if derr != nil {
		t.Fatal(derr)
	}
	if !reflect.DeepEqual(back, f.err()) || back.Unavailable == nil || back.Unavailable.RetryAfter != 90*time.Second {
		t.Fatalf("the golden bytes decode as %+v (unavailable %+v), want %+v", back, back.Unavailable, f.err())
	}
}

// A failure as a node of the previous release wrote it (no unavailable
// field, testdata/failure/*.v2.json, never rewritten) still decodes, with
// no UnavailableError; this release writes a failure without one the same
// bytes. And that node, reading the new bytes with its own struct, ignores
// the field it does not know and keeps the code and message.
func TestFailureReplyEarlierLayout(t *testing.T) {
	old := readFailure(t, "unavailable.v2.json")
	back, err := decodeFailure(old)
	if err != nil {
		t.Fatal(err)
	}
	if back.Code != FailureUnavailable || back.Unavailable != nil {
		t.Fatalf("the earlier bytes decode as %+v, want FailureUnavailable with no UnavailableError", back)
	}
	again := encodeFailure(failureReply{Code: back.Code, Also: back.Also, Message: back.Message})
	if !bytes.Equal(again, old) {
		t.Fatalf("re-encoded as\n%s\nwant the earlier bytes\n%s", again, old)
	}
	var previous struct { // failureReply as the previous release declared it
		Code    FailureCode   `json:"code"`
		Also    []FailureCode `json:"also,omitempty"`
		Message string        `json:"msg"`
	}
	if err := json.Unmarshal(readFailure(t, "unavailable.json"), &previous); err != nil ||
		previous.Code != FailureUnavailable || previous.Message != back.Message {
		t.Fatalf("the previous release reads the new bytes as %+v, %v", previous, err)
	}
}
