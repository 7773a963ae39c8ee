package codec

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
)

// Stored events live forever, so the names and shapes they were written
// with must keep decoding after the code moved on (docs/DESIGN.md, Schema
// evolution). Two tools do it, both applied on every read path through
// DecodeAll:
//
//   - an alias (the Aliases option of Register) is an old manifest of a
//     registered type: the payload is decoded as that type, as it is;
//   - an upcaster (RegisterUpcaster, Upcast) owns an old manifest whose
//     payload has another shape, and maps it to zero, one or several values
//     of registered types.
//
// A stored name has exactly one meaning: a manifest, an alias or an
// upcaster's manifest, never two of them.

// ErrUpcastLoop is matched (inside *UpcastError) when typed upcasters keep
// yielding old shapes instead of reaching registered types.
var ErrUpcastLoop = errors.New("codec: upcasters form a loop")

// UpcastError is why an upcaster could not turn a stored payload into
// registered values: its payload did not decode as the old shape, the
// upcaster failed or panicked, or it yielded a value of an unregistered
// type (then it matches ErrUnregisteredType).
type UpcastError struct {
	Manifest string // the stored manifest
	Err      error
}

func (e *UpcastError) Error() string {
	return fmt.Sprintf("codec: upcast %q: %v", e.Manifest, e.Err)
}

func (e *UpcastError) Unwrap() error { return e.Err }

// Aliases lets payloads stored under older manifests decode to the
// registered type; Encode keeps writing the current manifest. Use it when a
// type's manifest is renamed and its shape still decodes.
func Aliases(oldManifests ...string) Option {
	return func(b *binding) { b.aliases = append(b.aliases, oldManifests...) }
}

// upcaster maps payloads stored under manifest to current values.
type upcaster struct {
	manifest  string
	fromBytes func([]byte) ([]any, error)
	// fromValue maps a value of the old shape; nil for raw upcasters.
	fromValue func(any) []any
}

// RegisterUpcaster registers fn for payloads stored under oldManifest: fn
// gets the raw stored bytes and returns the values a reader sees instead,
// none (the event is dropped), one or several (in order). Each value must be
// of a registered type, or an old shape registered with Upcast (which is
// then upcast in turn). fn must not keep or change payload: it is the
// reader's buffer. oldManifest must not be a registered manifest or alias,
// nor have an upcaster already.
func RegisterUpcaster(r *Registry, oldManifest string, fn func(payload []byte) ([]any, error)) error {
	if fn == nil {
		return errors.New("codec: nil upcaster")
	}
	return r.addUpcaster(&upcaster{manifest: oldManifest, fromBytes: fn}, nil, nil)
}

// MustRegisterUpcaster is RegisterUpcaster for program setup, where a
// clash is a bug.
func MustRegisterUpcaster(r *Registry, oldManifest string, fn func(payload []byte) ([]any, error)) {
	if err := RegisterUpcaster(r, oldManifest, fn); err != nil {
		panic(err)
	}
}

// Upcast registers fn for payloads stored under oldManifest in the shape of
// Old: the payload is decoded into an Old (with JSON, or WithSerializer's
// serializer; Aliases adds more old manifests of the same shape) and fn
// maps it to the values a reader sees instead, none, one or several.
//
// Old is not registered for encoding: it only describes what was stored.
// Chains work: a value of another Upcast registration's Old type in fn's
// result is upcast in turn, so v1 -> v2 -> v3 can be written as one step
// per version. Mapping straight to the current type is as good and cheaper.
func Upcast[Old any](r *Registry, oldManifest string, fn func(Old) []any, opts ...Option) error {
	if fn == nil {
		return errors.New("codec: nil upcaster")
	}
	typ := reflect.TypeFor[Old]()
	if typ.Kind() == reflect.Interface {
		return fmt.Errorf("codec: cannot upcast from interface type %v; use a concrete type", typ)
	}
	shape := &binding{manifest: oldManifest, typ: typ, serializer: r.fallback}
	for _, o := range opts {
		o(shape)
	}
	u := &upcaster{
		manifest: oldManifest,
		fromBytes: func(payload []byte) ([]any, error) {
			var old Old
			if err := shape.serializer.Unmarshal(payload, &old); err != nil {
				return nil, fmt.Errorf("decode as %v: %w", typ, err)
			}
			return fn(old), nil
		},
		fromValue: func(v any) []any { return fn(v.(Old)) },
	}
	return r.addUpcaster(u, typ, shape.aliases)
}

