package runtime

import (
	"fmt"
	"reflect"

	"github.com/shoal-dev/shoal/entity/codec"
)

// EncodeReply encodes a reply to an ask of another node: under its
// registered manifest, or as JSON under JSONReplyManifest when its type is
// not registered; a failure a ReplyRouter was given in place of a reply,
// under AskFailureManifest. A value that does not encode is
// ErrNotSerializable. A ReplyRouter that carries replies between
// processes uses it, and the receiving node hands the result to
// DeliverReply.
func EncodeReply(reg *codec.Registry, v any) (manifest string, payload []byte, err error) {
	return encodeReply(reg, v)
}

// ReplyAddresses lists the reply addresses msg carries, at any depth (the
// ReplyTo fields of a command): the asks that wait for an answer to it. A
// transport sends them along with a message it encodes, so that the
// receiving node can fail those asks (FailAsk, through the transport)
// when it cannot handle a message it cannot even decode.
func ReplyAddresses(msg any) []ReplyAddress {
	var out []ReplyAddress
	forEachReplyAddr(reflect.ValueOf(msg), 0, func(a ReplyAddress) {
		if !a.IsZero() {
			out = append(out, a)
		}
	})
	return out
}

// FailAsk fails this System's ask to at once with err, when another node
// reports that the command carrying its reply address will never be
// handled: the Ask returns err (wrapped) instead of waiting for its
// deadline. It refuses an address of another node (ErrNotThisNode) or
// incarnation (ErrStaleIncarnation), and returns ErrAskEnded for an ask
// that has already returned.
func FailAsk(s *System, to ReplyAddress, err error) error {
	if cerr := s.checkReplyAddress(to, err); cerr != nil {
		return cerr
	}
	if !s.replies.deliver(to.AskID, askFailure{fmt.Errorf("entity: ask: %w", err)}) {
		return fmt.Errorf("%w: %s", ErrAskEnded, to)
	}
	return nil
}
