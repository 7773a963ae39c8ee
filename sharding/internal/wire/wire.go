// Package wire carries the sharding protocol across the network: each
// message of package sharding/internal/protocol, in an Envelope that names
// its receiver on the node (a Target), and the two messages that are not
// protocol messages, Reply and AskFailed.
//
// The form is explicit (see docs/DESIGN.md, "Wire"): an envelope is the
// message's type id (a TypeID, from an append-only table), the target of
// a protocol message, and the message's body, length-prefixed; a body is
// the message's fields in a fixed order, strings and bytes length-prefixed,
// numbers as uvarints, bools as one byte. No reflection, no field names.
// A decoder skips the bytes of a body after the fields it knows (fields a
// newer node appended), refuses an unknown type id with an
// *UnknownTypeError, and bad input with ErrShort or ErrCorrupt. All of it
// travels as one codec type, Envelope, under EnvelopeManifest.
//
// The user messages a protocol.Deliver carries (in its Msg field, alone or
// in a HandOver's Msgs) are encoded by the codec of the node: an Encoder
// seals them into Encoded values (the codec's manifest and bytes, carried
// as they are) before a message is sent, and Open decodes them on receipt,
// reporting the ones that do not decode instead of failing the whole
// frame, so that the asks waiting on them can be failed (their reply
// addresses travel beside the payload, as a field of the Deliver).
package wire

import (
	"bytes"
	"errors"
	"fmt"
	"unsafe"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/sharding/internal/protocol"
)

var (
	// ErrUnknownType: Seal or Encode of a value whose type is not in the
	// table (a message that stays on its node, say).
	ErrUnknownType = errors.New("wire: not a protocol message that crosses nodes")
	// ErrNotSealed: a Deliver whose user message was not encoded by Seal
	// reached the encoder; nothing is sent.
	ErrNotSealed = errors.New("wire: user message not sealed")
)

// Target names the receiver of a message on its node: the region of an
// entity type, or that type's coordinator.
type Target struct {
	Type        string
	Coordinator bool
}

// String renders the target as type or type/coordinator.
func (t Target) String() string {
	if t.Coordinator {
		return t.Type + "/coordinator"
	}
	return t.Type
}

// Envelope is what crosses nodes: a protocol message for its Target
// (Msg is a protocol.Message, sealed while it travels, see Seal), or a
// Reply or an AskFailed (To is then zero). It is the one codec type of
// this package.
type Envelope struct {
	To  Target
	Msg any

	// packedWith is the sending node's encoder, set by Pack: the user
	// message of a packed Deliver is encoded with its codec when the
	// transport encodes the envelope, whatever codec the transport itself
	// uses (the nodes of one process share a network whose codec knows
	// only this wire). Nil: the envelope's serializer's own encoder.
	packedWith *Encoder
}

// userEncoder is the encoder of the user message of a packed Deliver in
// e: the sender's, or the serializer's own, enc.
func (e Envelope) userEncoder(enc *Encoder) *Encoder {
	if e.packedWith != nil {
		return e.packedWith
	}
	return enc
}

// Encoded is a user message encoded by the sending node's codec, in the
// Msg field of a sealed protocol.Deliver. ReplyTo lists the reply
// addresses inside the message (its ReplyTo fields), so that a node that
// cannot handle the message, not even decode it, can fail those asks at
// once with AskFailed.
type Encoded struct {
	Manifest string
	Payload  []byte
	ReplyTo  []entity.ReplyAddress
}

// Why a node refused a user message, in AskFailed.
const (
	// RefusedUndecodable: its manifest is unknown there, or its payload corrupt.
	RefusedUndecodable = "undecodable"
	// RefusedUnknownTarget: nobody there listens for its entity type.
	RefusedUnknownTarget = "unknown-target"
	// RefusedByListener: the region there refused it (its mailbox full).
	RefusedByListener = "refused"
)

