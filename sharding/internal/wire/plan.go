package wire

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/sharding/internal/protocol"
)

// A plan is how one protocol type travels, derived from its fields when
// the package first plans its types: which fields hold protocol.Deliver
// values (whose user messages Seal and Open encode and decode), and the
// shadow struct the codec's JSON reads and writes, field for field the
// protocol type's with "to" in front and each user message an *Encoded.
// A protocol type is refused (RegisterTypes fails) when a field could not
// travel: unexported or embedded, named To, or holding a value of
// interface type or a Deliver anywhere but where a plan looks for them.
type plan struct {
	typ    reflect.Type
	self   bool // typ is protocol.Deliver
	fields []field
	off    int          // index of the first field in shadow: 1 after "to", 0 without
	shadow reflect.Type // the JSON form
	nested *plan        // of a Deliver inside typ, when it holds any
}

type fieldKind int

const (
	plainField    fieldKind = iota // written as it is
	userField                      // Deliver.Msg: an Encoded while it travels
	deliverField                   // a protocol.Deliver
	deliversField                  // a []protocol.Deliver
)

type field struct {
	index int
	kind  fieldKind
}

var (
	deliverType   = reflect.TypeFor[protocol.Deliver]()
	deliversType  = reflect.TypeFor[[]protocol.Deliver]()
	targetType    = reflect.TypeFor[Target]()
	encodedPtr    = reflect.TypeFor[*Encoded]()
	marshalerType = reflect.TypeFor[json.Marshaler]()
)

// newPlan plans t; withTo puts the Target in front (a message), without
// it t is a Deliver inside another message.
func newPlan(t reflect.Type, withTo bool) (*plan, error) {
	if t.Kind() != reflect.Struct {
		return nil, fmt.Errorf("wire: protocol message %v is not a struct", t)
	}
	p := &plan{typ: t, self: t == deliverType}
	var shadow []reflect.StructField
	if withTo {
		p.off = 1
		shadow = append(shadow, reflect.StructField{Name: "To", Type: targetType, Tag: `json:"to"`})
	}
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() || f.Anonymous {
			return nil, fmt.Errorf("wire: %v.%s: an unexported or embedded field cannot travel", t, f.Name)
		}
		key := lowerFirst(f.Name)
		if strings.EqualFold(key, "to") {
			return nil, fmt.Errorf("wire: %v.%s: the key %q is the envelope's", t, f.Name, key)
		}
		typ, tag := f.Type, `json:"`+key+`"`
		switch {
		case p.self && f.Type.Kind() == reflect.Interface:
			p.fields = append(p.fields, field{i, userField})
			typ, tag = encodedPtr, `json:"`+key+`,omitempty"`
		case f.Type == deliverType || f.Type == deliversType:
			if p.nested == nil {
				n, err := newPlan(deliverType, false)
				if err != nil {
					return nil, err
				}
				p.nested = n
			}
			if f.Type == deliverType {
				p.fields = append(p.fields, field{i, deliverField})
				typ = p.nested.shadow
			} else {
				p.fields = append(p.fields, field{i, deliversField})
				typ = reflect.SliceOf(p.nested.shadow)
			}
		case opaque(f.Type, 0):
			return nil, fmt.Errorf("wire: %v.%s (%v) holds an interface or a Deliver where wire cannot carry it", t, f.Name, f.Type)
		default:
			p.fields = append(p.fields, field{i, plainField})
		}
		shadow = append(shadow, reflect.StructField{Name: f.Name, Type: typ, Tag: reflect.StructTag(tag)})
	}
	p.shadow = reflect.StructOf(shadow)
	return p, nil
}

// opaque reports whether plain JSON could not carry a value of t: it
// holds a value of interface type (which would come back as a map), or a
// Deliver (whose user message must be sealed), below types that encode
// themselves.
func opaque(t reflect.Type, depth int) bool {
	if depth > 16 || t.Implements(marshalerType) || reflect.PointerTo(t).Implements(marshalerType) {
		return false
	}
	switch t.Kind() {
	case reflect.Interface:
		return true
	case reflect.Struct:
		if t == deliverType {
			return true
		}
		for i := range t.NumField() {
			if f := t.Field(i); f.IsExported() && opaque(f.Type, depth+1) {
				return true
			}
		}
	case reflect.Slice, reflect.Array, reflect.Pointer:
		return opaque(t.Elem(), depth+1)
	case reflect.Map:
		return opaque(t.Key(), depth+1) || opaque(t.Elem(), depth+1)
	}
	return false
}

func lowerFirst(s string) string {
	r, n := utf8.DecodeRuneInString(s)
	return string(unicode.ToLower(r)) + s[n:]
}

// seal encodes the user messages of v (an addressable value of p.typ),
// copying the slices it changes.
func (p *plan) seal(reg *codec.Registry, v reflect.Value) error {
	if p.self {
		d, err := sealDeliver(reg, v.Interface().(protocol.Deliver))
		v.Set(reflect.ValueOf(d))
		return err
	}
	for _, f := range p.fields {
		fv := v.Field(f.index)
		switch f.kind {
		case deliverField:
			d, err := sealDeliver(reg, fv.Interface().(protocol.Deliver))
			if err != nil {
				return err
			}
			fv.Set(reflect.ValueOf(d))
		case deliversField:
			ds := fv.Interface().([]protocol.Deliver)
			if ds == nil {
				continue
			}
			out := make([]protocol.Deliver, len(ds))
			for i, d := range ds {
				var err error
				if out[i], err = sealDeliver(reg, d); err != nil {
					return err
				}
			}
			fv.Set(reflect.ValueOf(out))
		}
	}
	return nil
}

