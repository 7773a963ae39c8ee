package codec_test

import (
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/shoal-dev/shoal/entity/codec"
)

// Old shapes, only ever read.
type (
	depositedV1 struct {
		Acct  string
		Cents int
	}
	depositedV2 struct {
		Account string
		Cents   int
	}
	transferredV1 struct {
		Amount int
	}
	loopA struct{ N int }
	loopB struct{ N int }
)

func decodeAll(t *testing.T, r *codec.Registry, manifest, payload string) []any {
	t.Helper()
	vs, err := r.DecodeAll(manifest, []byte(payload))
	if err != nil {
		t.Fatalf("DecodeAll(%q) = %v", manifest, err)
	}
	return vs
}

func wantValues(t *testing.T, got []any, want ...any) {
	t.Helper()
	if len(got) != len(want) || (len(want) > 0 && !reflect.DeepEqual(got, want)) {
		t.Fatalf("decoded %#v, want %#v", got, want)
	}
}

func TestAliasDecodesOldManifestAndEncodesCurrent(t *testing.T) {
	r := codec.NewRegistry()
	codec.MustRegister[Deposited](r, "bank.Deposited", codec.Aliases("bank.Credited", "Credited"))

	for _, m := range []string{"bank.Deposited", "bank.Credited", "Credited"} {
		wantValues(t, decodeAll(t, r, m, `{"Account":"a","Amount":3}`), Deposited{Account: "a", Amount: 3})
		d, err := codec.DecodeAs[Deposited](r, m, []byte(`{"Amount":4}`))
		if err != nil || d.Amount != 4 {
			t.Fatalf("DecodeAs(%q) = %#v, %v", m, d, err)
		}
	}
	m, _, err := r.Encode(Deposited{})
	if err != nil || m != "bank.Deposited" {
		t.Fatalf("Encode wrote manifest %q, %v; want the current one", m, err)
	}
	if m, _ := r.Manifest(Deposited{}); m != "bank.Deposited" {
		t.Fatalf("Manifest = %q, want the current one", m)
	}
	// A corrupt payload under an alias names the alias it was stored under.
	if _, err := r.DecodeAll("bank.Credited", []byte(`{`)); err == nil || !strings.Contains(err.Error(), "bank.Credited") {
		t.Fatalf("corrupt aliased payload: %v", err)
	}
}

func TestAliasesAddedByRepeatedRegistration(t *testing.T) {
	r := codec.NewRegistry()
	codec.MustRegister[Deposited](r, "dep", codec.Aliases("old1"))
	// Same type and manifest again: harmless, and the new alias adds up.
	if err := codec.Register[Deposited](r, "dep", codec.Aliases("old1", "old2")); err != nil {
		t.Fatal(err)
	}
	if err := codec.Register[Deposited](r, "dep"); err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"dep", "old1", "old2"} {
		wantValues(t, decodeAll(t, r, m, `{"Amount":1}`), Deposited{Amount: 1})
	}
}

func TestUpcastOneToOne(t *testing.T) {
	r := codec.NewRegistry()
	codec.MustRegister[Deposited](r, "dep")
	codec.MustUpcast(r, "dep/v1", func(old depositedV1) []any {
		return []any{Deposited{Account: old.Acct, Amount: old.Cents}}
	})
	payload := `{"Acct":"a-9","Cents":250}`
	want := Deposited{Account: "a-9", Amount: 250}
	wantValues(t, decodeAll(t, r, "dep/v1", payload), want)
	v, err := r.Decode("dep/v1", []byte(payload))
	if err != nil || v != want {
		t.Fatalf("Decode = %#v, %v", v, err)
	}
	e, err := codec.DecodeAs[Event](r, "dep/v1", []byte(payload))
	if err != nil || e != want {
		t.Fatalf("DecodeAs[Event] = %#v, %v", e, err)
	}
	// The old shape is not a registered type: it cannot be written.
	if _, _, err := r.Encode(depositedV1{}); !errors.Is(err, codec.ErrUnregisteredType) {
		t.Fatalf("Encode(old shape) = %v, want ErrUnregisteredType", err)
	}
}

