package entity

import "github.com/shoal-dev/shoal/entity/codec"

// EncodeReply encodes a reply to an ask of another node as Reply does for
// Config.RemoteReplies: under its registered manifest, or as JSON under
// JSONReplyManifest when its type is not registered. A ReplyRouter that
// carries replies between processes uses it, and the receiving node hands
// the result to System.DeliverReply.
func EncodeReply(reg *codec.Registry, v any) (manifest string, payload []byte, err error) {
	return encodeReply(reg, v)
}