type (
	// Reply carries the reply to an ask back to the asking incarnation,
	// encoded; the asker decodes it into its own type
	// (entity.System.DeliverReply). Under entity.AskFailureManifest it
	// carries instead the failure of an ask the entity's node knows will
	// never be answered (unhandled, stopped, ...): a code and a message.
	Reply struct {
		To       entity.ReplyAddress
		Manifest string
		Payload  []byte
	}
	// AskFailed tells the asking incarnation that the command carrying
	// the reply address To was refused by the transport of the node it
	// was sent to, before any region saw it, and why (one of the Refused
	// constants, and the refusing node's error text), so that the ask
	// fails at once instead of at its deadline.
	AskFailed struct {
		To     entity.ReplyAddress
		Kind   string
		Reason string
	}
)

// EnvelopeManifest is the codec manifest of Envelope: every sharding
// message travels under it, its type id inside.
const EnvelopeManifest = "shoal.sharding"

// target flags, one byte after the target's type.
const targetCoordinator = 1 << 0

// AppendEnvelope appends e's wire form to dst: the message's type id, the
// target of a protocol message (its type and a flags byte), and the
// message's body, length-prefixed. A Deliver's user message must be
// sealed (ErrNotSealed otherwise); a message not in the table is
// ErrUnknownType. On error dst is returned unchanged.
func AppendEnvelope(dst []byte, e Envelope) ([]byte, error) { return appendEnvelope(dst, e, nil) }

// appendEnvelope is AppendEnvelope; with enc, a lone Deliver's user
// message may be unsealed (see Encoder.Pack).
func appendEnvelope(dst []byte, e Envelope, enc *Encoder) ([]byte, error) {
	id := idOf(e.Msg)
	if id == 0 {
		return dst, fmt.Errorf("%w: %T", ErrUnknownType, e.Msg)
	}
	start := len(dst)
	dst = append(dst, byte(id)) // ids stay below 128: one byte, a uvarint
	if kinds[id].protocol {
		dst = appendTarget(dst, e.To)
	}
	dst, _, err := appendMessage(dst, e.Msg, enc)
	if err != nil {
		return dst[:start], err
	}
	return dst, nil
}

// Encoder puts a node's outgoing protocol messages in their envelopes,
// encoding the user messages of their Delivers with the node's codec. It
// remembers, per user message type, whether a message of that type can
// hold a reply address at all (see replyFinder). It is safe for
// concurrent use.
type Encoder struct {
	reg   *codec.Registry
	reply replyFinder
}

// NewEncoder is the encoder of the user messages that reg encodes.
func NewEncoder(reg *codec.Registry) *Encoder { return &Encoder{reg: reg} }

// AppendDeliver appends the envelope of *d for to: the bytes the codec
// writes for enc.Pack(to, *d), its user message encoded with enc's codec
// in place. It is for a sender that hands the cluster transport the
// bytes (cluster.EncodedSender): *d is never copied, into an interface
// value or otherwise. A user message the codec cannot encode is the
// codec's error; on error dst is returned unchanged.
func (enc *Encoder) AppendDeliver(dst []byte, to Target, d *protocol.Deliver) ([]byte, error) {
	start := len(dst)
	dst, at := openBody(appendTarget(append(dst, byte(IDDeliver)), to))
	dst, err := appendDeliver(dst, d, enc)
	if err != nil {
		return dst[:start], err
	}
	return closeBody(dst, at), nil
}

// AppendReply appends the envelope of r: the bytes the codec writes for
// Envelope{Msg: r}. It is for a sender that hands the cluster transport
// the bytes (cluster.EncodedSender): r is never copied into an interface
// value.
func AppendReply(dst []byte, r Reply) []byte {
	dst, at := openBody(append(dst, byte(IDReply)))
	return closeBody(appendReply(dst, r), at)
}

// appendTarget writes a protocol message's target: its type and a flags
// byte.
func appendTarget(dst []byte, to Target) []byte {
	dst = appendString(dst, to.Type)
	var flags byte
	if to.Coordinator {
		flags |= targetCoordinator
	}
	return append(dst, flags)
}

// DecodeEnvelope parses an envelope written by AppendEnvelope. The byte
// slices of the result (a user message's payload, a reply's) share src's
// memory. Errors match ErrShort, ErrCorrupt or ErrUnknownTypeID (an
// *UnknownTypeError).
func DecodeEnvelope(src []byte) (Envelope, error) { return decodeEnvelope(src, nil, nil) }

