// Package codec turns registered Go values into (manifest, payload) pairs and back.
//
// It is the one place where Shoal serializes user types: the journal stores
// events with it, the snapshot store stores state with it, and node-to-node
// transport sends commands and replies with it. Every concrete type that
// crosses one of those boundaries is registered under a stable manifest name,
// so a renamed Go type does not orphan stored data.
//
// # Schema evolution
//
// Stored events live forever, and every read path (recovery, queries,
// projections) decodes them with DecodeAll, which sees them as today's
// types:
//
//   - a renamed manifest keeps decoding when the type lists its old names:
//     Register[Captured](r, "payment.Captured", Aliases("payment.Charged"));
//   - an old shape is upcast: Upcast[CapturedV1](r, "payment.Captured/v1",
//     func(old CapturedV1) []any { return []any{Captured{...}} }) decodes the
//     old JSON into CapturedV1 (a type kept only to describe it) and maps it
//     to no value (dropped), one, or several, in order; RegisterUpcaster does
//     the same from the raw payload. Results must be of registered types
//     (or another Upcast's old shape, which is upcast in turn).
//
// Decode and DecodeAs accept only one value per stored payload (snapshots
// are decoded that way: a state snapshot may be renamed or upcast one to
// one). See Example_schemaEvolution.
package codec

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"sync"
	"sync/atomic"
)

// ErrUnknownManifest is returned (wrapped in *UnknownManifestError) when a
// payload names a manifest that no registered type carries.
var ErrUnknownManifest = errors.New("codec: unknown manifest")

// ErrUnregisteredType is returned when a value of an unregistered type is
// encoded, or an upcaster yields one.
var ErrUnregisteredType = errors.New("codec: unregistered type")

// ErrConflict is matched by every registration that would give a stored
// name (manifest or alias) or a type a second meaning.
var ErrConflict = errors.New("codec: conflicting registration")

// ErrNotOneValue is returned by Decode (and DecodeAs) when the manifest's
// upcaster turns the stored payload into no value or several.
var ErrNotOneValue = errors.New("codec: upcast to other than one value")

// UnknownManifestError tells which manifest could not be decoded.
type UnknownManifestError struct{ Manifest string }

func (e *UnknownManifestError) Error() string {
	return fmt.Sprintf("codec: unknown manifest %q", e.Manifest)
}

func (e *UnknownManifestError) Unwrap() error { return ErrUnknownManifest }

// Serializer encodes and decodes values of the types registered with it.
// Unmarshal receives a pointer to a zero value of the registered type.
type Serializer interface {
	Marshal(v any) ([]byte, error)
	Unmarshal(data []byte, ptr any) error
}

// ValueDecoder is a Serializer that builds the decoded value itself:
// Decode then hands its result over as it is, sparing the zero value that
// Unmarshal fills and the copy of it into an interface. The value must be
// of the type the serializer is registered for.
type ValueDecoder interface {
	Serializer
	DecodeValue(data []byte) (any, error)
}

// Appender is a Serializer that can append a value's encoding to a buffer
// (see AppendEncode), sparing a buffer of its own per value.
type Appender interface {
	Serializer
	AppendMarshal(dst []byte, v any) ([]byte, error)
}

// JSON is the default Serializer.
type JSON struct{}

func (JSON) Marshal(v any) ([]byte, error)        { return json.Marshal(v) }
func (JSON) Unmarshal(data []byte, ptr any) error { return json.Unmarshal(data, ptr) }

type binding struct {
	manifest   string   // what Encode writes
	aliases    []string // older manifests that decode to typ too
	typ        reflect.Type
	serializer Serializer
	// empty is the zero value of typ when typ is a struct without fields
	// under the JSON serializer (a marker message: Stop{}, Tick{}): its
	// encoding is always {}, and {} or null decode to this value, so
	// neither takes encoding/json. Nil otherwise.
	empty any
	// plan writes and reads typ under the JSON serializer without
	// encoding/json when typ is a plain struct (see jsonPlan); nil
	// otherwise.
	plan *jsonPlan
}

// emptyJSON is the encoding JSON gives every struct without fields.
const emptyJSON = "{}"

