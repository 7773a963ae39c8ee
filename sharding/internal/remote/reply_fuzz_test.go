package remote_test

import (
	"errors"
	"testing"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/sharding/internal/remote"
	"github.com/shoal-dev/shoal/sharding/internal/wire"
)

// FuzzReceiveFailureReply feeds the decoder of a failure that comes back
// on the reply route (a Reply under entity.AskFailureManifest, which the
// asking node decodes before it looks for the ask) arbitrary payloads: it
// never panics, and the reply is refused with a typed error (the ask has
// ended, or the failure does not decode).
func FuzzReceiveFailureReply(f *testing.F) {
	self := cluster.UniqueAddress{Node: "n1", Incarnation: 7}
	reg := newCodec()
	tr, err := remote.New(self, remote.Config{Codec: reg, Logger: quiet()})
	if err != nil {
		f.Fatal(err)
	}
	sys, err := entity.NewSystem(entity.Config{NodeID: self.Node, Incarnation: self.Incarnation, Codec: reg, Logger: quiet()})
	if err != nil {
		f.Fatal(err)
	}
	tr.Attach(sys)
	f.Add([]byte(`{"code":1,"msg":"entity: ask: counter/a unhandled: entity: message unhandled"}`))
	f.Add([]byte(`{"code":99,"msg":"a newer node's code","extra":[1,2]}`))
	f.Add([]byte(`{"code":5,"msg":"unavailable","unavailable":{"type":"counter","entity":"e","retry_after_ns":-5}}`))
	f.Add([]byte(`{"code":`))
	f.Add([]byte(nil))
	from := cluster.UniqueAddress{Node: "n2", Incarnation: 1}
	f.Fuzz(func(t *testing.T, payload []byte) {
		r := wire.Reply{To: entity.ReplyAddress{Node: self.Node, Incarnation: self.Incarnation, AskID: 1 << 40},
			Manifest: entity.AskFailureManifest, Payload: payload}
		err := tr.Receive(from, wire.Envelope{Msg: r})
		if err == nil || !errors.Is(err, entity.ErrAskEnded) && !errors.Is(err, entity.ErrReplyUndecodable) {
			t.Fatalf("failure reply %q: %v, want ErrAskEnded or ErrReplyUndecodable", payload, err)
		}
	})
}
