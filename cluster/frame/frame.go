// Package frame is the unit a Transport carries between node
// incarnations: the sender's and the receiver's addresses, a manifest and
// a payload (a value encoded by the codec), in a compact binary form with a
// size limit.
//
// A stream is a sequence of frames, each prefixed by its length as a
// 4-byte big-endian integer. Bad input never desynchronizes a stream nor
// allocates beyond the limit: an oversized frame is skipped (its bytes
// read and discarded) and reported as ErrTooLarge, a frame whose body does
// not parse is reported as ErrCorrupt, and the next ReadFrame reads the
// next frame. Only a stream that ends inside a frame is broken
// (io.ErrUnexpectedEOF). Decode adds the receiver's checks: a frame for
// another incarnation (ErrStaleIncarnation) or with an unknown manifest
// (codec.ErrUnknownManifest).
package frame

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/entity/codec"
)

// DefaultMaxSize is the frame size limit when none is configured: 4 MiB,
// gRPC's default receive limit.
const DefaultMaxSize = 4 << 20

// version is the first byte of every frame body; a body with another one
// is corrupt (a peer speaking a newer format is refused, not misread).
const version byte = 1

var (
	// ErrTooLarge: the frame is over the size limit. On Marshal nothing
	// was sent; on ReadFrame the frame was skipped. It is
	// cluster.ErrFrameTooLarge, what a Transport's Send reports.
	ErrTooLarge = cluster.ErrFrameTooLarge
	// ErrCorrupt: the frame body does not parse.
	ErrCorrupt = errors.New("frame: corrupt")
)

// Frame is one message between two node incarnations.
type Frame struct {
	From, To cluster.UniqueAddress
	Manifest string
	Payload  []byte
}

// Marshal appends f's body to dst; the body must fit in maxSize bytes
// (ErrTooLarge otherwise, and dst is returned unchanged).
func Marshal(dst []byte, f Frame, maxSize int) ([]byte, error) {
	start := len(dst)
	dst = append(dst, version)
	dst = appendString(dst, f.From.Node)
	dst = binary.AppendUvarint(dst, f.From.Incarnation)
	dst = appendString(dst, f.To.Node)
	dst = binary.AppendUvarint(dst, f.To.Incarnation)
	dst = appendString(dst, f.Manifest)
	dst = binary.AppendUvarint(dst, uint64(len(f.Payload)))
	dst = append(dst, f.Payload...)
	if n := len(dst) - start; n > maxSize {
		return dst[:start], fmt.Errorf("%w: %d bytes (manifest %q), limit %d", ErrTooLarge, n, f.Manifest, maxSize)
	}
	return dst, nil
}

// Head is the start Marshal writes of the body of every frame from one
// node incarnation to another, ahead of the manifest: a sender that
// writes many frames on one link builds it once (see docs/DESIGN.md,
// "Transport").
type Head []byte

// NewHead is the head of the frames from from to to.
func NewHead(from, to cluster.UniqueAddress) Head {
	h := append(make([]byte, 0, 1+stringSize(from.Node)+uvarintSize(from.Incarnation)+stringSize(to.Node)+uvarintSize(to.Incarnation)), version)
	h = appendString(h, from.Node)
	h = binary.AppendUvarint(h, from.Incarnation)
	h = appendString(h, to.Node)
	return binary.AppendUvarint(h, to.Incarnation)
}

// Size is Size of the frame of h with manifest and a payload of
// payloadLen bytes.
func (h Head) Size(manifest string, payloadLen int) int {
	return len(h) + stringSize(manifest) + uvarintSize(uint64(payloadLen)) + payloadLen
}

// Append appends the body Marshal writes for the frame of h with
// manifest and payload, with no size limit: its caller checked Size.
func (h Head) Append(dst []byte, manifest string, payload []byte) []byte {
	dst = append(dst, h...)
	dst = appendString(dst, manifest)
	dst = binary.AppendUvarint(dst, uint64(len(payload)))
	return append(dst, payload...)
}

// Size is the length of f's body, what Marshal appends.
func Size(f *Frame) int {
	return 1 + stringSize(f.From.Node) + uvarintSize(f.From.Incarnation) + stringSize(f.To.Node) +
		uvarintSize(f.To.Incarnation) + stringSize(f.Manifest) + uvarintSize(uint64(len(f.Payload))) + len(f.Payload)
}

func stringSize(s string) int { return uvarintSize(uint64(len(s))) + len(s) }

