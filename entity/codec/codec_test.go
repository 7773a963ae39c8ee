package codec_test

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/shoal-dev/shoal/entity/codec"
)

type Event interface{ isEvent() }

type Deposited struct {
	Account string
	Amount  int
}

type Withdrawn struct{ Amount int }

func (Deposited) isEvent() {}
func (Withdrawn) isEvent() {}

type Note struct{ Text string }

func TestEncodeDecodeRoundTrip(t *testing.T) {
	r := codec.NewRegistry()
	if err := codec.Register[Deposited](r, "bank.Deposited"); err != nil {
		t.Fatal(err)
	}
	in := Deposited{Account: "a-1", Amount: 42}
	m, ok := r.Manifest(in)
	if !ok || m != "bank.Deposited" {
		t.Fatalf("Manifest = %q, %v", m, ok)
	}
	manifest, payload, err := r.Encode(in)
	if err != nil {
		t.Fatal(err)
	}
	if manifest != "bank.Deposited" {
		t.Fatalf("manifest = %q", manifest)
	}
	if !bytes.Contains(payload, []byte(`"Account":"a-1"`)) {
		t.Fatalf("payload %s is not the default JSON encoding", payload)
	}
	v, err := r.Decode(manifest, payload)
	if err != nil {
		t.Fatal(err)
	}
	got, ok := v.(Deposited)
	if !ok || got != in {
		t.Fatalf("Decode = %#v (%T), want %#v", v, v, in)
	}
}

func TestManifestOfUnregistered(t *testing.T) {
	r := codec.NewRegistry()
	if m, ok := r.Manifest(Note{}); ok || m != "" {
		t.Fatalf("Manifest of unregistered = %q, %v", m, ok)
	}
	if _, ok := r.Manifest(nil); ok {
		t.Fatal("Manifest(nil) reported a registration")
	}
}

func TestUnknownManifestIsTyped(t *testing.T) {
	r := codec.NewRegistry()
	codec.MustRegister[Deposited](r, "bank.Deposited")
	_, err := r.Decode("bank.Renamed", []byte(`{}`))
	if !errors.Is(err, codec.ErrUnknownManifest) {
		t.Fatalf("err = %v, want ErrUnknownManifest", err)
	}
	var ume *codec.UnknownManifestError
	if !errors.As(err, &ume) {
		t.Fatalf("err = %T, want *UnknownManifestError", err)
	}
	if ume.Manifest != "bank.Renamed" {
		t.Fatalf("Manifest = %q, want bank.Renamed", ume.Manifest)
	}
	if !strings.Contains(err.Error(), "bank.Renamed") {
		t.Fatalf("message %q does not name the manifest", err)
	}
	if _, err := codec.DecodeAs[Event](r, "nope", nil); !errors.Is(err, codec.ErrUnknownManifest) {
		t.Fatalf("DecodeAs unknown = %v, want ErrUnknownManifest", err)
	}
}

func TestEncodeUnregisteredType(t *testing.T) {
	r := codec.NewRegistry()
	codec.MustRegister[Deposited](r, "bank.Deposited")
	for _, v := range []any{Note{Text: "x"}, &Deposited{}, nil, 3} {
		_, _, err := r.Encode(v)
		if !errors.Is(err, codec.ErrUnregisteredType) {
			t.Fatalf("Encode(%#v) = %v, want ErrUnregisteredType", v, err)
		}
	}
	if _, err := codec.RoundTrip[any](r, Note{}); !errors.Is(err, codec.ErrUnregisteredType) {
		t.Fatalf("RoundTrip unregistered = %v", err)
	}
}

