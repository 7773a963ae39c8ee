package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/entity/codec"
)

// Errors of a decoder, each wrapped with what was being read.
var (
	// ErrShort: the input ends inside a field.
	ErrShort = errors.New("wire: message truncated")
	// ErrCorrupt: a field holds a value no encoder writes (a bool that is
	// neither 0 nor 1, a count larger than the bytes left, bytes after the
	// envelope).
	ErrCorrupt = errors.New("wire: corrupt message")
	// ErrUnknownTypeID: the message's type id is not in this node's table
	// (see UnknownTypeError).
	ErrUnknownTypeID = errors.New("wire: unknown message type id")
)

// UnknownTypeError names the type id a decoder does not know: a message
// of a newer node, which this one drops (counted by the transport) while
// the connection keeps serving.
type UnknownTypeError struct{ ID TypeID }

func (e *UnknownTypeError) Error() string {
	return fmt.Sprintf("wire: unknown message type id %d", e.ID)
}

// Unwrap returns ErrUnknownTypeID.
func (e *UnknownTypeError) Unwrap() error { return ErrUnknownTypeID }

// The encoding of one field: a string or bytes is its length as a uvarint
// and then its bytes; a number a uvarint; a bool one byte, 0 or 1; a list
// its length as a uvarint and then its items.

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

func appendBytes(dst, b []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

func appendBool(dst []byte, b bool) []byte {
	if b {
		return append(dst, 1)
	}
	return append(dst, 0)
}

func appendStrings(dst []byte, ss []string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(ss)))
	for _, s := range ss {
		dst = appendString(dst, s)
	}
	return dst
}

// appendBody appends a length-prefixed body written by fn: the prefix lets
// a reader skip fields appended after the ones it knows. The body is
// written in place and the prefix moved in front of it, so no scratch
// buffer is needed.
func appendBody(dst []byte, fn func([]byte) []byte) []byte {
	dst, at := openBody(dst)
	return closeBody(fn(dst), at)
}

// openBody starts a body appendBody's way, for a caller that writes it
// itself, and returns where its prefix goes, for closeBody. One byte is
// reserved, the size of the prefix of any body under 128 bytes.
func openBody(dst []byte) ([]byte, int) { return append(dst, 0), len(dst) }

// closeBody writes the prefix at at of the body openBody started, moving
// the body along when the prefix needs more than one byte.
func closeBody(dst []byte, at int) []byte {
	n := len(dst) - at - 1
	if n < 0x80 {
		dst[at] = byte(n)
		return dst
	}
	var prefix [binary.MaxVarintLen64]byte
	p := binary.PutUvarint(prefix[:], uint64(n))
	dst = append(dst, prefix[1:p]...) // grow by the extra prefix bytes
	copy(dst[at+p:], dst[at+1:at+1+n])
	copy(dst[at:], prefix[:p])
	return dst
}

// reader decodes fields from b[off:end], keeping the first error; once
// it failed, nothing is left to read and every read returns a zero value
// (so a read that finds its bytes need not look at err first). A read
// moves off, an integer: the slice itself is never written again while
// reading, so a message's many reads store no pointer (and, while the
// collector runs, pay no write barrier).
type reader struct {
	b        []byte
	off, end int
	err      error
	// what is read, for the error ("Deliver.EntityID").
	msg string
	// names, when set, shares the strings read; open, when set, opens
	// the user messages of Delivers (see decodeEnvelope).
	names *interner
	open  *codec.Registry
	// borrow makes view return views of b rather than strings of their
	// own (see Decoder.DecodeDeliver).
	borrow bool
}

// newReader returns a reader of all of b.
func newReader(b []byte) reader { return reader{b: b, end: len(b)} }

// left is the number of bytes not read yet.
func (r *reader) left() int { return r.end - r.off }

func (r *reader) fail(sentinel error, field, format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s.%s: %s", sentinel, r.msg, field, fmt.Sprintf(format, args...))
	}
	r.off = r.end
}

// more reports whether the body has bytes left: false once a message of
// an older layout, without the fields appended since, has been read.
func (r *reader) more() bool { return r.off < r.end }

func (r *reader) uvarint(field string) uint64 {
	if r.off < r.end && r.b[r.off] < 0x80 { // one byte: most lengths, ids, counts
		v := r.b[r.off]
		r.off++
		return uint64(v)
	}
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b[r.off:r.end])
	switch {
	case n == 0:
		r.fail(ErrShort, field, "no number")
		return 0
	case n < 0:
		r.fail(ErrCorrupt, field, "number overflows 64 bits")
		return 0
	}
	r.off += n
	return v
}

// raw returns the next length-prefixed field, sharing b's memory.
func (r *reader) raw(field string) []byte {
	n := r.uvarint(field)
	if n > uint64(r.left()) {
		r.fail(ErrShort, field, "%d bytes, %d left", n, r.left())
		return nil
	}
	at := r.off
	r.off += int(n)
	return r.b[at:r.off:r.off]
}

// view reads a string field as string does or, when r borrows, as a view
// of the input's bytes: no hash, no copy.
func (r *reader) view(field string) string {
	if !r.borrow {
		return r.string(field)
	}
	b := r.raw(field)
	return unsafe.String(unsafe.SliceData(b), len(b))
}