// decodeEnvelope is DecodeEnvelope sharing the strings it reads through
// names and, with open, decoding the user message of each Deliver that
// carries no reply address as it reads it (see RegisterOpeningTypes).
func decodeEnvelope(src []byte, names *interner, open *codec.Registry) (Envelope, error) {
	var e Envelope
	var d protocol.Deliver
	r := reader{b: src, end: len(src), names: names, open: open}
	id, err := readEnvelope(&r, &e, &d)
	if err != nil {
		return Envelope{}, err
	}
	if id == IDDeliver {
		e.Msg = d
	}
	return e, nil
}

// readEnvelope reads r's input into e, the message of a Deliver into d (a
// zero Deliver) instead of e.Msg (the caller decides whether it goes into
// an interface), and returns the message's type id.
func readEnvelope(r *reader, e *Envelope, d *protocol.Deliver) (TypeID, error) {
	r.msg = "Envelope"
	id := TypeID(r.uvarint("TypeID"))
	if r.err != nil {
		return 0, r.err
	}
	k := kindOf(id)
	if k == nil {
		return 0, &UnknownTypeError{ID: id}
	}
	if k.protocol {
		e.To.Type = r.view("To.Type")
		flags := r.byte("To.Flags")
		if flags&^targetCoordinator != 0 {
			r.fail(ErrCorrupt, "To.Flags", "unknown flags %#x", flags)
		}
		e.To.Coordinator = flags&targetCoordinator != 0
	}
	if id == IDDeliver {
		// Read by r itself, narrowed to the body (a reader of its own is
		// one more to set up, and body handed to k.read, a function value,
		// would be moved to the heap for every message). The body's bytes
		// after the fields this node knows, fields a newer node appended,
		// are skipped with it.
		n := len(r.raw("body"))
		end := r.end
		r.off, r.end, r.msg = r.off-n, r.off, k.name
		readDeliver(r, d)
		r.off, r.end, r.msg = r.end, end, "Envelope"
		if r.err != nil {
			r.off = r.end
		}
	} else {
		body := r.body(k.name)
		e.Msg = k.read(&body)
		r.done(&body)
	}
	if r.err == nil && r.more() {
		r.fail(ErrCorrupt, "body", "%d bytes after the body", r.left())
	}
	return id, r.err
}

// Decoder reads envelopes, sharing the strings it reads again through a
// table of its own: the codec's decoder of RegisterTypes is one, and so is
// a receiver's that takes the bytes from the cluster transport
// (cluster.EncodedReceiver). It is safe for concurrent use.
type Decoder struct {
	names *interner
	open  *codec.Registry
}

// NewDecoder returns a Decoder that opens with open the user message of
// each Deliver that carries no reply address (see RegisterOpeningTypes).
func NewDecoder(open *codec.Registry) *Decoder {
	return &Decoder{names: newInterner(), open: open}
}

// Decode parses an envelope, as DecodeEnvelope does.
func (dec *Decoder) Decode(src []byte) (Envelope, error) {
	return decodeEnvelope(src, dec.names, dec.open)
}

// DecodeDeliver parses src when it is the envelope of a Deliver, and
// returns its target and the Deliver as a value that no interface holds.
// For the envelope of any other message isDeliver is false and nothing is
// read: Decode it. Errors are Decode's.
//
// src is lent for the call: the transport writes the next frames over it
// once the message is handled (cluster.EncodedHandler). The strings of the
// result that the receiver uses once and drops on a tell's way to its
// entity (the target's type, the shard and entity ids, the manifest of a
// user message left encoded), and the payload of a user message left
// encoded, are borrowed: views of src, neither hashed nor copied, good
// until src is written again. A caller that keeps the Deliver or its
// target beyond handling it takes them as its own first (Own). A user
// message decoded into its value shares nothing with src
// (codec.Registry.DecodeBorrowed).
func (dec *Decoder) DecodeDeliver(src []byte) (to Target, d protocol.Deliver, isDeliver bool, err error) {
	isDeliver, err = dec.DecodeDeliverInto(src, &to, &d)
	return to, d, isDeliver, err
}