// MustUpcast is Upcast for program setup, where a clash is a bug.
func MustUpcast[Old any](r *Registry, oldManifest string, fn func(Old) []any, opts ...Option) {
	if err := Upcast(r, oldManifest, fn, opts...); err != nil {
		panic(err)
	}
}

// addUpcaster registers u under its manifest and aliases, and under its old
// shape when it has one.
func (r *Registry) addUpcaster(u *upcaster, oldType reflect.Type, aliases []string) error {
	names := append([]string{u.manifest}, aliases...)
	for _, n := range names {
		if n == "" {
			return errors.New("codec: empty manifest")
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, n := range names {
		if slices.Contains(names[:i], n) {
			continue
		}
		if err := r.checkFreeLocked(n, nil); err != nil {
			return err
		}
	}
	if oldType != nil {
		if b, ok := r.bound.Load().byType[oldType]; ok {
			return fmt.Errorf("%w: old shape %v is registered as the current type of %q", ErrConflict, oldType, b.manifest)
		}
		if other, ok := r.byOldType[oldType]; ok {
			return fmt.Errorf("%w: old shape %v already upcast from %q", ErrConflict, oldType, other.manifest)
		}
		r.byOldType[oldType] = u
	}
	for _, n := range names {
		r.upcasters[n] = u
	}
	return nil
}

// checkFreeLocked reports whether name may be bound to typ (nil for an
// upcaster): unbound, or already bound to typ itself.
func (r *Registry) checkFreeLocked(name string, typ reflect.Type) error {
	if b, ok := r.bound.Load().byManifest[name]; ok && (typ == nil || b.typ != typ) {
		what := "manifest"
		if b.manifest != name {
			what = "alias"
		}
		return fmt.Errorf("%w: %q is already the %s of %v", ErrConflict, name, what, b.typ)
	}
	if _, ok := r.upcasters[name]; ok {
		return fmt.Errorf("%w: %q already has an upcaster", ErrConflict, name)
	}
	return nil
}

func mergeAliases(old, added []string) []string {
	out := slices.Clone(old)
	for _, a := range added {
		if !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

// upcast appends what the upcaster of manifest makes of payload to dst.
func (r *Registry) upcast(dst []any, manifest string, payload []byte) (out []any, err error) {
	r.mu.RLock()
	u := r.upcasters[manifest]
	r.mu.RUnlock()
	if u == nil {
		return nil, &UnknownManifestError{Manifest: manifest}
	}
	defer func() {
		// An upcaster is user code meeting old data: a panic on one odd row
		// must fail that read, not the process.
		if v := recover(); v != nil {
			out, err = nil, &UpcastError{Manifest: manifest, Err: fmt.Errorf("upcaster panicked: %v", v)}
		}
	}()
	vs, err := u.fromBytes(payload)
	if err != nil {
		return nil, &UpcastError{Manifest: manifest, Err: err}
	}
	return r.resolve(dst, manifest, vs, 0)
}

// resolve appends vs to dst, upcasting values of old shapes further; hops
// counts the typed upcasters applied so far on this chain.
func (r *Registry) resolve(dst []any, manifest string, vs []any, hops int) ([]any, error) {
	for _, v := range vs {
		t := reflect.TypeOf(v)
		_, current := r.bound.Load().byType[t]
		r.mu.RLock()
		u := r.byOldType[t]
		shapes := len(r.byOldType)
		r.mu.RUnlock()
		switch {
		case current:
			dst = append(dst, v)
		case u != nil:
			// A chain longer than the number of old shapes visits one twice.
			if hops >= shapes {
				return nil, &UpcastError{Manifest: manifest, Err: fmt.Errorf("%w: %v reached again", ErrUpcastLoop, t)}
			}
			var err error
			if dst, err = r.resolve(dst, manifest, u.fromValue(v), hops+1); err != nil {
				return nil, err
			}
		default:
			return nil, &UpcastError{Manifest: manifest, Err: fmt.Errorf("%w: result %T", ErrUnregisteredType, v)}
		}
	}
	return dst, nil
}