func uvarintSize(v uint64) int { return (bits.Len64(v|1) + 6) / 7 }

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

// Unmarshal parses a frame body. The frame's strings and payload are
// copies: b may be reused afterwards.
func Unmarshal(b []byte) (Frame, error) {
	f, _, err := unmarshal(b, nil, false)
	return f, err
}

// unmarshal parses a frame body. A string equal to the one of prev (the
// frame read before it on the stream), when given, is prev's, not a copy;
// with alias the payload is b's bytes, not a copy. header is how many
// bytes of b come before the payload's length.
func unmarshal(b []byte, prev *Frame, alias bool) (f Frame, header int, err error) {
	r := reader{b: b}
	if v := r.byte(); v != version && r.err == nil {
		return Frame{}, 0, fmt.Errorf("%w: version %d, want %d", ErrCorrupt, v, version)
	}
	if prev == nil {
		prev = &Frame{}
	}
	f.From.Node = r.stringLike(prev.From.Node)
	f.From.Incarnation = r.uvarint()
	f.To.Node = r.stringLike(prev.To.Node)
	f.To.Incarnation = r.uvarint()
	f.Manifest = r.stringLike(prev.Manifest)
	header = len(b) - len(r.b)
	f.Payload = r.payload(alias)
	if r.err != nil {
		return Frame{}, 0, r.err
	}
	return f, header, nil
}

// reader parses a body, remembering the first error.
type reader struct {
	b   []byte
	err error
}

func (r *reader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: truncated %s", ErrCorrupt, what)
	}
	r.b = nil
}

func (r *reader) byte() byte {
	if len(r.b) == 0 {
		r.fail("version")
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *reader) uvarint() uint64 {
	if len(r.b) > 0 && r.b[0] < 0x80 { // one byte: most lengths and incarnations
		v := r.b[0]
		r.b = r.b[1:]
		return uint64(v)
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail("number")
		return 0
	}
	r.b = r.b[n:]
	return v
}

// field returns the next length-prefixed field, in place.
func (r *reader) field() []byte {
	n := r.uvarint()
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)) {
		r.fail("field")
		return nil
	}
	out := r.b[:n:n]
	r.b = r.b[n:]
	return out
}

// bytes returns a copy of the next field.
func (r *reader) bytes() []byte {
	b := r.field()
	if b == nil {
		return nil
	}
	return append(make([]byte, 0, len(b)), b...)
}

// payload returns the last field, the payload: in place with alias, else
// a copy. Anything after it is corrupt.
func (r *reader) payload(alias bool) []byte {
	var p []byte
	if alias {
		p = r.field()
	} else {
		p = r.bytes()
	}
	if r.err == nil && len(r.b) > 0 {
		r.err = fmt.Errorf("%w: %d bytes after the payload", ErrCorrupt, len(r.b))
	}
	return p
}

// stringLike returns the next field as a string: prev itself when equal
// (comparing allocates nothing), else a copy.
func (r *reader) stringLike(prev string) string {
	b := r.field()
	if string(b) == prev {
		return prev
	}
	return string(b)
}

// WriteFrame writes f to w with its length prefix. A frame over maxSize is
// refused (ErrTooLarge) and nothing is written.
func WriteFrame(w io.Writer, f Frame, maxSize int) error {
	// The length prefix has 4 bytes: a larger limit would wrap it.
	maxSize = min(maxSize, math.MaxUint32)
	buf, err := Marshal(make([]byte, 4, 64+len(f.Payload)), f, maxSize)
	if err != nil {
		return err
	}
	binary.BigEndian.PutUint32(buf, uint32(len(buf)-4))
	_, err = w.Write(buf)
	return err
}

// ReadFrame reads the next frame from r. An oversized frame is read past
// and reported as ErrTooLarge, a corrupt one as ErrCorrupt; both leave r at
// the next frame, so the caller logs and reads on. io.EOF means the stream
// ended between frames; io.ErrUnexpectedEOF that it ended inside one.
func ReadFrame(r io.Reader, maxSize int) (Frame, error) {
	body, err := readBody(r, maxSize)
	if err != nil {
		return Frame{}, err
	}
	f, _, err := unmarshal(body, nil, true) // body is this frame's alone
	return f, err
}