func TestUpcastOneToMany(t *testing.T) {
	r := codec.NewRegistry()
	codec.MustRegister[Deposited](r, "dep")
	codec.MustRegister[Withdrawn](r, "wd")
	// A transfer of old was a withdrawal from one account and a deposit to
	// another; the order is the order the reader sees.
	codec.MustUpcast(r, "transferred/v1", func(old transferredV1) []any {
		return []any{Withdrawn{Amount: old.Amount}, Deposited{Account: "to", Amount: old.Amount}}
	})
	wantValues(t, decodeAll(t, r, "transferred/v1", `{"Amount":7}`),
		Withdrawn{Amount: 7}, Deposited{Account: "to", Amount: 7})

	if _, err := r.Decode("transferred/v1", []byte(`{"Amount":7}`)); !errors.Is(err, codec.ErrNotOneValue) {
		t.Fatalf("Decode of a split event = %v, want ErrNotOneValue", err)
	}
	if _, err := codec.DecodeAs[Event](r, "transferred/v1", []byte(`{"Amount":7}`)); !errors.Is(err, codec.ErrNotOneValue) {
		t.Fatalf("DecodeAs of a split event = %v, want ErrNotOneValue", err)
	}
}

func TestUpcastOneToNoneDrops(t *testing.T) {
	r := codec.NewRegistry()
	calls := 0
	codec.MustRegisterUpcaster(r, "audit.Pinged", func(p []byte) ([]any, error) {
		calls++
		if string(p) != "raw bytes" {
			t.Errorf("upcaster got %q, want the stored payload", p)
		}
		return nil, nil
	})
	vs, err := r.DecodeAll("audit.Pinged", []byte("raw bytes"))
	if err != nil || len(vs) != 0 {
		t.Fatalf("DecodeAll of a dropped event = %#v, %v; want none", vs, err)
	}
	if calls != 1 {
		t.Fatalf("upcaster ran %d times", calls)
	}
	if _, err := r.Decode("audit.Pinged", []byte("raw bytes")); !errors.Is(err, codec.ErrNotOneValue) {
		t.Fatalf("Decode of a dropped event = %v, want ErrNotOneValue", err)
	}
}

func TestUpcastChain(t *testing.T) {
	r := codec.NewRegistry()
	codec.MustRegister[Deposited](r, "dep")
	// One step per version: v1 -> v2 -> current.
	codec.MustUpcast(r, "dep/v1", func(old depositedV1) []any {
		return []any{depositedV2{Account: old.Acct, Cents: old.Cents}}
	})
	codec.MustUpcast(r, "dep/v2", func(old depositedV2) []any {
		return []any{Deposited{Account: old.Account, Amount: old.Cents}}
	})
	want := Deposited{Account: "a", Amount: 5}
	wantValues(t, decodeAll(t, r, "dep/v1", `{"Acct":"a","Cents":5}`), want)
	wantValues(t, decodeAll(t, r, "dep/v2", `{"Account":"a","Cents":5}`), want)
	if v, err := r.Decode("dep/v1", []byte(`{"Acct":"a","Cents":5}`)); err != nil || v != want {
		t.Fatalf("Decode through the chain = %#v, %v", v, err)
	}
	// A raw upcaster may hand over to a typed one, too.
	codec.MustRegisterUpcaster(r, "dep/v0", func(p []byte) ([]any, error) {
		return []any{depositedV1{Acct: string(p), Cents: 1}, Withdrawn{}}[:1], nil
	})
	wantValues(t, decodeAll(t, r, "dep/v0", "z"), Deposited{Account: "z", Amount: 1})
}

func TestUpcastLoopIsAnError(t *testing.T) {
	r := codec.NewRegistry()
	codec.MustUpcast(r, "a", func(v loopA) []any { return []any{loopB(v)} })
	codec.MustUpcast(r, "b", func(v loopB) []any { return []any{loopA(v)} })
	_, err := r.DecodeAll("a", []byte(`{}`))
	if !errors.Is(err, codec.ErrUpcastLoop) {
		t.Fatalf("looping upcasters = %v, want ErrUpcastLoop", err)
	}
	var ue *codec.UpcastError
	if !errors.As(err, &ue) || ue.Manifest != "a" {
		t.Fatalf("err = %#v, want *UpcastError for manifest a", err)
	}
}