// setJSONPaths sets b.empty for a marker type, or b.plan for another
// plain struct, under the JSON serializer. A type with its own JSON or
// text (un)marshalling is left to encoding/json.
func (b *binding) setJSONPaths() {
	b.empty, b.plan = nil, nil
	if _, ok := b.serializer.(JSON); !ok || b.typ.Kind() != reflect.Struct || hasOwnMethods(b.typ) {
		return
	}
	if b.typ.NumField() == 0 {
		b.empty = reflect.Zero(b.typ).Interface()
		return
	}
	b.plan = compileJSONPlan(b.typ)
}

// isEmptyObject reports whether data is a JSON document that
// json.Unmarshal turns into the zero value of any struct without fields
// without error and without looking at a field: {} or null, with JSON
// whitespace around and inside the braces. Anything else (fields, which
// such a struct ignores, or garbage) is left to encoding/json, so the
// values and errors stay exactly encoding/json's.
func isEmptyObject(data []byte) bool {
	data = trimJSONSpace(data)
	if string(data) == "null" {
		return true
	}
	if len(data) < 2 || data[0] != '{' || data[len(data)-1] != '}' {
		return false
	}
	return len(trimJSONSpace(data[1:len(data)-1])) == 0
}

func trimJSONSpace(b []byte) []byte {
	for len(b) > 0 && isJSONSpace(b[0]) {
		b = b[1:]
	}
	for len(b) > 0 && isJSONSpace(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return b
}

func isJSONSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// decode rebuilds a value of b's type; stored names the manifest the
// payload was stored under (b's manifest or one of its aliases).
func (b *binding) decode(stored string, payload []byte) (any, error) {
	if b.empty != nil && isEmptyObject(payload) {
		return b.empty, nil
	}
	if b.plan != nil {
		if v, ok := b.plan.decodeJSON(payload); ok {
			return v, nil
		}
	}
	if d, ok := b.serializer.(ValueDecoder); ok {
		v, err := d.DecodeValue(payload)
		if err != nil {
			return nil, fmt.Errorf("codec: decode %q: %w", stored, err)
		}
		return v, nil
	}
	ptr := reflect.New(b.typ)
	if err := b.serializer.Unmarshal(payload, ptr.Interface()); err != nil {
		return nil, fmt.Errorf("codec: decode %q: %w", stored, err)
	}
	return ptr.Elem().Interface(), nil
}

// Registry maps concrete types to manifests. It is safe for concurrent use;
// register every type before the first message flows.
type Registry struct {
	// bound is read without a lock, once or more per message; a
	// registration replaces it whole, under mu.
	bound     atomic.Pointer[bindings]
	mu        sync.RWMutex
	upcasters map[string]*upcaster
	byOldType map[reflect.Type]*upcaster // typed upcasters, by their old shape
	fallback  Serializer
}

// bindings are the registered types; never modified once published.
type bindings struct {
	byType     map[reflect.Type]*binding
	byManifest map[string]*binding // manifests and their aliases
	cache      typeCache           // byType's entries looked up lately
}

// NewRegistry returns an empty registry whose types use JSON unless they are
// registered with their own serializer.
func NewRegistry() *Registry {
	r := &Registry{
		upcasters: make(map[string]*upcaster),
		byOldType: make(map[reflect.Type]*upcaster),
		fallback:  JSON{},
	}
	r.bound.Store(&bindings{byType: make(map[reflect.Type]*binding), byManifest: make(map[string]*binding)})
	return r
}

// Option configures one registration.
type Option func(*binding)

// WithSerializer uses s instead of JSON for the registered type.
func WithSerializer(s Serializer) Option { return func(b *binding) { b.serializer = s } }

// Register binds T to manifest. Registering the same type under the same
// manifest twice is harmless (a repeat may add aliases); any other clash is
// an error matching ErrConflict, because two meanings for one stored name
// would corrupt recovery. A failed registration changes nothing.
func Register[T any](r *Registry, manifest string, opts ...Option) error {
	if manifest == "" {
		return errors.New("codec: empty manifest")
	}
	typ := reflect.TypeFor[T]()
	if typ.Kind() == reflect.Interface {
		return fmt.Errorf("codec: cannot register interface type %v; register its concrete types", typ)
	}
	b := &binding{manifest: manifest, typ: typ, serializer: r.fallback}
	for _, o := range opts {
		o(b)
	}
	b.setJSONPaths()
	for _, a := range b.aliases {
		if a == "" {
			return fmt.Errorf("codec: empty alias for %q", manifest)
		}
		if a == manifest {
			return fmt.Errorf("%w: %q is both the manifest of %v and its alias", ErrConflict, a, typ)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	bound := r.bound.Load()
	if old, ok := bound.byType[typ]; ok && old.manifest != manifest {
		return fmt.Errorf("%w: type %v already registered as %q", ErrConflict, typ, old.manifest)
	}
	if u, ok := r.byOldType[typ]; ok {
		return fmt.Errorf("%w: type %v is the old shape upcast from %q; it cannot be a current type too", ErrConflict, typ, u.manifest)
	}
	for _, name := range append([]string{manifest}, b.aliases...) {
		if err := r.checkFreeLocked(name, typ); err != nil {
			return err
		}
	}
	if old, ok := bound.byType[typ]; ok {
		b.aliases = mergeAliases(old.aliases, b.aliases)
	} else {
		b.aliases = mergeAliases(nil, b.aliases)
	}
	next := &bindings{byType: maps.Clone(bound.byType), byManifest: maps.Clone(bound.byManifest)}
	next.byType[typ] = b
	next.byManifest[manifest] = b
	for _, a := range b.aliases {
		next.byManifest[a] = b
	}
	r.bound.Store(next)
	return nil
}

// MustRegister is Register for program setup, where a clash is a bug.
func MustRegister[T any](r *Registry, manifest string, opts ...Option) {
	if err := Register[T](r, manifest, opts...); err != nil {
		panic(err)
	}
}

// Manifest reports the manifest v's type is registered under.
func (r *Registry) Manifest(v any) (string, bool) {
	b := r.lookupType(reflect.TypeOf(v))
	if b == nil {
		return "", false
	}
	return b.manifest, true
}

func (r *Registry) lookupType(t reflect.Type) *binding { return r.bound.Load().lookupType(t) }

// Encode serializes v, whose dynamic type must be registered.
func (r *Registry) Encode(v any) (manifest string, payload []byte, err error) {
	b := r.lookupType(reflect.TypeOf(v))
	if b == nil {
		return "", nil, fmt.Errorf("%w: %T", ErrUnregisteredType, v)
	}
	if b.empty != nil {
		return b.manifest, []byte(emptyJSON), nil
	}
	if b.plan != nil {
		if payload, ok := b.plan.appendJSON(nil, v); ok {
			return b.manifest, payload, nil
		}
	}
	payload, err = b.serializer.Marshal(v)
	if err != nil {
		return "", nil, fmt.Errorf("codec: encode %q: %w", b.manifest, err)
	}
	return b.manifest, payload, nil
}

// AppendEncode is Encode appending the payload to dst: with a serializer
// that is an Appender, without a buffer of its own. On error it returns
// dst unchanged.
func (r *Registry) AppendEncode(dst []byte, v any) (manifest string, out []byte, err error) {
	b := r.lookupType(reflect.TypeOf(v))
	if b == nil {
		return "", dst, fmt.Errorf("%w: %T", ErrUnregisteredType, v)
	}
	return b.appendEncode(dst, v)
}

// AppendPrefixed appends v's manifest and then its payload to dst, each
// prefixed by its length as a uvarint: the form in which a message and
// its type travel inside a frame or an envelope, written with one look-up
// of v's type. On error it returns dst unchanged.
func (r *Registry) AppendPrefixed(dst []byte, v any) (manifest string, out []byte, err error) {
	b := r.lookupType(reflect.TypeOf(v))
	if b == nil {
		return "", dst, fmt.Errorf("%w: %T", ErrUnregisteredType, v)
	}
	start := len(dst)
	dst = binary.AppendUvarint(dst, uint64(len(b.manifest)))
	dst = append(dst, b.manifest...)
	// One byte is reserved for the payload's length, the size of the
	// prefix of any payload under 128 bytes; the payload moves along when
	// its prefix needs more.
	at := len(dst)
	dst = append(dst, 0)
	if _, dst, err = b.appendEncode(dst, v); err != nil {
		return "", dst[:start], err
	}
	n := len(dst) - at - 1
	if n < 0x80 {
		dst[at] = byte(n)
		return b.manifest, dst, nil
	}
	var prefix [binary.MaxVarintLen64]byte
	p := binary.PutUvarint(prefix[:], uint64(n))
	dst = append(dst, prefix[1:p]...)
	copy(dst[at+p:], dst[at+1:at+1+n])
	copy(dst[at:], prefix[:p])
	return b.manifest, dst, nil
}

// appendEncode appends v's payload to dst; on error it returns dst
// unchanged.
func (b *binding) appendEncode(dst []byte, v any) (manifest string, out []byte, err error) {
	if b.empty != nil {
		return b.manifest, append(dst, emptyJSON...), nil
	}
	if b.plan != nil {
		if out, ok := b.plan.appendJSON(dst, v); ok {
			return b.manifest, out, nil
		}
	}
	if a, ok := b.serializer.(Appender); ok {
		out, err = a.AppendMarshal(dst, v)
	} else {
		var payload []byte
		payload, err = b.serializer.Marshal(v)
		out = append(dst, payload...)
	}
	if err != nil {
		return "", dst, fmt.Errorf("codec: encode %q: %w", b.manifest, err)
	}
	return b.manifest, out, nil
}

// Decode rebuilds the value stored under manifest: a registered manifest or
// one of its aliases decodes to the registered type; a manifest with an
// upcaster decodes to the upcaster's result, which must be exactly one value
// (ErrNotOneValue otherwise: use DecodeAll where an old event may have
// become several, or none).
func (r *Registry) Decode(manifest string, payload []byte) (any, error) {
	b := r.bound.Load().byManifest[manifest]
	if b != nil {
		return b.decode(manifest, payload)
	}
	vs, err := r.upcast(nil, manifest, payload)
	if err != nil {
		return nil, err
	}
	if len(vs) != 1 {
		return nil, fmt.Errorf("%w: manifest %q upcasts to %d values", ErrNotOneValue, manifest, len(vs))
	}
	return vs[0], nil
}

// DecodeBorrowed is Decode of a payload the caller lends for the call
// only, and writes again after it: the value it returns shares no memory
// with payload. The JSON serializer copies what it decodes (encoding/json
// requires the same of UnmarshalJSON and UnmarshalText), so its payloads
// are decoded in place; another serializer, or an upcaster, may keep a
// part of its input, and gets a copy.
func (r *Registry) DecodeBorrowed(manifest string, payload []byte) (any, error) {
	if b := r.bound.Load().byManifest[manifest]; b != nil {
		if _, copies := b.serializer.(JSON); !copies {
			payload = bytes.Clone(payload)
		}
		return b.decode(manifest, payload)
	}
	return r.Decode(manifest, bytes.Clone(payload))
}

// ErrTypeMismatch is returned by DecodeAs when the stored value is not a T.
var ErrTypeMismatch = errors.New("codec: decoded value has unexpected type")

// DecodeAs decodes and checks that the value is a T (T may be an interface
// the registered type implements).
func DecodeAs[T any](r *Registry, manifest string, payload []byte) (T, error) {
	var zero T
	v, err := r.Decode(manifest, payload)
	if err != nil {
		return zero, err
	}
	t, ok := v.(T)
	if !ok {
		return zero, fmt.Errorf("%w: manifest %q holds %T, want %v", ErrTypeMismatch, manifest, v, reflect.TypeFor[T]())
	}
	return t, nil
}

// RoundTrip encodes and decodes v, returning the copy as a T. It is what the
// force-serialization test mode does to every local message.
func RoundTrip[T any](r *Registry, v T) (T, error) {
	m, p, err := r.Encode(v)
	if err != nil {
		var zero T
		return zero, err
	}
	return DecodeAs[T](r, m, p)
}

// DecodeAll rebuilds what is stored under manifest as the values a reader
// sees today: one value, or several or none when an upcaster registered for
// the manifest splits or drops an old event. Every read path of stored
// events (recovery, queries, projections) decodes through it, so each sees
// the same history.
func (r *Registry) DecodeAll(manifest string, payload []byte) ([]any, error) {
	return r.AppendDecoded(nil, manifest, payload)
}

// AppendDecoded is DecodeAll appending to dst, for readers that decode many
// events and reuse one slice. On error it returns dst unchanged.
func (r *Registry) AppendDecoded(dst []any, manifest string, payload []byte) ([]any, error) {
	b := r.bound.Load().byManifest[manifest]
	if b == nil {
		out, err := r.upcast(dst, manifest, payload)
		if err != nil {
			return dst, err
		}
		return out, nil
	}
	v, err := b.decode(manifest, payload)
	if err != nil {
		return dst, err
	}
	return append(dst, v), nil
}