// Reader reads a stream of frames as ReadFrame does, for a connection
// that carries many: a node name or manifest equal to the previous
// frame's is shared with it rather than allocated again (a connection
// carries one sender's frames to one receiver, in a few manifests), and
// a frame's payload lies in the frame's own body, read for it alone,
// unless the caller lends the Reader the block to cut bodies from
// (UseBlock) and reuses it once done with them.
type Reader struct {
	r       io.Reader
	br      *bufio.Reader // r, when it is one: see readBuffered
	maxSize int
	// cur is the frame Next returned last.
	cur Frame
	// header is cur's body up to its payload's length: a body that
	// starts with the same bytes has cur's addresses and manifest, taken
	// in one comparison instead of parsed field by field.
	header []byte
	prefix [4]byte
	// block is the block that small bodies are cut from, cut up to
	// block[cut:]: an offset moves per frame, not the slice (no pointer
	// stored per frame). lent says the caller's block (UseBlock).
	block []byte
	cut   int
	lent  bool
}

// Bodies of at most BlockMax bytes are cut, one after the other, from
// blocks of blockSize bytes that the Reader allocates as it needs them:
// one allocation for many small frames instead of one each. A block is
// never written again once a body is cut from it, so a body stays the
// frame's alone; what keeps a body's bytes (a decoded value that aliases
// its payload) keeps its block, at most blockSize/BlockMax times the
// body's size. A block the caller lends (UseBlock) is the caller's to
// write again.
const (
	blockSize = 32 << 10
	BlockMax  = 1 << 10
)

// UseBlock makes Next cut the bodies of small frames (at most BlockMax
// bytes) from block, from its start, while it has room for them (see
// Room), and from blocks of the Reader's own after that. The bodies cut
// from block, and so the payloads of those frames, are only as good as
// block: the caller may write block again, or lend it again, once it no
// longer needs any of them. A receiver that hands frames on in batches
// lends each batch a block and reuses it with the batch, rather than
// leave a block a few hundred frames long to the garbage collector.
func (fr *Reader) UseBlock(block []byte) {
	fr.block, fr.cut, fr.lent = block, 0, true
}

// Room is how many bytes the block lent by UseBlock has left; 0 once
// Next cuts from blocks of the Reader's own. A caller that lends a new
// block when Room falls below BlockMax has every small body in a block
// of its own.
func (fr *Reader) Room() int {
	if !fr.lent {
		return 0
	}
	return len(fr.block) - fr.cut
}

// NewReader reads frames of at most maxSize bytes from r.
func NewReader(r io.Reader, maxSize int) *Reader {
	br, _ := r.(*bufio.Reader)
	return &Reader{r: r, br: br, maxSize: maxSize}
}

// Next reads the next frame; its errors are ReadFrame's. The frame is
// the Reader's, valid until the next call and not to be modified (its
// payload, though, is the frame's own): a frame with the previous one's
// header changes only its payload, rather than be copied out whole.
func (fr *Reader) Next() (*Frame, error) {
	fr.cur.Payload = nil // not kept alive while the connection waits
	body, err := fr.readBody()
	if err != nil {
		return nil, err
	}
	if h := fr.header; len(h) > 0 && len(body) >= len(h) && string(body[:len(h)]) == string(h) {
		// The header parsed once already: the same bytes parse the same.
		r := reader{b: body[len(h):]}
		payload := r.payload(true)
		if r.err != nil {
			return nil, r.err
		}
		fr.cur.Payload = payload
		return &fr.cur, nil
	}
	f, header, err := unmarshal(body, &fr.cur, true)
	if err != nil {
		return nil, err
	}
	fr.cur = f
	fr.header = append(fr.header[:0], body[:header]...)
	return &fr.cur, nil
}

// readBody reads the next frame's body: its length prefix, then that many
// bytes into a new slice.
func readBody(r io.Reader, maxSize int) ([]byte, error) {
	var prefix [4]byte
	n, err := readPrefix(r, prefix[:], maxSize)
	if err != nil {
		return nil, err
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return nil, unexpected(err)
	}
	return body, nil
}

// readBody reads the next frame's body, a small one into the block.
func (fr *Reader) readBody() ([]byte, error) {
	if body, ok := fr.readBuffered(); ok {
		return body, nil
	}
	n, err := readPrefix(fr.r, fr.prefix[:], fr.maxSize)
	if err != nil {
		return nil, err
	}
	var body []byte
	if n > BlockMax {
		body = make([]byte, n)
	} else {
		body = fr.cutBody(n)
	}
	if _, err := io.ReadFull(fr.r, body); err != nil {
		return nil, unexpected(err)
	}
	return body, nil
}

