// Package wire carries the sharding protocol across the network: the
// message types of package sharding/protocol themselves, each in an
// Envelope that names its receiver on the node (a Target), registered in
// the codec a cluster.Transport encodes with; and the two messages that
// are not protocol messages, Reply and AskFailed.
//
// There is no second copy of the protocol structs here: how a message is
// written is derived, by reflection, from its protocol type when
// RegisterTypes runs, so a field added to a protocol struct travels with
// no change to this package. Only the list of protocol types (messages.go)
// names them; TestEveryProtocolMessageIsRegistered fails when a type that
// implements protocol.Message is missing from it.
//
// A protocol message is a flat JSON object: "to" (the Target) and one key
// per exported field, its name with the first letter lowered. Each is
// registered under a manifest prefixed "shoal.sharding." and followed by
// the protocol type's name (shoal.sharding.Register, …), the manifests the
// earlier hand-written wire types used.
//
// The user messages a protocol.Deliver carries (in its Msg field, alone or
// in a HandOver's Msgs) are encoded by the codec of the node, not that of
// the frame: Seal encodes them into Encoded values before a message is
// sent, and Open decodes them on receipt, reporting the ones that do not
// decode instead of failing the whole frame, so that the asks waiting on
// them can be failed (their reply addresses travel beside the payload).
package wire

import (
	"errors"
	"fmt"
	"reflect"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/sharding/internal/protocol"
)

var (
	// ErrUnknownType: Seal of a value whose type is not a registered
	// protocol message (a message that stays on its node, say).
	ErrUnknownType = errors.New("wire: not a protocol message that crosses nodes")
	// ErrNotSealed: a Deliver whose user message was not encoded by Seal
	// reached the codec; nothing is sent.
	ErrNotSealed = errors.New("wire: user message not sealed")
)

// Target names the receiver of a message on its node: the region of an
// entity type, or that type's coordinator.
type Target struct {
	Type        string `json:"type"`
	Coordinator bool   `json:"coord,omitempty"`
}

// String renders the target as type or type/coordinator.
func (t Target) String() string {
	if t.Coordinator {
		return t.Type + "/coordinator"
	}
	return t.Type
}

// Addressed is a protocol message in its Envelope.
type Addressed interface {
	Target() Target
	Message() protocol.Message
}

// Envelope carries a protocol message to its Target; it is what the codec
// encodes. Msg is sealed (see Seal) while it travels.
type Envelope[M protocol.Message] struct {
	To  Target
	Msg M
}

// Target implements Addressed.
func (e Envelope[M]) Target() Target { return e.To }

// Message implements Addressed.
func (e Envelope[M]) Message() protocol.Message { return e.Msg }

// Encoded is a user message encoded by the sending node's codec, in the
// Msg field of a sealed protocol.Deliver. ReplyTo lists the reply
// addresses inside the message (its ReplyTo fields), so that a node that
// cannot handle the message, not even decode it, can fail those asks at
// once with AskFailed.
type Encoded struct {
	Manifest string                `json:"m"`
	Payload  []byte                `json:"p,omitempty"`
	ReplyTo  []entity.ReplyAddress `json:"r,omitempty"`
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
		To       entity.ReplyAddress `json:"to"`
		Manifest string              `json:"m"`
		Payload  []byte              `json:"p"`
	}
	// AskFailed tells the asking incarnation that the command carrying
	// the reply address To was refused by the transport of the node it
	// was sent to, before any region saw it, and why (one of the Refused
	// constants, and the refusing node's error text), so that the ask
	// fails at once instead of at its deadline.
	AskFailed struct {
		To     entity.ReplyAddress `json:"to"`
		Kind   string              `json:"kind"`
		Reason string              `json:"reason"`
	}
)

// ManifestPrefix starts the manifest of every type RegisterTypes adds.
const ManifestPrefix = "shoal.sharding."

// RegisterTypes adds the Envelope of every protocol message, Reply and
// AskFailed to reg. Registering twice is harmless; a manifest or type
// already bound otherwise is an error, and so is a protocol type this
// package cannot carry (see plan.go).
func RegisterTypes(reg *codec.Registry) error {
	t, err := table()
	if err != nil {
		return err
	}
	errs := []error{add[Reply](reg, "Reply"), add[AskFailed](reg, "AskFailed")}
	for _, k := range t.kinds {
		errs = append(errs, k.register(reg, k.plan))
	}
	return errors.Join(errs...)
}

func add[T any](reg *codec.Registry, name string, opts ...codec.Option) error {
	if err := codec.Register[T](reg, ManifestPrefix+name, opts...); err != nil {
		return fmt.Errorf("wire: %w", err)
	}
	return nil
}

// Seal puts msg in its Envelope for to, encoding with reg the user
// messages it carries; msg itself is not changed. A type that is not a
// registered protocol message is ErrUnknownType, a user message reg
// cannot encode the codec's error.
func Seal(reg *codec.Registry, to Target, msg protocol.Message) (Addressed, error) {
	if d, ok := msg.(protocol.Deliver); ok { // the hot path, without reflection
		d, err := sealDeliver(reg, d)
		if err != nil {
			return nil, err
		}
		return Envelope[protocol.Deliver]{To: to, Msg: d}, nil
	}
	k, err := kindOf(msg)
	if err != nil {
		return nil, err
	}
	v := reflect.New(k.plan.typ).Elem()
	v.Set(reflect.ValueOf(msg))
	if err := k.plan.seal(reg, v); err != nil {
		return nil, err
	}
	return k.wrap(to, v), nil
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

// Open decodes with reg the user messages a received Envelope carries and
// returns its message, or nil when the one user message it carried did
// not decode (a Deliver). Those that do not decode are returned in
// failed; of a list of them (a HandOver's) the others are kept, in order.
func Open(reg *codec.Registry, a Addressed) (msg protocol.Message, failed []Undecodable, err error) {
	m := a.Message()
	if d, ok := m.(protocol.Deliver); ok { // the hot path, without reflection
		o, err := openDeliver(reg, d)
		if err != nil {
			return nil, []Undecodable{{Deliver: d, Err: err}}, nil
		}
		return o, nil, nil
	}
	k, err := kindOf(m)
	if err != nil {
		return nil, nil, err
	}
	v := reflect.New(k.plan.typ).Elem()
	v.Set(reflect.ValueOf(m))
	if !k.plan.open(reg, v, &failed) {
		return nil, failed, nil
	}
	return v.Interface().(protocol.Message), failed, nil
}

// Asks lists the reply addresses inside the user messages a received
// Envelope carries: the asks to fail when the message is refused.
func Asks(a Addressed) []entity.ReplyAddress {
	m := a.Message()
	k, err := kindOf(m)
	if err != nil {
		return nil
	}
	var out []entity.ReplyAddress
	k.plan.each(reflect.ValueOf(m), func(d protocol.Deliver) {
		if e, ok := d.Msg.(Encoded); ok {
			out = append(out, e.ReplyTo...)
		}
	})
	return out
}

// sealDeliver encodes d's user message.
func sealDeliver(reg *codec.Registry, d protocol.Deliver) (protocol.Deliver, error) {
	if d.Msg == nil {
		return d, nil
	}
	if _, done := d.Msg.(Encoded); done {
		return d, nil
	}
	m, p, err := reg.Encode(d.Msg)
	if err != nil {
		return d, fmt.Errorf("wire: message for entity %q: %w", d.EntityID, err)
	}
	d.Msg = Encoded{Manifest: m, Payload: p, ReplyTo: entity.ReplyAddresses(d.Msg)}
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