func TestConflictingRegistrations(t *testing.T) {
	r := codec.NewRegistry()
	if err := codec.Register[Deposited](r, "dep"); err != nil {
		t.Fatal(err)
	}
	// Same type, same manifest: harmless.
	if err := codec.Register[Deposited](r, "dep"); err != nil {
		t.Fatalf("re-registering identically: %v", err)
	}
	// Same manifest, other type.
	if err := codec.Register[Withdrawn](r, "dep"); err == nil {
		t.Fatal("registering a second type under a taken manifest succeeded")
	}
	// Same type, other manifest.
	if err := codec.Register[Deposited](r, "dep2"); err == nil {
		t.Fatal("registering a type under a second manifest succeeded")
	}
	// The failed registrations changed nothing.
	if _, ok := r.Manifest(Withdrawn{}); ok {
		t.Fatal("Withdrawn became registered by a failed Register")
	}
	if _, err := r.Decode("dep2", []byte(`{}`)); !errors.Is(err, codec.ErrUnknownManifest) {
		t.Fatalf("dep2 became decodable by a failed Register: %v", err)
	}
	v, err := r.Decode("dep", []byte(`{"Amount":5}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := v.(Deposited); !ok {
		t.Fatalf("dep decodes as %T after failed Register, want Deposited", v)
	}
	m, _ := r.Manifest(Deposited{})
	if m != "dep" {
		t.Fatalf("Deposited manifest = %q after failed Register", m)
	}
}

func TestRegisterRejectsBadInput(t *testing.T) {
	r := codec.NewRegistry()
	if err := codec.Register[Deposited](r, ""); err == nil {
		t.Fatal("empty manifest accepted")
	}
	if err := codec.Register[Event](r, "event"); err == nil {
		t.Fatal("interface type accepted")
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("MustRegister with a clash did not panic")
			}
		}()
		codec.MustRegister[Deposited](r, "x")
		codec.MustRegister[Withdrawn](r, "x")
	}()
}

func TestDecodeAs(t *testing.T) {
	r := codec.NewRegistry()
	codec.MustRegister[Deposited](r, "dep")
	codec.MustRegister[Note](r, "note")
	m, p, err := r.Encode(Deposited{Amount: 7})
	if err != nil {
		t.Fatal(err)
	}
	d, err := codec.DecodeAs[Deposited](r, m, p)
	if err != nil || d.Amount != 7 {
		t.Fatalf("DecodeAs[Deposited] = %#v, %v", d, err)
	}
	// An interface the registered type implements.
	e, err := codec.DecodeAs[Event](r, m, p)
	if err != nil {
		t.Fatal(err)
	}
	if dep, ok := e.(Deposited); !ok || dep.Amount != 7 {
		t.Fatalf("DecodeAs[Event] = %#v", e)
	}
	// Mismatch.
	if _, err := codec.DecodeAs[Withdrawn](r, m, p); !errors.Is(err, codec.ErrTypeMismatch) {
		t.Fatalf("DecodeAs[Withdrawn] = %v, want ErrTypeMismatch", err)
	}
	nm, np, _ := r.Encode(Note{Text: "hi"})
	if _, err := codec.DecodeAs[Event](r, nm, np); !errors.Is(err, codec.ErrTypeMismatch) {
		t.Fatalf("DecodeAs[Event] of a Note = %v, want ErrTypeMismatch", err)
	}
}

func TestDecodeCorruptPayload(t *testing.T) {
	r := codec.NewRegistry()
	codec.MustRegister[Deposited](r, "dep")
	_, err := r.Decode("dep", []byte(`{"Amount":`))
	if err == nil {
		t.Fatal("corrupt payload decoded")
	}
	if errors.Is(err, codec.ErrUnknownManifest) {
		t.Fatalf("corrupt payload reported as unknown manifest: %v", err)
	}
	if !strings.Contains(err.Error(), "dep") {
		t.Fatalf("error %q does not name the manifest", err)
	}
}

// upper is a toy serializer: "v=<text>" with the text upper-cased on the
// way out, so it is visible which serializer ran.
type upper struct{ marshals, unmarshals atomic.Int32 }

func (u *upper) Marshal(v any) ([]byte, error) {
	u.marshals.Add(1)
	n, ok := v.(Note)
	if !ok {
		return nil, fmt.Errorf("upper: cannot marshal %T", v)
	}
	return []byte("v=" + strings.ToUpper(n.Text)), nil
}

func (u *upper) Unmarshal(data []byte, ptr any) error {
	u.unmarshals.Add(1)
	p, ok := ptr.(*Note)
	if !ok {
		return fmt.Errorf("upper: cannot unmarshal into %T", ptr)
	}
	s, ok := strings.CutPrefix(string(data), "v=")
	if !ok {
		return errors.New("upper: bad frame")
	}
	p.Text = s
	return nil
}

func TestWithSerializerIsUsedForThatTypeOnly(t *testing.T) {
	r := codec.NewRegistry()
	u := &upper{}
	codec.MustRegister[Note](r, "note", codec.WithSerializer(u))
	codec.MustRegister[Deposited](r, "dep")

	m, p, err := r.Encode(Note{Text: "hello"})
	if err != nil {
		t.Fatal(err)
	}
	if m != "note" || string(p) != "v=HELLO" {
		t.Fatalf("Encode = %q %q, want note v=HELLO", m, p)
	}
	v, err := r.Decode(m, p)
	if err != nil {
		t.Fatal(err)
	}
	if v.(Note).Text != "HELLO" {
		t.Fatalf("Decode = %#v", v)
	}
	if u.marshals.Load() != 1 || u.unmarshals.Load() != 1 {
		t.Fatalf("custom serializer calls: %d marshal, %d unmarshal; want 1, 1", u.marshals.Load(), u.unmarshals.Load())
	}
	// Other types stay on JSON.
	_, dp, err := r.Encode(Deposited{Amount: 1})
	if err != nil || !bytes.HasPrefix(dp, []byte("{")) {
		t.Fatalf("Deposited payload %q, %v: not JSON", dp, err)
	}
	if u.marshals.Load() != 1 {
		t.Fatal("custom serializer used for another type")
	}
	// Serializer errors are wrapped and name the manifest.
	if _, err := r.Decode("note", []byte("garbage")); err == nil || !strings.Contains(err.Error(), "note") {
		t.Fatalf("bad frame: %v", err)
	}
}

type failing struct{}

var errNoMarshal = errors.New("no marshal")

func (failing) Marshal(any) ([]byte, error) { return nil, errNoMarshal }
func (failing) Unmarshal([]byte, any) error { return nil }

func TestSerializerErrorWrapped(t *testing.T) {
	r := codec.NewRegistry()
	codec.MustRegister[Note](r, "note", codec.WithSerializer(failing{}))
	_, _, err := r.Encode(Note{})
	if !errors.Is(err, errNoMarshal) {
		t.Fatalf("err = %v, want wrapping errNoMarshal", err)
	}
}

func TestPointerTypes(t *testing.T) {
	r := codec.NewRegistry()
	codec.MustRegister[*Deposited](r, "dep-ptr")
	in := &Deposited{Account: "p", Amount: 3}
	m, p, err := r.Encode(in)
	if err != nil {
		t.Fatal(err)
	}
	if m != "dep-ptr" {
		t.Fatalf("manifest = %q", m)
	}
	v, err := r.Decode(m, p)
	if err != nil {
		t.Fatal(err)
	}
	out, ok := v.(*Deposited)
	if !ok || out == nil {
		t.Fatalf("Decode = %#v (%T), want non-nil *Deposited", v, v)
	}
	if *out != *in || out == in {
		t.Fatalf("Decode = %p %#v, want a distinct copy of %#v", out, *out, *in)
	}
	// *T and T are different registrations.
	if _, _, err := r.Encode(Deposited{}); !errors.Is(err, codec.ErrUnregisteredType) {
		t.Fatalf("Encode(T) with only *T registered = %v", err)
	}
	// Pointer round trip through an interface the value type implements.
	ev, err := codec.RoundTrip[Event](r, Event(in))
	if err != nil {
		t.Fatal(err)
	}
	if d, ok := ev.(*Deposited); !ok || *d != *in {
		t.Fatalf("RoundTrip[Event] = %#v", ev)
	}
}

func TestRoundTripCopies(t *testing.T) {
	type withSlice struct{ Items []int }
	r := codec.NewRegistry()
	codec.MustRegister[withSlice](r, "ws")
	in := withSlice{Items: []int{1, 2}}
	out, err := codec.RoundTrip(r, in)
	if err != nil {
		t.Fatal(err)
	}
	in.Items[0] = 99
	if out.Items[0] != 1 {
		t.Fatal("RoundTrip result shares memory with its input")
	}
}

func TestConcurrentUse(t *testing.T) {
	r := codec.NewRegistry()
	codec.MustRegister[Deposited](r, "dep")
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			_ = codec.Register[Note](r, "note") // identical re-registration from many goroutines
			for j := range 200 {
				out, err := codec.RoundTrip(r, Deposited{Amount: i*1000 + j})
				if err != nil || out.Amount != i*1000+j {
					t.Errorf("RoundTrip = %#v, %v", out, err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// A repeated registration that changes a type's serializer takes effect
// for the next message, also after messages of the type were encoded.
func TestReRegistrationReplacesAnEncodedTypesSerializer(t *testing.T) {
	r := codec.NewRegistry()
	codec.MustRegister[Note](r, "note")
	if _, p, err := r.Encode(Note{Text: "a"}); err != nil || !bytes.HasPrefix(p, []byte("{")) {
		t.Fatalf("Encode = %q, %v, want JSON", p, err)
	}
	codec.MustRegister[Note](r, "note", codec.WithSerializer(&upper{}))
	if _, p, err := r.Encode(Note{Text: "a"}); err != nil || string(p) != "v=A" {
		t.Fatalf("Encode after re-registration = %q, %v, want v=A", p, err)
	}
}