// readBuffered reads a small frame's body into the block when fr.br holds
// all of the frame already: copied out of its buffer at once, rather than
// read as a prefix then a body. ok is false when it read nothing; the
// frame is then readBody's, as are its errors.
func (fr *Reader) readBuffered() (_ []byte, ok bool) {
	br := fr.br
	if br == nil || br.Buffered() < 4 {
		return nil, false
	}
	prefix, _ := br.Peek(4) // buffered: no read, no error
	n := int(binary.BigEndian.Uint32(prefix))
	if n > BlockMax || n > fr.maxSize || br.Buffered() < 4+n {
		return nil, false
	}
	whole, _ := br.Peek(4 + n)
	body := fr.cutBody(n)
	copy(body, whole[4:])
	br.Discard(4 + n)
	return body, true
}

// cutBody returns the next n bytes of the block, n at most BlockMax.
func (fr *Reader) cutBody(n int) []byte {
	if len(fr.block)-fr.cut < n {
		fr.block, fr.cut, fr.lent = make([]byte, blockSize), 0, false
	}
	at := fr.cut
	fr.cut += n
	return fr.block[at:fr.cut:fr.cut]
}

// readPrefix reads a frame's length prefix into prefix and returns the
// length, or ErrTooLarge having read past a frame over maxSize.
func readPrefix(r io.Reader, prefix []byte, maxSize int) (int, error) {
	if _, err := io.ReadFull(r, prefix); err != nil {
		return 0, err
	}
	n := int64(binary.BigEndian.Uint32(prefix))
	if n > int64(maxSize) {
		if _, err := io.CopyN(io.Discard, r, n); err != nil {
			return 0, unexpected(err)
		}
		return 0, fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, n, maxSize)
	}
	return int(n), nil
}

func unexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// Encode encodes msg with reg into a frame from → to, within maxSize.
func Encode(reg *codec.Registry, from, to cluster.UniqueAddress, msg any, maxSize int) ([]byte, error) {
	manifest, payload, err := reg.Encode(msg)
	if err != nil {
		return nil, err
	}
	// Sized once: the fields and their length prefixes (at most 10 bytes
	// each), the version byte.
	size := 1 + len(from.Node) + len(to.Node) + len(manifest) + len(payload) + 5*binary.MaxVarintLen64
	return Marshal(make([]byte, 0, size), Frame{From: from, To: to, Manifest: manifest, Payload: payload}, maxSize)
}

// AppendEncode is Encode appending the frame's body to dst, the message
// encoded in place (codec.Registry.AppendEncode). On error it returns dst
// unchanged.
func AppendEncode(dst []byte, reg *codec.Registry, from, to cluster.UniqueAddress, msg any, maxSize int) ([]byte, error) {
	start := len(dst)
	dst = append(dst, version)
	dst = appendString(dst, from.Node)
	dst = binary.AppendUvarint(dst, from.Incarnation)
	dst = appendString(dst, to.Node)
	dst = binary.AppendUvarint(dst, to.Incarnation)
	// The manifest and the payload, each after its length.
	manifest, dst, err := reg.AppendPrefixed(dst, msg)
	if err != nil {
		return dst[:start], err
	}
	if size := len(dst) - start; size > maxSize {
		return dst[:start], fmt.Errorf("%w: %d bytes (manifest %q), limit %d", ErrTooLarge, size, manifest, maxSize)
	}
	return dst, nil
}

// Decode parses a frame body received by self and decodes its message with
// reg. It returns the sender, and an error wrapping
// cluster.ErrStaleIncarnation for a frame addressed to another
// incarnation (never handed to self), ErrCorrupt for a body that does not
// parse, and codec.ErrUnknownManifest for a manifest reg does not know.
func Decode(reg *codec.Registry, self cluster.UniqueAddress, body []byte) (from cluster.UniqueAddress, msg any, err error) {
	f, err := Unmarshal(body)
	if err != nil {
		return cluster.UniqueAddress{}, nil, err
	}
	if f.To != self {
		return f.From, nil, fmt.Errorf("frame: for %s, received by %s: %w", f.To, self, cluster.ErrStaleIncarnation)
	}
	msg, err = reg.Decode(f.Manifest, f.Payload)
	if err != nil {
		return f.From, nil, fmt.Errorf("frame: from %s: %w", f.From, err)
	}
	return f.From, msg, nil
}