func TestUpcastResultMustBeRegistered(t *testing.T) {
	r := codec.NewRegistry()
	codec.MustRegister[Deposited](r, "dep")
	codec.MustRegisterUpcaster(r, "note/v1", func([]byte) ([]any, error) {
		return []any{Deposited{}, Note{Text: "unregistered"}}, nil
	})
	codec.MustRegisterUpcaster(r, "nil/v1", func([]byte) ([]any, error) { return []any{nil}, nil })
	codec.MustRegisterUpcaster(r, "ptr/v1", func([]byte) ([]any, error) { return []any{&Deposited{}}, nil })
	for _, m := range []string{"note/v1", "nil/v1", "ptr/v1"} {
		vs, err := r.DecodeAll(m, nil)
		if !errors.Is(err, codec.ErrUnregisteredType) || vs != nil {
			t.Fatalf("DecodeAll(%q) = %#v, %v; want ErrUnregisteredType and nothing", m, vs, err)
		}
		var ue *codec.UpcastError
		if !errors.As(err, &ue) || ue.Manifest != m {
			t.Fatalf("DecodeAll(%q) = %#v, want *UpcastError naming it", m, err)
		}
		if _, err := r.Decode(m, nil); !errors.Is(err, codec.ErrUnregisteredType) {
			t.Fatalf("Decode(%q) = %v, want ErrUnregisteredType", m, err)
		}
	}
}

var errBadRow = errors.New("bad old row")

func TestUpcasterFailures(t *testing.T) {
	r := codec.NewRegistry()
	codec.MustRegister[Deposited](r, "dep")
	codec.MustRegisterUpcaster(r, "fails", func([]byte) ([]any, error) { return nil, errBadRow })
	codec.MustRegisterUpcaster(r, "panics", func([]byte) ([]any, error) { panic("odd row") })
	codec.MustUpcast(r, "typed", func(old depositedV1) []any { return []any{Deposited{Amount: old.Cents}} })

	cases := []struct {
		manifest, payload string
		is                error
		says              string
	}{
		{"fails", "", errBadRow, "bad old row"},
		{"panics", "", nil, "odd row"},
		{"typed", `{"Cents":`, nil, "depositedV1"}, // the old shape does not decode
	}
	for _, c := range cases {
		_, err := r.DecodeAll(c.manifest, []byte(c.payload))
		var ue *codec.UpcastError
		if !errors.As(err, &ue) || ue.Manifest != c.manifest {
			t.Fatalf("%s: err = %v, want *UpcastError naming the manifest", c.manifest, err)
		}
		if c.is != nil && !errors.Is(err, c.is) {
			t.Fatalf("%s: err = %v does not wrap %v", c.manifest, err, c.is)
		}
		if !strings.Contains(err.Error(), c.says) || !strings.Contains(err.Error(), c.manifest) {
			t.Fatalf("%s: message %q does not say %q and the manifest", c.manifest, err, c.says)
		}
		if _, err := r.Decode(c.manifest, []byte(c.payload)); !errors.As(err, &ue) {
			t.Fatalf("%s: Decode err = %v, want *UpcastError", c.manifest, err)
		}
	}
}

func TestUnknownManifestWithEvolution(t *testing.T) {
	r := codec.NewRegistry()
	codec.MustRegister[Deposited](r, "dep", codec.Aliases("dep-old"))
	codec.MustUpcast(r, "dep/v1", func(depositedV1) []any { return nil })
	for _, decode := range []func() error{
		func() error { _, err := r.DecodeAll("dep/v9", nil); return err },
		func() error { _, err := r.Decode("dep/v9", nil); return err },
		func() error { _, err := codec.DecodeAs[Deposited](r, "dep/v9", nil); return err },
	} {
		err := decode()
		var ume *codec.UnknownManifestError
		if !errors.Is(err, codec.ErrUnknownManifest) || !errors.As(err, &ume) || ume.Manifest != "dep/v9" {
			t.Fatalf("err = %v, want *UnknownManifestError for dep/v9", err)
		}
	}
}