// DecodeDeliverInto is DecodeDeliver writing the target and the Deliver
// into *to and *d, the caller's, which it sets to zero values first (and
// leaves so unless it read a Deliver): a receiver that hands them on by
// pointer copies them out of no returned values.
func (dec *Decoder) DecodeDeliverInto(src []byte, to *Target, d *protocol.Deliver) (isDeliver bool, err error) {
	*to, *d = Target{}, protocol.Deliver{}
	if len(src) == 0 || TypeID(src[0]) != IDDeliver {
		return false, nil
	}
	var e Envelope
	r := reader{b: src, end: len(src), names: dec.names, open: dec.open, borrow: true}
	if _, err := readEnvelope(&r, &e, d); err != nil {
		*d = protocol.Deliver{}
		return true, err
	}
	*to = e.To
	return true, nil
}

// Own gives the borrowed strings of a Deliver and its target from
// DecodeDeliver strings of their own, shared through the decoder's table
// as Decode shares them, and a user message left encoded a payload of its
// own; to may be nil. On what is not borrowed it does no harm.
func (dec *Decoder) Own(d *protocol.Deliver, to *Target) {
	d.Shard = dec.own(d.Shard)
	d.EntityID = dec.own(d.EntityID)
	if e, ok := d.Msg.(Encoded); ok {
		e.Manifest = dec.own(e.Manifest)
		e.Payload = bytes.Clone(e.Payload)
		d.Msg = e
	}
	if to != nil {
		to.Type = dec.own(to.Type)
	}
}

func (dec *Decoder) own(s string) string {
	return dec.names.get(unsafe.Slice(unsafe.StringData(s), len(s)))
}

// idOf is m's type id, 0 for a type not in the table.
func idOf(m any) TypeID {
	switch m.(type) {
	case protocol.Deliver:
		return IDDeliver
	case protocol.Register:
		return IDRegister
	case protocol.RegisterProxy:
		return IDRegisterProxy
	case protocol.RegisterAck:
		return IDRegisterAck
	case protocol.GetShardHome:
		return IDGetShardHome
	case protocol.ShardHome:
		return IDShardHome
	case protocol.ShardHomes:
		return IDShardHomes
	case protocol.HostShard:
		return IDHostShard
	case protocol.ShardStarted:
		return IDShardStarted
	case protocol.BeginHandOff:
		return IDBeginHandOff
	case protocol.BeginHandOffAck:
		return IDBeginHandOffAck
	case protocol.HandOff:
		return IDHandOff
	case protocol.ShardStopped:
		return IDShardStopped
	case protocol.Fence:
		return IDFence
	case protocol.HandOver:
		return IDHandOver
	case protocol.GracefulShutdownReq:
		return IDGracefulShutdownReq
	case protocol.LeaveAck:
		return IDLeaveAck
	case protocol.StopShards:
		return IDStopShards
	case protocol.RebalanceShards:
		return IDRebalanceShards
	case protocol.LeaveRequest:
		return IDLeaveRequest
	case protocol.RegionStopped:
		return IDRegionStopped
	case protocol.MembersDown:
		return IDMembersDown
	case protocol.GetRegionStats:
		return IDGetRegionStats
	case Reply:
		return IDReply
	case AskFailed:
		return IDAskFailed
	case protocol.Flush:
		return IDFlush
	case protocol.FlushAck:
		return IDFlushAck
	}
	return 0
}

// serializer is Envelope's codec.Serializer; it appends (codec.Appender)
// and builds the decoded Envelope itself (codec.ValueDecoder), and shares
// the strings it decodes again and again. With open, its decoder opens the
// user messages of Delivers as it reads them (see RegisterOpeningTypes).
type serializer struct {
	// enc encodes with the registry the serializer is registered in: the
	// user message of a packed Deliver (see Encoder.Pack).
	enc *Encoder
	dec *Decoder
}

