package codec

import (
	"encoding"
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"
)

// A jsonPlan writes and reads one plain struct type under the JSON
// serializer without encoding/json's walk of the value: the type's fields
// are looked at once, at registration, and each value is then written and
// read field by field (docs/DESIGN.md, "Wire").
//
// A plan changes no byte and no result. It covers the shapes most
// commands, replies and events have — exported fields of string, bool and
// integer kinds, nested such structs, and fields whose type has its own
// JSON methods (a ReplyTo, a time.Time) — and hands anything else back to
// encoding/json:
//   - compileJSONPlan builds no plan for a type with any other field (a
//     float, a pointer, a slice, a map, an interface, an embedded struct, a
//     tag option other than omitempty);
//   - appendJSON gives up on a value with a string that encoding/json would
//     escape, or whose field's MarshalJSON writes anything but compact JSON
//     that encoding/json would copy as it is; the caller then encodes the
//     whole value with encoding/json;
//   - decodeJSON reads only the form appendJSON writes (keys in field
//     order, exactly named, no space, no escape in a string, integers in
//     range) and gives up on anything else — whitespace, another key order,
//     unknown keys, null, an error — which encoding/json then reads, so
//     values and errors stay exactly encoding/json's.
type jsonPlan struct {
	typ    reflect.Type
	fields []planField
}

type planField struct {
	index     int
	name      string // the key, as it appears between its quotes
	key       string // `"name":`, as appendJSON writes it
	kind      planKind
	omitEmpty bool
	bits      int       // planInt, planUint: the field's size
	nested    *jsonPlan // planStruct
}

type planKind uint8

const (
	planString planKind = iota
	planBool
	planInt
	planUint
	planStruct
	planMethods // the field's type has MarshalJSON and, on its pointer, UnmarshalJSON
)

// maxPlanDepth bounds nested structs in a plan and JSON nesting in what
// decodeJSON skips over; deeper goes to encoding/json.
const maxPlanDepth = 32

