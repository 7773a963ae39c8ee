package cluster

import (
	"context"
	"errors"
)

// Transport carries messages between node incarnations. It is the seam
// between the sharding protocol and the network: the protocol may assume
// what this contract says and nothing more, so that it is as right over
// the in-process transport of the tests as over sockets.
//
// The contract, which cluster/clustertest checks:
//
//   - Send never blocks. Each link (this incarnation to one other) has a
//     bounded queue; a Send that finds it full returns an error wrapping
//     ErrQueueFull and the message is not sent. Callers may Send while
//     holding locks.
//   - Every message is encoded with the transport's codec on Send: a value
//     of an unregistered type fails there (codec.ErrUnregisteredType), in
//     tests as in production, and so does one whose frame exceeds the
//     transport's frame size limit (ErrFrameTooLarge). The receiver gets a
//     decoded copy; sender and receiver never share memory. A frame the
//     receiver cannot decode is dropped and logged, and it keeps serving.
//   - Order holds per link only: messages from A to B arrive in the order A
//     sent them, or not at all. Messages on different links (A to B and C
//     to B, or A to B and A to C) arrive in any order relative to each other.
//   - Messages may be lost. A Send that returned nil promises nothing about
//     delivery: when a link breaks, what is queued or in flight on it may
//     be lost, and a node that dies loses what it had not handled. Only the
//     per-link order survives: after a loss, later messages on the link
//     still arrive after earlier delivered ones.
//   - Addresses name incarnations. A message for an incarnation that is not
//     the one now running under that node id is never handed to the one
//     that is: Send returns an error wrapping ErrStaleIncarnation when the
//     transport already knows, and the receiving side drops it otherwise.
//   - Sending to an incarnation the transport cannot reach at all (no such
//     node, or this transport closed) returns ErrUnreachable or ErrClosed.
//   - Handlers run one message at a time per receiving transport, must not
//     block, and must not retain the message for mutation by others.
type Transport interface {
	// Self is the incarnation this transport sends from and receives for.
	Self() UniqueAddress
	// Send queues msg for the incarnation to. It never blocks; see the
	// contract above for what its error and its nil promise.
	Send(to UniqueAddress, msg any) error
	// Close stops sending and receiving. Queued messages may be lost.
	Close(ctx context.Context) error
}

// Handler receives the messages sent to one transport: from is the sending
// incarnation, msg the decoded copy. It must not block.
type Handler func(from UniqueAddress, msg any)

// EncodedSender is a Transport that also takes messages their sender
// encoded: SendEncoded queues payload, the codec's bytes of a value under
// manifest, as Send queues its encoding of a value (the same frame, the
// same errors). The transport copies payload before it returns. A sender
// that would put a value into an interface only for Send checks for it
// once.
type EncodedSender interface {
	SendEncoded(to UniqueAddress, manifest string, payload []byte) error
}

// ReplySender is an EncodedSender that also sends messages that keep no
// order with the others it sends to the same node (the reply to an ask):
// SendReply may send one on another way than SendEncoded's (cluster/tcp
// writes it back on the connection to dialled to this node), and it may
// arrive before messages sent earlier to to, or after later ones. It
// never blocks.
type ReplySender interface {
	SendReply(to UniqueAddress, manifest string, payload []byte) error
}

// EncodedReceiver is a Transport that hands the messages of one manifest
// to an EncodedHandler as they arrived, instead of decoding them with its
// codec for its Handler: the receiver decodes them into values of its own
// types, which no interface needs to hold. Both handlers run one message
// at a time, in the link's order. HandleEncoded replaces the manifest's
// handler; nil removes it.
type EncodedReceiver interface {
	HandleEncoded(manifest string, h EncodedHandler)
}

// EncodedHandler receives from the incarnation from a message's payload,
// undecoded. The payload is lent for the call: the transport may read the
// next frames into its bytes once the handler returns, so the handler
// copies what it keeps, and what it decodes keeps no part of it (see
// codec.Registry.DecodeBorrowed). It returns an error only when payload
// does not decode: the transport then drops and counts it as a frame its
// codec could not decode. It must not block.
type EncodedHandler func(from UniqueAddress, payload []byte) error

// ErrQueueFull is returned (wrapped) by Send when the link's bounded queue
// is full; the message was not sent. The sender decides: retry later, drop
// or fail its own caller.
var ErrQueueFull = errors.New("cluster: link queue full")

// ErrStaleIncarnation is returned (wrapped) by Send for a message to an
// incarnation that has been replaced or is known dead; the message was not
// sent, and never reaches the incarnation now running under that node id.
var ErrStaleIncarnation = errors.New("cluster: stale incarnation")

// ErrUnreachable is returned (wrapped) by Send when the transport knows no
// way to the addressed node.
var ErrUnreachable = errors.New("cluster: node unreachable")

// ErrFrameTooLarge is returned (wrapped) by Send for a message whose
// encoded frame exceeds the transport's size limit; it was not sent.
var ErrFrameTooLarge = errors.New("cluster: frame too large")

// ErrClosed is returned (wrapped) by Send on a closed transport.
var ErrClosed = errors.New("cluster: transport closed")