func (s *serializer) Marshal(v any) ([]byte, error) {
	e, ok := v.(Envelope)
	if !ok {
		return nil, fmt.Errorf("wire: %T is no Envelope", v)
	}
	return appendEnvelope(make([]byte, 0, 64+sealedSize(e.Msg)), e, e.userEncoder(s.enc))
}

func (s *serializer) AppendMarshal(dst []byte, v any) ([]byte, error) {
	e, ok := v.(Envelope)
	if !ok {
		return dst, fmt.Errorf("wire: %T is no Envelope", v)
	}
	return appendEnvelope(dst, e, e.userEncoder(s.enc))
}

func (s *serializer) Unmarshal(data []byte, ptr any) error {
	e, ok := ptr.(*Envelope)
	if !ok {
		return fmt.Errorf("wire: cannot decode into %T", ptr)
	}
	var err error
	*e, err = s.dec.Decode(data)
	return err
}

func (s *serializer) DecodeValue(data []byte) (any, error) {
	e, err := s.dec.Decode(data)
	if err != nil {
		return nil, err
	}
	return e, nil
}

// sealedSize is the size of the user payload m carries, to size the
// encoder's buffer once.
func sealedSize(m any) int {
	switch m := m.(type) {
	case protocol.Deliver:
		if e, ok := m.Msg.(Encoded); ok {
			return len(e.Manifest) + len(e.Payload)
		}
	case Reply:
		return len(m.Payload)
	}
	return 0
}

// RegisterTypes registers Envelope in reg under EnvelopeManifest.
// Registering twice is harmless; the manifest or type already bound
// otherwise is an error.
func RegisterTypes(reg *codec.Registry) error { return register(reg, nil) }

// RegisterOpeningTypes is RegisterTypes for a node's transport: the
// decoder of reg also opens, with reg, the user message of each Deliver
// that carries no reply address as it reads the envelope, so that the
// message is built once (Open then has nothing left to do for it). A user
// message that does not decode, or that carries reply addresses (whose
// asks a refusal must fail, see Asks), stays encoded for Open.
func RegisterOpeningTypes(reg *codec.Registry) error { return register(reg, reg) }

func register(reg, open *codec.Registry) error {
	s := &serializer{enc: NewEncoder(reg), dec: NewDecoder(open)}
	if err := codec.Register[Envelope](reg, EnvelopeManifest, codec.WithSerializer(s)); err != nil {
		return fmt.Errorf("wire: %w", err)
	}
	return nil
}

// Seal puts msg in its Envelope for to, encoding with enc's codec the
// user messages it carries; msg itself is not changed. A type that is not
// a protocol message of the table is ErrUnknownType, a user message the
// codec cannot encode the codec's error.
func (enc *Encoder) Seal(to Target, msg protocol.Message) (Envelope, error) {
	switch m := msg.(type) {
	case protocol.Deliver:
		d, err := enc.sealDeliver(m)
		if err != nil {
			return Envelope{}, err
		}
		return Envelope{To: to, Msg: d}, nil
	case protocol.HandOver:
		if m.Msgs != nil {
			msgs := make([]protocol.Deliver, len(m.Msgs))
			for i, d := range m.Msgs {
				var err error
				if msgs[i], err = enc.sealDeliver(d); err != nil {
					return Envelope{}, err
				}
			}
			m.Msgs = msgs
		}
		return Envelope{To: to, Msg: m}, nil
	}
	if id := idOf(msg); id == 0 || !kinds[id].protocol {
		return Envelope{}, fmt.Errorf("%w: %T", ErrUnknownType, msg)
	}
	return Envelope{To: to, Msg: msg}, nil
}

// Pack puts msg in its Envelope for to as Seal does, but a lone
// Deliver's user message stays as it is: the Envelope's codec type
// encodes it with enc (the envelope remembers it, whatever codec the
// transport encodes with) straight into the frame when the transport
// encodes the envelope (on Send, as every cluster.Transport does), with
// the bytes Seal would have given it. So
// a tell is encoded once, into its frame, and its Deliver is not copied
// into a new interface value. A user message the codec cannot encode
// fails that encoding, with the codec's error.
func (enc *Encoder) Pack(to Target, msg protocol.Message) (Envelope, error) {
	if d, ok := msg.(protocol.Deliver); ok {
		if _, known := enc.reg.Manifest(d.Msg); d.Msg != nil && !known {
			return Envelope{}, fmt.Errorf("wire: message for entity %q: %w: %T", d.EntityID, codec.ErrUnregisteredType, d.Msg)
		}
		return Envelope{To: to, Msg: msg, packedWith: enc}, nil
	}
	return enc.Seal(to, msg)
}