var (
	jsonMarshaler   = reflect.TypeFor[json.Marshaler]()
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textMarshaler   = reflect.TypeFor[encoding.TextMarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// compileJSONPlan returns the plan for typ, or nil when typ is not a
// struct of the shapes a plan covers.
func compileJSONPlan(typ reflect.Type) *jsonPlan {
	if typ.Kind() != reflect.Struct || hasOwnMethods(typ) {
		return nil
	}
	return compileStruct(typ, 0)
}

// hasOwnMethods reports whether encoding/json would hand a value of t, or
// of *t, to the value's own (JSON or text) methods.
func hasOwnMethods(t reflect.Type) bool {
	for _, t := range []reflect.Type{t, reflect.PointerTo(t)} {
		if t.Implements(jsonMarshaler) || t.Implements(jsonUnmarshaler) ||
			t.Implements(textMarshaler) || t.Implements(textUnmarshaler) {
			return true
		}
	}
	return false
}

func compileStruct(typ reflect.Type, depth int) *jsonPlan {
	if depth > maxPlanDepth {
		return nil
	}
	p := &jsonPlan{typ: typ}
	seen := make(map[string]bool)
	for i := range typ.NumField() {
		sf := typ.Field(i)
		if sf.Anonymous {
			return nil // embedding: encoding/json's promotion rules
		}
		if !sf.IsExported() {
			continue // encoding/json ignores it too
		}
		tag := sf.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		f := planField{index: i, name: sf.Name}
		switch opts {
		case "":
		case "omitempty":
			f.omitEmpty = true
		default:
			return nil // string, omitzero, ...: left to encoding/json
		}
		if name != "" {
			f.name = name
		}
		if !plainKey(f.name) || seen[f.name] {
			return nil
		}
		seen[f.name] = true
		f.key = `"` + f.name + `":`
		if !f.setKind(sf.Type, depth) {
			return nil
		}
		p.fields = append(p.fields, f)
	}
	return p
}

// setKind sets f's kind for a field of type t; false when a plan does not
// cover t.
func (f *planField) setKind(t reflect.Type, depth int) bool {
	if t.Implements(jsonMarshaler) && reflect.PointerTo(t).Implements(jsonUnmarshaler) {
		// The value's MarshalJSON, as encoding/json calls it on a field of
		// a value passed to Marshal. A pointer or an interface could be
		// nil; an omitempty field of another kind than struct could be
		// left out, and a struct never is.
		if t.Kind() == reflect.Pointer || t.Kind() == reflect.Interface || f.omitEmpty && t.Kind() != reflect.Struct {
			return false
		}
		f.kind, f.omitEmpty = planMethods, false
		return true
	}
	if hasOwnMethods(t) {
		return false
	}
	switch t.Kind() {
	case reflect.String:
		f.kind = planString
	case reflect.Bool:
		f.kind = planBool
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		f.kind, f.bits = planInt, t.Bits()
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		f.kind, f.bits = planUint, t.Bits()
	case reflect.Struct:
		f.kind, f.omitEmpty = planStruct, false // encoding/json never leaves a struct out
		f.nested = compileStruct(t, depth+1)
		return f.nested != nil
	default:
		return false
	}
	return true
}

// plainKey reports whether a JSON key needs no escaping and compares as
// itself: ASCII letters, digits and underscores.
func plainKey(s string) bool {
	if s == "" {
		return false
	}
	for i := range len(s) {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// appendJSON appends the JSON of v, a value of p's type, as json.Marshal
// writes it; false when encoding/json must write it instead.
func (p *jsonPlan) appendJSON(dst []byte, v any) ([]byte, bool) {
	return p.appendValue(dst, reflect.ValueOf(v))
}

func (p *jsonPlan) appendValue(dst []byte, rv reflect.Value) ([]byte, bool) {
	dst = append(dst, '{')
	first := true
	for i := range p.fields {
		f := &p.fields[i]
		fv := rv.Field(f.index)
		if f.omitEmpty && fv.IsZero() {
			continue
		}
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = append(dst, f.key...)
		var ok bool
		switch f.kind {
		case planString:
			s := fv.String()
			if !copiesAsJSON(s) {
				return dst, false
			}
			dst = append(dst, '"')
			dst = append(dst, s...)
			dst = append(dst, '"')
			ok = true
		case planBool:
			dst, ok = strconv.AppendBool(dst, fv.Bool()), true
		case planInt:
			dst, ok = strconv.AppendInt(dst, fv.Int(), 10), true
		case planUint:
			dst, ok = strconv.AppendUint(dst, fv.Uint(), 10), true
		case planStruct:
			dst, ok = f.nested.appendValue(dst, fv)
		case planMethods:
			dst, ok = appendMarshaled(dst, fv)
		}
		if !ok {
			return dst, false
		}
	}
	return append(dst, '}'), true
}

// copiesAsJSON reports whether encoding/json writes s between quotes as it
// is: valid UTF-8 without a control byte, a quote, a backslash, a byte it
// escapes for HTML (<, >, &) or U+2028 and U+2029.
func copiesAsJSON(s string) bool {
	ascii := true
	for i := range len(s) {
		c := s[i]
		if c < 0x20 || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
		if c >= utf8.RuneSelf {
			ascii = false
		}
	}
	return ascii || utf8.ValidString(s) && !strings.Contains(s, "\u2028") && !strings.Contains(s, "\u2029")
}

// appendMarshaled appends what fv's MarshalJSON writes, when encoding/json
// would copy it as it is: valid JSON of printable ASCII without a space
// or a byte it escapes for HTML. Anything else — an error, whitespace to
// compact, a byte to escape — is encoding/json's to handle.
func appendMarshaled(dst []byte, fv reflect.Value) ([]byte, bool) {
	b, err := fv.Interface().(json.Marshaler).MarshalJSON()
	if err != nil {
		return dst, false
	}
	for _, c := range b {
		if c <= ' ' || c >= 0x7f || c == '<' || c == '>' || c == '&' {
			return dst, false
		}
	}
	if end, ok := skipJSON(b, 0, 0); !ok || end != len(b) {
		return dst, false
	}
	return append(dst, b...), true
}

// decodeJSON reads data, as appendJSON writes it, into a new value of p's
// type; false when encoding/json must read it instead.
func (p *jsonPlan) decodeJSON(data []byte) (any, bool) {
	rv := reflect.New(p.typ).Elem()
	end, ok := p.decodeValue(data, 0, rv)
	if !ok || end != len(data) {
		return nil, false
	}
	return rv.Interface(), true
}

// decodeValue reads the object at data[i:] into rv and returns the index
// after it.
func (p *jsonPlan) decodeValue(data []byte, i int, rv reflect.Value) (int, bool) {
	if i >= len(data) || data[i] != '{' {
		return i, false
	}
	i++
	if i < len(data) && data[i] == '}' {
		return i + 1, true
	}
	next := 0 // keys come in field order; a field may be left out
	for {
		key, j, ok := readPlainString(data, i)
		if !ok || j >= len(data) || data[j] != ':' {
			return i, false
		}
		i = j + 1
		f := p.fieldFrom(next, key)
		if f < 0 {
			return i, false
		}
		next = f + 1
		if i, ok = p.fields[f].decode(data, i, rv.Field(p.fields[f].index)); !ok {
			return i, false
		}
		if i >= len(data) {
			return i, false
		}
		switch data[i] {
		case ',':
			i++
		case '}':
			return i + 1, true
		default:
			return i, false
		}
	}
}

// fieldFrom finds the field named key among p.fields[from:]; -1 if none.
func (p *jsonPlan) fieldFrom(from int, key []byte) int {
	for k := from; k < len(p.fields); k++ {
		if p.fields[k].name == string(key) {
			return k
		}
	}
	return -1
}

// decode reads f's value at data[i:] into fv.
func (f *planField) decode(data []byte, i int, fv reflect.Value) (int, bool) {
	switch f.kind {
	case planString:
		s, j, ok := readPlainString(data, i)
		if !ok {
			return i, false
		}
		fv.SetString(string(s))
		return j, true
	case planBool:
		switch {
		case hasAt(data, i, "true"):
			fv.SetBool(true)
			return i + 4, true
		case hasAt(data, i, "false"):
			return i + 5, true
		}
		return i, false
	case planInt, planUint:
		j, ok := integerEnd(data, i, f.kind == planInt)
		if !ok || !f.setInteger(fv, string(data[i:j])) {
			return i, false
		}
		return j, true
	case planStruct:
		return f.nested.decodeValue(data, i, fv)
	case planMethods:
		j, ok := skipJSON(data, i, 0)
		if !ok {
			return i, false
		}
		// As encoding/json does: the value's bytes, to the field's own
		// UnmarshalJSON. An error is left to encoding/json to report.
		if err := fv.Addr().Interface().(json.Unmarshaler).UnmarshalJSON(data[i:j]); err != nil {
			return i, false
		}
		return j, true
	}
	return i, false
}

// setInteger sets fv, an integer field, to the JSON integer s; false if s
// is out of the field's range.
func (f *planField) setInteger(fv reflect.Value, s string) bool {
	if f.kind == planInt {
		v, err := strconv.ParseInt(s, 10, f.bits)
		fv.SetInt(v)
		return err == nil
	}
	v, err := strconv.ParseUint(s, 10, f.bits)
	fv.SetUint(v)
	return err == nil
}

func hasAt(data []byte, i int, lit string) bool {
	return len(data)-i >= len(lit) && string(data[i:i+len(lit)]) == lit
}

// readPlainString reads the string at data[i:] when it holds no escape and
// no control byte, and is valid UTF-8: encoding/json reads such a string as
// its bytes. It returns the bytes between the quotes and the index after
// the closing one.
func readPlainString(data []byte, i int) ([]byte, int, bool) {
	if i >= len(data) || data[i] != '"' {
		return nil, i, false
	}
	start, ascii := i+1, true
	for j := start; j < len(data); j++ {
		switch c := data[j]; {
		case c == '"':
			s := data[start:j]
			if !ascii && !utf8.Valid(s) {
				return nil, i, false
			}
			return s, j + 1, true
		case c < 0x20 || c == '\\':
			return nil, i, false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return nil, i, false
}

// integerEnd returns the index after the JSON integer at data[i:]: an
// optional minus (when signed), then 0 or digits without a leading zero,
// not followed by a fraction or an exponent.
func integerEnd(data []byte, i int, signed bool) (int, bool) {
	j := i
	if signed && j < len(data) && data[j] == '-' {
		j++
	}
	digits := j
	for j < len(data) && '0' <= data[j] && data[j] <= '9' {
		j++
	}
	switch {
	case j == digits, j-digits > 1 && data[digits] == '0':
		return i, false
	case j < len(data) && (data[j] == '.' || data[j] == 'e' || data[j] == 'E'):
		return i, false
	}
	return j, true
}

// skipJSON returns the index after the JSON value at data[i:], which must
// hold no whitespace; false if it is not one. It checks the grammar as
// encoding/json's scanner does, bytes above ASCII in strings included.
func skipJSON(data []byte, i, depth int) (int, bool) {
	if i >= len(data) || depth > maxPlanDepth {
		return i, false
	}
	switch c := data[i]; {
	case c == '{' || c == '[':
		end := byte('}')
		if c == '[' {
			end = ']'
		}
		i++
		if i < len(data) && data[i] == end {
			return i + 1, true
		}
		for {
			var ok bool
			if c == '{' { // a member's name and colon before its value
				if i, ok = skipString(data, i); !ok || i >= len(data) || data[i] != ':' {
					return i, false
				}
				i++
			}
			if i, ok = skipJSON(data, i, depth+1); !ok || i >= len(data) {
				return i, false
			}
			switch data[i] {
			case ',':
				i++
			case end:
				return i + 1, true
			default:
				return i, false
			}
		}
	case c == '"':
		return skipString(data, i)
	case c == '-' || '0' <= c && c <= '9':
		return skipNumber(data, i)
	case hasAt(data, i, "true"), hasAt(data, i, "null"):
		return i + 4, true
	case hasAt(data, i, "false"):
		return i + 5, true
	}
	return i, false
}

// skipString returns the index after the JSON string at data[i:].
func skipString(data []byte, i int) (int, bool) {
	if i >= len(data) || data[i] != '"' {
		return i, false
	}
	for j := i + 1; j < len(data); j++ {
		switch c := data[j]; {
		case c == '"':
			return j + 1, true
		case c < 0x20:
			return i, false
		case c == '\\':
			j++
			if j >= len(data) {
				return i, false
			}
			switch data[j] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if len(data)-j < 5 {
					return i, false
				}
				for _, h := range data[j+1 : j+5] {
					if !('0' <= h && h <= '9' || 'a' <= h && h <= 'f' || 'A' <= h && h <= 'F') {
						return i, false
					}
				}
				j += 4
			default:
				return i, false
			}
		}
	}
	return i, false
}

// skipNumber returns the index after the JSON number at data[i:].
func skipNumber(data []byte, i int) (int, bool) {
	j := i
	if j < len(data) && data[j] == '-' {
		j++
	}
	digits := func() bool {
		k := j
		for j < len(data) && '0' <= data[j] && data[j] <= '9' {
			j++
		}
		return j > k
	}
	switch {
	case j < len(data) && data[j] == '0':
		j++
	case !digits():
		return i, false
	}
	if j < len(data) && data[j] == '.' {
		j++
		if !digits() {
			return i, false
		}
	}
	if j < len(data) && (data[j] == 'e' || data[j] == 'E') {
		j++
		if j < len(data) && (data[j] == '+' || data[j] == '-') {
			j++
		}
		if !digits() {
			return i, false
		}
	}
	return j, true
}
