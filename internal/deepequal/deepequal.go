// Package deepequal compares a value with its codec round-tripped copy: it is
// reflect.DeepEqual, except that values with an Equal method (such as
// time.Time, whose monotonic reading and location a codec drops) are compared
// with it, and a nil and an empty slice or map count as equal.
package deepequal

import "reflect"

// Equal reports whether a and b hold equal values of the same dynamic type.
func Equal(a, b any) bool { return Values(reflect.ValueOf(a), reflect.ValueOf(b)) }

// Values reports whether a and b are equal, by the rules of the package doc.
func Values(a, b reflect.Value) bool { return equal(a, b) }

func equal(a, b reflect.Value) bool {
	if a.IsValid() != b.IsValid() {
		return false
	}
	if !a.IsValid() {
		return true
	}
	if a.Type() != b.Type() {
		return false
	}
	if m := a.MethodByName("Equal"); a.CanInterface() && m.IsValid() && m.Type().NumIn() == 1 && m.Type().In(0) == a.Type() &&
		m.Type().NumOut() == 1 && m.Type().Out(0).Kind() == reflect.Bool {
		return m.Call([]reflect.Value{b})[0].Bool()
	}
	switch a.Kind() {
	case reflect.Pointer, reflect.Interface:
		if a.IsNil() || b.IsNil() {
			return a.IsNil() == b.IsNil()
		}
		return equal(a.Elem(), b.Elem())
	case reflect.Struct:
		for i := range a.NumField() {
			if !equal(a.Field(i), b.Field(i)) {
				return false
			}
		}
		return true
	case reflect.Slice, reflect.Array:
		if a.Len() != b.Len() {
			return false
		}
		for i := range a.Len() {
			if !equal(a.Index(i), b.Index(i)) {
				return false
			}
		}
		return true
	case reflect.Map:
		if a.Len() != b.Len() {
			return false
		}
		for _, k := range a.MapKeys() {
			if !equal(a.MapIndex(k), b.MapIndex(k)) {
				return false
			}
		}
		return true
	}
	switch a.Kind() {
	case reflect.Bool:
		return a.Bool() == b.Bool()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return a.Int() == b.Int()
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return a.Uint() == b.Uint()
	case reflect.Float32, reflect.Float64:
		return a.Float() == b.Float()
	case reflect.Complex64, reflect.Complex128:
		return a.Complex() == b.Complex()
	case reflect.String:
		return a.String() == b.String()
	}
	// Funcs, channels: equal only if both are nil.
	return a.IsNil() && b.IsNil()
}