func TestEvolutionClashes(t *testing.T) {
	setup := func() *codec.Registry {
		r := codec.NewRegistry()
		codec.MustRegister[Deposited](r, "dep", codec.Aliases("dep-old"))
		codec.MustUpcast(r, "dep/v1", func(old depositedV1) []any { return []any{Deposited{}} })
		return r
	}
	noop := func([]byte) ([]any, error) { return nil, nil }
	cases := []struct {
		name     string
		register func(*codec.Registry) error
	}{
		{"alias is another type's manifest", func(r *codec.Registry) error {
			return codec.Register[Withdrawn](r, "wd", codec.Aliases("dep"))
		}},
		{"alias is another type's alias", func(r *codec.Registry) error {
			return codec.Register[Withdrawn](r, "wd", codec.Aliases("dep-old"))
		}},
		{"manifest is another type's alias", func(r *codec.Registry) error {
			return codec.Register[Withdrawn](r, "dep-old")
		}},
		{"alias has an upcaster", func(r *codec.Registry) error {
			return codec.Register[Withdrawn](r, "wd", codec.Aliases("dep/v1"))
		}},
		{"manifest has an upcaster", func(r *codec.Registry) error {
			return codec.Register[Withdrawn](r, "dep/v1")
		}},
		{"alias is the type's own manifest", func(r *codec.Registry) error {
			return codec.Register[Withdrawn](r, "wd", codec.Aliases("wd"))
		}},
		{"old shape registered as a current type", func(r *codec.Registry) error {
			return codec.Register[depositedV1](r, "v1-as-current")
		}},
		{"upcaster for a registered manifest", func(r *codec.Registry) error {
			return codec.RegisterUpcaster(r, "dep", noop)
		}},
		{"upcaster for an alias", func(r *codec.Registry) error {
			return codec.RegisterUpcaster(r, "dep-old", noop)
		}},
		{"second upcaster for a manifest", func(r *codec.Registry) error {
			return codec.RegisterUpcaster(r, "dep/v1", noop)
		}},
		{"typed upcaster whose alias has an upcaster", func(r *codec.Registry) error {
			return codec.Upcast(r, "dep/v2", func(depositedV2) []any { return nil }, codec.Aliases("dep/v1"))
		}},
		{"current type as an old shape", func(r *codec.Registry) error {
			return codec.Upcast(r, "dep/v0", func(Deposited) []any { return nil })
		}},
		{"old shape upcast from two manifests", func(r *codec.Registry) error {
			return codec.Upcast(r, "dep/v1b", func(depositedV1) []any { return nil })
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := setup()
			if err := c.register(r); !errors.Is(err, codec.ErrConflict) {
				t.Fatalf("err = %v, want ErrConflict", err)
			}
			// The failed registration changed nothing.
			wantValues(t, decodeAll(t, r, "dep-old", `{"Amount":2}`), Deposited{Amount: 2})
			wantValues(t, decodeAll(t, r, "dep/v1", `{}`), Deposited{})
			for _, m := range []string{"wd", "dep/v2", "dep/v0", "dep/v1b", "v1-as-current"} {
				if _, err := r.DecodeAll(m, []byte(`{}`)); !errors.Is(err, codec.ErrUnknownManifest) {
					t.Fatalf("%q decodes after a failed registration: %v", m, err)
				}
			}
			if _, ok := r.Manifest(Withdrawn{}); ok {
				t.Fatal("Withdrawn registered by a failed registration")
			}
		})
	}
}

