// Package codec turns registered Go values into (manifest, payload) pairs and back.
//
// It is the one place where Shoal serializes user types: the journal stores
// events with it, the snapshot store stores state with it, and node-to-node
// transport sends commands and replies with it. Every concrete type that
// crosses one of those boundaries is registered under a stable manifest name,
// so a renamed Go type does not orphan stored data.
package codec

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"
)

// ErrUnknownManifest is returned (wrapped in *UnknownManifestError) when a
// payload names a manifest that no registered type carries.
var ErrUnknownManifest = errors.New("codec: unknown manifest")

// ErrUnregisteredType is returned when a value of an unregistered type is encoded.
var ErrUnregisteredType = errors.New("codec: unregistered type")

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

// JSON is the default Serializer.
type JSON struct{}

func (JSON) Marshal(v any) ([]byte, error)        { return json.Marshal(v) }
func (JSON) Unmarshal(data []byte, ptr any) error { return json.Unmarshal(data, ptr) }

type binding struct {
	manifest   string
	typ        reflect.Type
	serializer Serializer
}

// Registry maps concrete types to manifests. It is safe for concurrent use;
// register every type before the first message flows.
type Registry struct {
	mu         sync.RWMutex
	byType     map[reflect.Type]*binding
	byManifest map[string]*binding
	fallback   Serializer
}

// NewRegistry returns an empty registry whose types use JSON unless they are
// registered with their own serializer.
func NewRegistry() *Registry {
	return &Registry{
		byType:     make(map[reflect.Type]*binding),
		byManifest: make(map[string]*binding),
		fallback:   JSON{},
	}
}

// Option configures one registration.
type Option func(*binding)

// WithSerializer uses s instead of JSON for the registered type.
func WithSerializer(s Serializer) Option { return func(b *binding) { b.serializer = s } }

// Register binds T to manifest. Registering the same type under the same
// manifest twice is harmless; any other clash is an error, because two
// meanings for one stored name would corrupt recovery.
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
	r.mu.Lock()
	defer r.mu.Unlock()
	if old, ok := r.byManifest[manifest]; ok && old.typ != typ {
		return fmt.Errorf("codec: manifest %q already bound to %v", manifest, old.typ)
	}
	if old, ok := r.byType[typ]; ok && old.manifest != manifest {
		return fmt.Errorf("codec: type %v already registered as %q", typ, old.manifest)
	}
	r.byType[typ] = b
	r.byManifest[manifest] = b
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

func (r *Registry) lookupType(t reflect.Type) *binding {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.byType[t]
}

// Encode serializes v, whose dynamic type must be registered.
func (r *Registry) Encode(v any) (manifest string, payload []byte, err error) {
	b := r.lookupType(reflect.TypeOf(v))
	if b == nil {
		return "", nil, fmt.Errorf("%w: %T", ErrUnregisteredType, v)
	}
	payload, err = b.serializer.Marshal(v)
	if err != nil {
		return "", nil, fmt.Errorf("codec: encode %q: %w", b.manifest, err)
	}
	return b.manifest, payload, nil
}

// Decode rebuilds the value stored under manifest.
func (r *Registry) Decode(manifest string, payload []byte) (any, error) {
	r.mu.RLock()
	b := r.byManifest[manifest]
	r.mu.RUnlock()
	if b == nil {
		return nil, &UnknownManifestError{Manifest: manifest}
	}
	ptr := reflect.New(b.typ)
	if err := b.serializer.Unmarshal(payload, ptr.Interface()); err != nil {
		return nil, fmt.Errorf("codec: decode %q: %w", manifest, err)
	}
	return ptr.Elem().Interface(), nil
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
// sees today: one value, or several when an upcaster registered for the
// manifest splits an old event. Every read path of stored events (recovery,
// queries, projections) decodes through it.
func (r *Registry) DecodeAll(manifest string, payload []byte) ([]any, error) {
	v, err := r.Decode(manifest, payload)
	if err != nil {
		return nil, err
	}
	return []any{v}, nil
}