func (r *reader) string(field string) string {
	if r.names != nil {
		return r.names.get(r.raw(field))
	}
	return string(r.raw(field))
}

// interner shares the strings a decoder reads again and again (entity
// types, manifests, shard ids, the ids of busy entities) instead of
// allocating each anew: a table, by hash, of the last string read per
// slot. Short strings only, so it stays small however many it sees. The
// hash is fixed (internHash): strings that collide only miss the table
// (they are allocated, as without it), and a decoder shares the same
// strings from one run to the next. Every connection's reader decodes
// through the same table, so a slot is an atomic pointer, not a string
// under a lock: a hit, the common case, is one load and a compare.
type interner struct {
	slots [internSlots]atomic.Pointer[string]
}

func newInterner() *interner { return new(interner) }

const (
	internBits  = 10
	internSlots = 1 << internBits
	internMax   = 64 // longer strings are not shared
)

func (in *interner) get(b []byte) string {
	if len(b) == 0 || len(b) > internMax {
		return string(b)
	}
	slot := &in.slots[internHash(b)>>(64-internBits)]
	if p := slot.Load(); p != nil && *p == string(b) {
		return *p
	}
	s := string(b)
	slot.Store(&s)
	return s
}

// internHash hashes a string of 1 to internMax bytes eight bytes at a
// time (the strings it sees are mostly shorter than eight: one load or
// two), a multiply per word instead of one per byte; its top bits pick
// the slot.
func internHash(b []byte) uint64 {
	const m = 0x9e3779b97f4a7c15
	h := uint64(len(b)) * m
	for len(b) > 8 {
		h = (h ^ binary.LittleEndian.Uint64(b)) * m
		b = b[8:]
	}
	// The last one to eight bytes, read as overlapping loads.
	var w uint64
	switch n := len(b); {
	case n >= 4:
		w = uint64(binary.LittleEndian.Uint32(b))<<32 | uint64(binary.LittleEndian.Uint32(b[n-4:]))
	default: // 1 to 3
		w = uint64(b[0])<<16 | uint64(b[n/2])<<8 | uint64(b[n-1])
	}
	h = (h ^ w) * m
	return h ^ h>>32
}

// bytes returns a bytes field, sharing the input's memory; nil when empty.
func (r *reader) bytes(field string) []byte {
	b := r.raw(field)
	if len(b) == 0 {
		return nil
	}
	return b
}

func (r *reader) bool(field string) bool {
	if r.off >= r.end {
		if r.err == nil {
			r.fail(ErrShort, field, "no bool")
		}
		return false
	}
	c := r.b[r.off]
	r.off++
	if c > 1 {
		r.fail(ErrCorrupt, field, "bool %d", c)
		return false
	}
	return c == 1
}

// count reads a list's length, refusing one that could not fit in the
// bytes left (each item takes at least minItem bytes), so that corrupt
// input cannot make a decoder allocate beyond its size.
func (r *reader) count(field string, minItem int) int {
	n := r.uvarint(field)
	if n == 0 { // most lists: no division by minItem
		return 0
	}
	if n > uint64(r.left()/minItem) {
		r.fail(ErrCorrupt, field, "%d items in %d bytes", n, r.left())
		return 0
	}
	return int(n)
}

func (r *reader) strings(field string) []string {
	n := r.count(field, 1)
	if n == 0 {
		return nil
	}
	out := make([]string, n)
	for i := range out {
		out[i] = r.string(field)
	}
	if r.err != nil {
		return nil
	}
	return out
}

// body returns a reader of the next length-prefixed body, for message msg.
func (r *reader) body(msg string) reader {
	b := r.raw("body")
	return reader{b: b, end: len(b), err: r.err, msg: msg, names: r.names, open: r.open, borrow: r.borrow}
}

// done reports the error of a body reader back into its parent. A body's
// bytes after the fields this node knows are fields appended by a newer
// one: skipped.
func (r *reader) done(body *reader) {
	if r.err == nil && body.err != nil {
		r.err = body.err
		r.off = r.end
	}
}

func (r *reader) byte(field string) byte {
	if r.off >= r.end {
		if r.err == nil {
			r.fail(ErrShort, field, "no byte")
		}
		return 0
	}
	c := r.b[r.off]
	r.off++
	return c
}

// A node incarnation (a region's name) is written as its node id and its
// incarnation, a string and a uvarint; none is an empty id and 0.

func appendAddress(dst []byte, a cluster.UniqueAddress) []byte {
	dst = appendString(dst, a.Node)
	return binary.AppendUvarint(dst, a.Incarnation)
}

func appendAddresses(dst []byte, as []cluster.UniqueAddress) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(as)))
	for _, a := range as {
		dst = appendAddress(dst, a)
	}
	return dst
}

func (r *reader) address(field string) cluster.UniqueAddress {
	return cluster.UniqueAddress{Node: r.string(field), Incarnation: r.uvarint(field)}
}

func (r *reader) addresses(field string) []cluster.UniqueAddress {
	n := r.count(field, 2)
	if n == 0 {
		return nil
	}
	out := make([]cluster.UniqueAddress, n)
	for i := range out {
		out[i] = r.address(field)
	}
	if r.err != nil {
		return nil
	}
	return out
}