// open decodes the user messages of v (an addressable value of p.typ),
// adding those that do not decode to failed: a list keeps the others, a
// single one makes open report false (drop the message).
func (p *plan) open(reg *codec.Registry, v reflect.Value, failed *[]Undecodable) bool {
	if p.self {
		d := v.Interface().(protocol.Deliver)
		o, err := openDeliver(reg, d)
		if err != nil {
			*failed = append(*failed, Undecodable{Deliver: d, Err: err})
			return false
		}
		v.Set(reflect.ValueOf(o))
		return true
	}
	keep := true
	for _, f := range p.fields {
		fv := v.Field(f.index)
		switch f.kind {
		case deliverField:
			d := fv.Interface().(protocol.Deliver)
			o, err := openDeliver(reg, d)
			if err != nil {
				*failed = append(*failed, Undecodable{Deliver: d, Err: err})
				keep = false
				continue
			}
			fv.Set(reflect.ValueOf(o))
		case deliversField:
			ds := fv.Interface().([]protocol.Deliver)
			if ds == nil {
				continue
			}
			out := make([]protocol.Deliver, 0, len(ds))
			for _, d := range ds {
				o, err := openDeliver(reg, d)
				if err != nil {
					*failed = append(*failed, Undecodable{Deliver: d, Err: err})
					continue
				}
				out = append(out, o)
			}
			fv.Set(reflect.ValueOf(out))
		}
	}
	return keep
}

// each calls fn with every Deliver in v, a value of p.typ.
func (p *plan) each(v reflect.Value, fn func(protocol.Deliver)) {
	if p.self {
		fn(v.Interface().(protocol.Deliver))
		return
	}
	for _, f := range p.fields {
		fv := v.Field(f.index)
		switch f.kind {
		case deliverField:
			fn(fv.Interface().(protocol.Deliver))
		case deliversField:
			for _, d := range fv.Interface().([]protocol.Deliver) {
				fn(d)
			}
		}
	}
}

// toShadow copies src, a sealed value of p.typ, into dst, its shadow.
func (p *plan) toShadow(dst, src reflect.Value) error {
	for _, f := range p.fields {
		s, d := src.Field(f.index), dst.Field(f.index+p.off)
		switch f.kind {
		case plainField:
			d.Set(s)
		case userField:
			if s.IsNil() {
				continue
			}
			e, ok := s.Interface().(Encoded)
			if !ok {
				return fmt.Errorf("%w: %T in a Deliver", ErrNotSealed, s.Interface())
			}
			d.Set(reflect.ValueOf(&e))
		case deliverField:
			if err := p.nested.toShadow(d, s); err != nil {
				return err
			}
		case deliversField:
			if s.IsNil() {
				continue
			}
			n := reflect.MakeSlice(d.Type(), s.Len(), s.Len())
			for i := range s.Len() {
				if err := p.nested.toShadow(n.Index(i), s.Index(i)); err != nil {
					return err
				}
			}
			d.Set(n)
		}
	}
	return nil
}

// fromShadow copies src, a shadow, into dst, an addressable value of p.typ.
func (p *plan) fromShadow(dst, src reflect.Value) {
	for _, f := range p.fields {
		s, d := src.Field(f.index+p.off), dst.Field(f.index)
		switch f.kind {
		case plainField:
			d.Set(s)
		case userField:
			if !s.IsNil() {
				d.Set(s.Elem())
			}
		case deliverField:
			p.nested.fromShadow(d, s)
		case deliversField:
			if s.IsNil() {
				continue
			}
			n := reflect.MakeSlice(d.Type(), s.Len(), s.Len())
			for i := range s.Len() {
				p.nested.fromShadow(n.Index(i), s.Index(i))
			}
			d.Set(n)
		}
	}
}

// envelopeSerializer writes an Envelope[M] as its plan's shadow, in JSON.
type envelopeSerializer[M protocol.Message] struct{ p *plan }

func (s envelopeSerializer[M]) Marshal(v any) ([]byte, error) {
	e, ok := v.(Envelope[M])
	if !ok {
		return nil, fmt.Errorf("wire: %T is no %v", v, reflect.TypeFor[Envelope[M]]())
	}
	sh := reflect.New(s.p.shadow)
	*sh.Elem().Field(0).Addr().Interface().(*Target) = e.To
	if err := s.p.toShadow(sh.Elem(), reflect.ValueOf(e.Msg)); err != nil {
		return nil, err
	}
	return json.Marshal(sh.Interface())
}

func (s envelopeSerializer[M]) Unmarshal(data []byte, ptr any) error {
	e, ok := ptr.(*Envelope[M])
	if !ok {
		return fmt.Errorf("wire: cannot decode into %T", ptr)
	}
	sh := reflect.New(s.p.shadow)
	if err := json.Unmarshal(data, sh.Interface()); err != nil {
		return err
	}
	e.To = *sh.Elem().Field(0).Addr().Interface().(*Target)
	s.p.fromShadow(reflect.ValueOf(&e.Msg).Elem(), sh.Elem())
	return nil
}
