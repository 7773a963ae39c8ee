package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
)

// errBody is the reason a settle body is refused.
var errBody = errors.New(`body must be {"amount": <integer>}`)

// maxSettleBody bounds what is read of a settle body.
const maxSettleBody = 1 << 16

// bodyBuffer holds a body being read; bodyBuffers reuses them.
type bodyBuffer struct {
	buf   bytes.Buffer
	limit io.LimitedReader
}

var bodyBuffers = sync.Pool{New: func() any { return new(bodyBuffer) }}

// readBody reads at most limit bytes of r and hands them to use with the
// error that ended the read early, if any; use's error is returned. Once
// the pool holds a buffer it allocates nothing: body is valid only during use.
func readBody(r io.Reader, limit int64, use func(body []byte, readErr error) error) error {
	bb := bodyBuffers.Get().(*bodyBuffer)
	defer func() {
		if bb.buf.Cap() > maxSettleBody {
			return // a rare large body: not worth keeping
		}
		bb.buf.Reset()
		bb.limit.R = nil
		bodyBuffers.Put(bb)
	}()
	bb.limit = io.LimitedReader{R: r, N: limit}
	_, err := bb.buf.ReadFrom(&bb.limit)
	return use(bb.buf.Bytes(), err)
}

// decodeAmount reads a settle body strictly: one JSON object, no trailing
// data, field names matched exactly (encoding/json would take "AMOUNT")
// and each at most once; fields other than amount are ignored. It reads at
// most maxSettleBody bytes.
//
// It parses by hand what a json.Decoder's tokens would give, without the
// decoder's allocations; encoding/json still validates each value, and
// decodes a field name that holds escapes or non-ASCII bytes.
func decodeAmount(r io.Reader) (amount int64, err error) {
	err = readBody(r, maxSettleBody, func(body []byte, readErr error) error {
		amount, err = parseAmount(body, readErr)
		return err
	})
	return amount, err
}

// parseAmount parses body, read in full unless readErr says otherwise.
// The first problem met, left to right, decides the error, as it would
// for a decoder reading a stream.
func parseAmount(body []byte, readErr error) (int64, error) {
	s := scanner{data: body}
	s.space()
	if !s.take('{') {
		return 0, errBody
	}
	var (
		amount    int64
		hasAmount bool
		seen      fieldSet
	)
	s.space()
	if !s.take('}') {
		for {
			name, ok := s.name()
			if !ok {
				return 0, errBody
			}
			if !seen.add(name) {
				return 0, fmt.Errorf("%w: duplicate field %q", errBody, name)
			}
			s.space()
			if !s.take(':') {
				return 0, errBody
			}
			s.space()
			value, ok := s.value()
			if !ok {
				return 0, errBody
			}
			if string(name) == "amount" {
				if hasAmount = string(value) != "null"; hasAmount {
					// A JSON number with a fraction or an exponent, or
					// beyond int64, does not parse: as encoding/json
					// refuses it for an int64.
					n, err := strconv.ParseInt(string(value), 10, 64)
					if err != nil {
						return 0, errBody
					}
					amount = n
				}
			}
			s.space()
			if s.take(',') {
				s.space()
				continue
			}
			if s.take('}') {
				break
			}
			return 0, errBody
		}
	}
	s.space()
	if readErr != nil || s.pos != len(s.data) {
		return 0, fmt.Errorf("%w: data after the object", errBody)
	}
	if !hasAmount {
		return 0, errBody
	}
	return amount, nil
}

// scanner walks JSON text; each method reports whether what it expected
// was there.
type scanner struct {
	data []byte
	pos  int
}

// space skips JSON whitespace.
func (s *scanner) space() {
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

func (s *scanner) take(c byte) bool {
	if s.pos < len(s.data) && s.data[s.pos] == c {
		s.pos++
		return true
	}
	return false
}

// name reads a field name: a JSON string, decoded. The name shares the
// body's memory unless it had to be decoded.
func (s *scanner) name() ([]byte, bool) {
	start := s.pos
	if !s.str() {
		return nil, false
	}
	quoted := s.data[start:s.pos]
	for _, c := range quoted[1 : len(quoted)-1] {
		if c < 0x20 || c == '\\' || c >= 0x80 {
			// Escapes, invalid characters and UTF-8 (replacing invalid
			// sequences) are encoding/json's to judge and decode.
			var name string
			if err := json.Unmarshal(quoted, &name); err != nil {
				return nil, false
			}
			return []byte(name), true
		}
	}
	return quoted[1 : len(quoted)-1], true
}

// fieldSet holds the field names seen in an object: the first few in
// place, the rest in a map, so that a body of many fields costs linear time.
type fieldSet struct {
	few  [8][]byte
	n    int
	many map[string]bool
}

// add adds name and reports whether it was new.
func (f *fieldSet) add(name []byte) bool {
	if f.many != nil {
		if f.many[string(name)] {
			return false
		}
		f.many[string(name)] = true
		return true
	}
	for _, seen := range f.few[:f.n] {
		if bytes.Equal(seen, name) {
			return false
		}
	}
	if f.n < len(f.few) {
		f.few[f.n] = name
		f.n++
		return true
	}
	f.many = make(map[string]bool, 2*len(f.few))
	for _, seen := range f.few {
		f.many[string(seen)] = true
	}
	f.many[string(name)] = true
	return true
}

// str moves past a string, from its opening quote to its closing one.
func (s *scanner) str() bool {
	if !s.take('"') {
		return false
	}
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case '\\':
			s.pos += 2
		case '"':
			s.pos++
			return true
		default:
			s.pos++
		}
	}
	return false
}

// value reads one JSON value of any kind: it finds where the value ends,
// then lets encoding/json validate it (nesting limit included). A string,
// object or array ends where its closing character brings the nesting back
// to the start; a number or a literal runs to the next delimiter.
func (s *scanner) value() ([]byte, bool) {
	start, depth := s.pos, 0
scan:
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case '"':
			if !s.str() {
				return nil, false
			}
		case '{', '[':
			depth++
			s.pos++
			continue
		case '}', ']':
			if depth == 0 {
				break scan
			}
			depth--
			s.pos++
		case ',', ' ', '\t', '\n', '\r':
			if depth == 0 {
				break scan
			}
			s.pos++
			continue
		default:
			s.pos++
			continue
		}
		if depth == 0 {
			break // a string or a container closed at the value's own level
		}
	}
	v := s.data[start:s.pos]
	return v, json.Valid(v)
}