func TestEvolutionRejectsBadInput(t *testing.T) {
	r := codec.NewRegistry()
	if err := codec.Register[Deposited](r, "dep", codec.Aliases("")); err == nil {
		t.Fatal("empty alias accepted")
	}
	if err := codec.RegisterUpcaster(r, "", func([]byte) ([]any, error) { return nil, nil }); err == nil {
		t.Fatal("empty upcaster manifest accepted")
	}
	if err := codec.RegisterUpcaster(r, "x", nil); err == nil {
		t.Fatal("nil upcaster accepted")
	}
	if err := codec.Upcast[depositedV1](r, "x", nil); err == nil {
		t.Fatal("nil typed upcaster accepted")
	}
	if err := codec.Upcast(r, "x", func(Event) []any { return nil }); err == nil {
		t.Fatal("interface old shape accepted")
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("MustRegisterUpcaster with a clash did not panic")
			}
		}()
		codec.MustRegisterUpcaster(r, "y", func([]byte) ([]any, error) { return nil, nil })
		codec.MustRegisterUpcaster(r, "y", func([]byte) ([]any, error) { return nil, nil })
	}()
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("MustUpcast with a clash did not panic")
			}
		}()
		codec.MustUpcast(r, "y", func(depositedV2) []any { return nil })
	}()
}

func TestUpcastWithSerializerAndAliases(t *testing.T) {
	r := codec.NewRegistry()
	codec.MustRegister[Deposited](r, "dep")
	u := &upper{}
	// Old notes were stored in the toy frame under two names.
	codec.MustUpcast(r, "note/v1", func(n Note) []any { return []any{Deposited{Account: n.Text}} },
		codec.WithSerializer(u), codec.Aliases("note/v0"))
	for _, m := range []string{"note/v1", "note/v0"} {
		wantValues(t, decodeAll(t, r, m, "v=abc"), Deposited{Account: "abc"})
	}
	if u.unmarshals.Load() != 2 {
		t.Fatalf("old shape decoded %d times by its serializer, want 2", u.unmarshals.Load())
	}
}

func TestAppendDecoded(t *testing.T) {
	r := codec.NewRegistry()
	codec.MustRegister[Deposited](r, "dep")
	codec.MustUpcast(r, "pair", func(transferredV1) []any { return []any{Deposited{Amount: 1}, Deposited{Amount: 2}} })
	buf := []any{"kept"}
	buf, err := r.AppendDecoded(buf, "pair", []byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	buf, err = r.AppendDecoded(buf, "dep", []byte(`{"Amount":3}`))
	if err != nil {
		t.Fatal(err)
	}
	wantValues(t, buf, "kept", Deposited{Amount: 1}, Deposited{Amount: 2}, Deposited{Amount: 3})
	out, err := r.AppendDecoded(buf, "nope", nil)
	if err == nil || len(out) != len(buf) {
		t.Fatalf("failed AppendDecoded = %d values, %v; want dst unchanged and an error", len(out), err)
	}
}

func TestEvolutionConcurrentUse(t *testing.T) {
	r := codec.NewRegistry()
	codec.MustRegister[Deposited](r, "dep", codec.Aliases("dep-old"))
	codec.MustUpcast(r, "dep/v1", func(old depositedV1) []any {
		return []any{Deposited{Amount: old.Cents}, Withdrawn{Amount: old.Cents}}
	})
	var wg sync.WaitGroup
	wg.Go(func() { codec.MustRegister[Withdrawn](r, "wd", codec.Aliases("wd-old")) })
	for range 4 {
		wg.Go(func() {
			for range 200 {
				if _, err := r.DecodeAll("dep-old", []byte(`{"Amount":1}`)); err != nil {
					t.Error(err)
					return
				}
				// Withdrawn may not be registered yet: then the result is unregistered.
				vs, err := r.DecodeAll("dep/v1", []byte(`{"Cents":1}`))
				if err != nil && !errors.Is(err, codec.ErrUnregisteredType) || err == nil && len(vs) != 2 {
					t.Errorf("DecodeAll = %#v, %v", vs, err)
					return
				}
			}
		})
	}
	wg.Wait()
	wantValues(t, decodeAll(t, r, "dep/v1", `{"Cents":1}`), Deposited{Amount: 1}, Withdrawn{Amount: 1})
}