// Undecodable is a user message that did not decode on receipt: the
// Deliver that carried it (its Msg the Encoded form) and the codec's error.
type Undecodable struct {
	Deliver protocol.Deliver
	Err     error
}

// Encoded returns the user message as it arrived.
func (u Undecodable) Encoded() Encoded {
	e, _ := u.Deliver.Msg.(Encoded)
	return e
}

// Open decodes with reg the user messages a received Envelope of a
// protocol message carries and returns its message, or nil when the one
// user message it carried did not decode (a Deliver). Those that do not
// decode are returned in failed; of a list of them (a HandOver's) the
// others are kept, in order. An envelope of no protocol message (a Reply)
// is ErrUnknownType.
func Open(reg *codec.Registry, e Envelope) (msg protocol.Message, failed []Undecodable, err error) {
	switch m := e.Msg.(type) {
	case protocol.Deliver:
		if _, sealed := m.Msg.(Encoded); !sealed {
			// Opened as it was decoded (or nothing to open): the message
			// as it is, not a copy in a new interface value.
			return e.Msg.(protocol.Message), nil, nil
		}
		o, err := openDeliver(reg, m)
		if err != nil {
			return nil, []Undecodable{{Deliver: m, Err: err}}, nil
		}
		return o, nil, nil
	case protocol.HandOver:
		if m.Msgs == nil {
			return m, nil, nil
		}
		msgs := make([]protocol.Deliver, 0, len(m.Msgs))
		for _, d := range m.Msgs {
			o, err := openDeliver(reg, d)
			if err != nil {
				failed = append(failed, Undecodable{Deliver: d, Err: err})
				continue
			}
			msgs = append(msgs, o)
		}
		m.Msgs = msgs
		return m, failed, nil
	case protocol.Message:
		if idOf(m) != 0 {
			return m, nil, nil
		}
	}
	return nil, nil, fmt.Errorf("%w: %T", ErrUnknownType, e.Msg)
}

// Asks lists the reply addresses inside the user messages a received
// Envelope carries: the asks to fail when the message is refused.
func Asks(e Envelope) []entity.ReplyAddress {
	switch m := e.Msg.(type) {
	case protocol.Deliver:
		if enc, ok := m.Msg.(Encoded); ok {
			return enc.ReplyTo
		}
	case protocol.HandOver:
		var out []entity.ReplyAddress
		for _, d := range m.Msgs {
			if enc, ok := d.Msg.(Encoded); ok {
				out = append(out, enc.ReplyTo...)
			}
		}
		return out
	}
	return nil
}

// sealDeliver encodes d's user message.
func (enc *Encoder) sealDeliver(d protocol.Deliver) (protocol.Deliver, error) {
	if d.Msg == nil {
		return d, nil
	}
	if _, done := d.Msg.(Encoded); done {
		return d, nil
	}
	m, p, err := enc.reg.Encode(d.Msg)
	if err != nil {
		return d, fmt.Errorf("wire: message for entity %q: %w", d.EntityID, err)
	}
	d.Msg = Encoded{Manifest: m, Payload: p, ReplyTo: enc.reply.addresses(d.Msg)}
	return d, nil
}

// openDeliver decodes d's user message.
func openDeliver(reg *codec.Registry, d protocol.Deliver) (protocol.Deliver, error) {
	e, ok := d.Msg.(Encoded)
	if !ok {
		return d, nil // nothing to decode (a StartEntity), or opened already
	}
	v, err := reg.Decode(e.Manifest, e.Payload)
	if err != nil {
		return d, err
	}
	d.Msg = v
	return d, nil
}
