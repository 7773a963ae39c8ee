package memberlist

import (
	"encoding/binary"
	"errors"
	"fmt"

	ml "github.com/hashicorp/memberlist"

	"github.com/shoal-dev/shoal/cluster"
)

// MetaMaxSize is the most node metadata memberlist carries; it panics on
// more, so Meta.Encode refuses it first.
const MetaMaxSize = ml.MetaMaxSize

// metaVersion is the encoding this package writes. A decoder reads every
// version ≥ 1: a newer writer only appends fields, which an older reader
// skips, so mixed versions can gossip during a rolling update.
const metaVersion = 1

// ErrMetaTooLarge is returned (wrapped) when a node's metadata would
// exceed MetaMaxSize: too many or too long roles, say.
var ErrMetaTooLarge = errors.New("memberlist: node metadata too large")

// ErrInvalidMeta is returned (wrapped) for metadata that cannot be decoded
// or does not match the node name it came with. Such a node is ignored.
var ErrInvalidMeta = errors.New("memberlist: invalid node metadata")

const (
	flagUp      = 1 << 0 // a join order is assigned
	flagLeaving = 1 << 1
)

// Meta is what a node tells the others about itself through memberlist's
// node metadata. It is fixed for an incarnation except JoinOrder (set once,
// at join) and Leaving (set once, when leaving starts).
type Meta struct {
	// Address is the node incarnation.
	Address cluster.UniqueAddress
	// Endpoint is the address of the node's message transport.
	Endpoint string
	// Roles the node carries.
	Roles []string
	// AppVersion is the application version it runs.
	AppVersion string
	// JoinOrder is 0 until the node has joined, then its rank (see
	// Membership.Join).
	JoinOrder uint64
	// Leaving is set once the node has begun to leave.
	Leaving bool
}

// Status is the member status the metadata stands for.
func (m Meta) Status() cluster.Status {
	switch {
	case m.Leaving:
		return cluster.Leaving
	case m.JoinOrder > 0:
		return cluster.Up
	}
	return cluster.Joining
}

// Member is the member the metadata describes, with its status.
func (m Meta) Member() cluster.Member {
	return cluster.Member{
		Address: m.Address, Endpoint: m.Endpoint, Roles: append([]string(nil), m.Roles...),
		AppVersion: m.AppVersion, JoinOrder: m.JoinOrder, Status: m.Status(),
	}
}

// Encode returns the compact binary form: version, flags, incarnation and
// join order as uvarints, then node id, endpoint, app version and roles as
// length-prefixed strings. It returns ErrMetaTooLarge beyond MetaMaxSize.
func (m Meta) Encode() ([]byte, error) {
	var flags byte
	if m.JoinOrder > 0 {
		flags |= flagUp
	}
	if m.Leaving {
		flags |= flagLeaving
	}
	b := make([]byte, 0, 64)
	b = append(b, metaVersion, flags)
	b = binary.AppendUvarint(b, m.Address.Incarnation)
	b = binary.AppendUvarint(b, m.JoinOrder)
	b = appendString(b, m.Address.Node)
	b = appendString(b, m.Endpoint)
	b = appendString(b, m.AppVersion)
	b = binary.AppendUvarint(b, uint64(len(m.Roles)))
	for _, r := range m.Roles {
		b = appendString(b, r)
	}
	if len(b) > MetaMaxSize {
		return nil, fmt.Errorf("%w: %d bytes, limit %d (node %s, %d roles)", ErrMetaTooLarge, len(b), MetaMaxSize, m.Address, len(m.Roles))
	}
	return b, nil
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// DecodeMeta parses metadata written by Encode (of this or a later
// version). It returns ErrInvalidMeta for anything else.
func DecodeMeta(b []byte) (Meta, error) {
	d := decoder{b: b}
	version := d.byte()
	flags := d.byte()
	var m Meta
	m.Address.Incarnation = d.uvarint()
	m.JoinOrder = d.uvarint()
	m.Address.Node = d.string()
	m.Endpoint = d.string()
	m.AppVersion = d.string()
	n := d.uvarint()
	if n > uint64(len(b)) { // each role takes at least a byte
		d.fail("role count %d", n)
	}
	for i := uint64(0); i < n && d.err == nil; i++ {
		m.Roles = append(m.Roles, d.string())
	}
	switch {
	case d.err != nil:
		return Meta{}, d.err
	case version == 0:
		return Meta{}, fmt.Errorf("%w: version 0", ErrInvalidMeta)
	case version == metaVersion && len(d.b) > 0:
		return Meta{}, fmt.Errorf("%w: %d trailing bytes", ErrInvalidMeta, len(d.b))
	case m.Address.Node == "":
		return Meta{}, fmt.Errorf("%w: empty node id", ErrInvalidMeta)
	case (flags&flagUp != 0) != (m.JoinOrder > 0):
		return Meta{}, fmt.Errorf("%w: up flag %v with join order %d", ErrInvalidMeta, flags&flagUp != 0, m.JoinOrder)
	}
	m.Leaving = flags&flagLeaving != 0
	return m, nil
}

// decoder reads fields until the first error, which it keeps.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: "+format, append([]any{ErrInvalidMeta}, args...)...)
	}
	d.b = nil
}

func (d *decoder) byte() byte {
	if len(d.b) == 0 {
		d.fail("truncated")
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) string() string {
	n := d.uvarint()
	if d.err != nil {
		return ""
	}
	if n > uint64(len(d.b)) {
		d.fail("string of %d bytes, %d left", n, len(d.b))
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

// nodeName is the memberlist name of an incarnation: unique per
// incarnation, because memberlist refuses a known name at a new address
// while the old one is only dead.
func nodeName(a cluster.UniqueAddress) string { return a.String() }
