package remote_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/internal/runtime"
	"github.com/shoal-dev/shoal/sharding/internal/protocol"
	"github.com/shoal-dev/shoal/sharding/internal/remote"
	"github.com/shoal-dev/shoal/sharding/internal/wire"
)

// pipe is a cluster transport to one peer that delivers on the sender's
// goroutine, as values or, to a manifest with an EncodedHandler, as bytes
// (as cluster/tcp does), so that a test counts both ends' allocations.
// Bytes handed to an EncodedHandler are lent for the call: the pipe
// writes over them once it returns, as cluster/tcp reads the next frames
// into them, so that what a receiver kept of them would change.
type pipe struct {
	self    cluster.UniqueAddress
	reg     *codec.Registry
	peer    *pipe
	handle  cluster.Handler
	encoded map[string]cluster.EncodedHandler
	plain   bool // neither an EncodedSender nor an EncodedReceiver
	bad     []error
	buf     []byte
	replies int // sent by SendReply
}

func (p *pipe) Self() cluster.UniqueAddress { return p.self }
func (p *pipe) Close(context.Context) error { return nil }

func (p *pipe) Send(_ cluster.UniqueAddress, msg any) error {
	manifest, payload, err := p.reg.Encode(msg)
	if err != nil {
		return err
	}
	return p.SendEncoded(p.peer.self, manifest, payload)
}

func (p *pipe) SendEncoded(_ cluster.UniqueAddress, manifest string, payload []byte) error {
	p.buf = append(p.buf[:0], payload...) // the transport's copy
	to := p.peer
	if h := to.encoded[manifest]; h != nil {
		if err := h(p.self, p.buf); err != nil {
			to.bad = append(to.bad, err)
		}
		for i := range p.buf {
			p.buf[i] = 0xff
		}
		return nil
	}
	v, err := to.reg.Decode(manifest, p.buf)
	if err != nil {
		to.bad = append(to.bad, err)
		return nil
	}
	to.handle(p.self, v)
	return nil
}

func (p *pipe) HandleEncoded(manifest string, h cluster.EncodedHandler) { p.encoded[manifest] = h }

// SendReply is SendEncoded, counted: the pipe has no other way back.
func (p *pipe) SendReply(to cluster.UniqueAddress, manifest string, payload []byte) error {
	p.replies++
	return p.SendEncoded(to, manifest, payload)
}

// plainPipe hides pipe's optional methods: a cluster transport that
// takes and hands over values only.
type plainPipe struct{ cluster.Transport }

// pair binds two remote transports, a and b, over pipes; b listens for
// Counter's Delivers with deliver and for everything else with handle.
// a encodes with regA; b's view is viewB.
func pair(t testing.TB, regA *codec.Registry, viewB func() *cluster.View, plain bool, handle func(protocol.Message) error, deliver func(protocol.Deliver) error) (a, b *remote.Transport, pa, pb *pipe) {
	t.Helper()
	addrA, addrB := cluster.UniqueAddress{Node: "a", Incarnation: 1}, cluster.UniqueAddress{Node: "b", Incarnation: 1}
	regB := newCodec()
	var err error
	if a, err = remote.New(addrA, remote.Config{Codec: regA, Logger: quiet()}); err != nil {
		t.Fatal(err)
	}
	if b, err = remote.New(addrB, remote.Config{Codec: regB, View: viewB, Logger: quiet()}); err != nil {
		t.Fatal(err)
	}
	pa = &pipe{self: addrA, reg: regA, handle: a.Handle, encoded: map[string]cluster.EncodedHandler{}}
	pb = &pipe{self: addrB, reg: regB, handle: b.Handle, encoded: map[string]cluster.EncodedHandler{}}
	pa.peer, pb.peer = pb, pa
	for _, x := range []struct {
		rt *remote.Transport
		p  *pipe
	}{{a, pa}, {b, pb}} {
		var ct cluster.Transport = x.p
		if plain {
			ct = plainPipe{x.p}
		}
		if err := x.rt.Bind(ct); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.ListenDelivers(remote.Address{Node: addrB, Type: "Counter"}, handle, deliver); err != nil {
		t.Fatal(err)
	}
	return a, b, pa, pb
}

// A tell to another node reaches the listener's deliver over a cluster
// transport that takes and hands over encoded messages, and over one
// that takes values; other messages reach handle.
func TestSendDeliverReachesDeliver(t *testing.T) {
	for _, plain := range []bool{false, true} {
		var delivered []protocol.Deliver
		var handled []protocol.Message
		a, b, _, pb := pair(t, newCodec(), nil, plain,
			func(m protocol.Message) error { handled = append(handled, m); return nil },
			func(d protocol.Deliver) error {
				// Kept past the call: ids of their own (see ListenDelivers).
				d.Shard, d.EntityID = strings.Clone(d.Shard), strings.Clone(d.EntityID)
				delivered = append(delivered, d)
				return nil
			})
		to := remote.Address{Node: b.Node(), Type: "Counter"}
		if err := a.SendDeliver(to, &protocol.Deliver{Shard: "1", EntityID: "c", Msg: Add{N: 3}}); err != nil {
			t.Fatal(err)
		}
		if err := a.Send(to, protocol.Register{Region: a.Node()}); err != nil {
			t.Fatal(err)
		}
		if len(delivered) != 1 || delivered[0].EntityID != "c" || delivered[0].Msg != (Add{N: 3}) {
			t.Fatalf("plain %v: delivered %+v", plain, delivered)
		}
		if len(handled) != 1 || handled[0] != (protocol.Register{Region: a.Node()}) {
			t.Fatalf("plain %v: handled %+v", plain, handled)
		}
		if s := b.Stats(); s.Received != 2 || s.Delivered != 2 || len(pb.bad) != 0 {
			t.Fatalf("plain %v: receiver's stats %+v, bad frames %v", plain, s, pb.bad)
		}
		if s := a.Stats(); s.Sent != 2 {
			t.Fatalf("plain %v: sender's stats %+v", plain, s)
		}
	}
}

// A Deliver handed over encoded gets the checks of any other message: an
// unknown target and a user message that does not decode are refused and
// counted, and an envelope that does not decode is the cluster
// transport's bad frame.
func TestEncodedDeliverChecks(t *testing.T) {
	regA := codec.NewRegistry()
	codec.MustRegister[Add](regA, "test.Other") // a manifest b does not know
	a, b, pa, pb := pair(t, regA, nil, false, func(protocol.Message) error { return nil }, func(protocol.Deliver) error { return nil })
	d := protocol.Deliver{Shard: "1", EntityID: "c", Msg: Add{N: 1}}
	if err := a.SendDeliver(remote.Address{Node: b.Node(), Type: "Nope"}, &protocol.Deliver{Shard: "1", EntityID: "c", Start: true}); err != nil {
		t.Fatal(err)
	}
	if err := a.SendDeliver(remote.Address{Node: b.Node(), Type: "Counter"}, &d); err != nil {
		t.Fatal(err)
	}
	if err := pa.SendEncoded(b.Node(), "shoal.sharding", []byte{23, 0xff}); err != nil {
		t.Fatal(err)
	}
	if s := b.Stats(); s.Received != 2 || s.UnknownTarget != 1 || s.Undecodable != 1 || s.Delivered != 0 || len(pb.bad) != 1 {
		t.Fatalf("receiver's stats %+v, bad frames %v", s, pb.bad)
	}
}

// A Deliver handed over encoded from a sender the view holds Down is
// refused as stale, as any other message.
func TestEncodedDeliverFromAStaleSender(t *testing.T) {
	view, err := cluster.NewView(cluster.Member{Address: cluster.UniqueAddress{Node: "a", Incarnation: 1}, Status: cluster.Down, JoinOrder: 1})
	if err != nil {
		t.Fatal(err)
	}
	var delivered int
	a, b, _, _ := pair(t, newCodec(), func() *cluster.View { return &view }, false,
		func(protocol.Message) error { return nil }, func(protocol.Deliver) error { delivered++; return nil })
	if err := a.SendDeliver(remote.Address{Node: b.Node(), Type: "Counter"}, &protocol.Deliver{Shard: "1", EntityID: "c", Msg: Add{N: 1}}); err != nil {
		t.Fatal(err)
	}
	if s := b.Stats(); s.Received != 1 || s.Stale != 1 || delivered != 0 {
		t.Fatalf("receiver's stats %+v, %d delivered", s, delivered)
	}
}

// A tell to another node costs no allocation besides its user message's
// encoding and decoding, both ends counted, over a cluster transport that
// takes and hands over encoded messages: the Deliver and its envelope
// are never put in an interface value.
func TestSendDeliverAllocations(t *testing.T) {
	if raceDetector {
		t.Skip("the race detector makes sync.Pool drop buffers")
	}
	a, b, _, _ := pair(t, newCodec(), nil, false, func(protocol.Message) error { return nil }, func(protocol.Deliver) error { return nil })
	to := remote.Address{Node: b.Node(), Type: "Counter"}
	d := protocol.Deliver{Shard: "1", EntityID: "c", Msg: Add{N: 1}}
	reg := newCodec()
	buf := make([]byte, 0, 64)
	userAllocs := testing.AllocsPerRun(100, func() {
		manifest, payload, err := reg.AppendEncode(buf[:0], Add{N: 1})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := reg.Decode(manifest, payload); err != nil {
			t.Fatal(err)
		}
	})
	n := testing.AllocsPerRun(100, func() {
		if err := a.SendDeliver(to, &d); err != nil {
			t.Fatal(err)
		}
	})
	if n > userAllocs {
		t.Fatalf("a tell: %v allocations, the user message's encoding and decoding %v", n, userAllocs)
	}
	if s := b.Stats(); s.Delivered < 100 {
		t.Fatalf("receiver's stats %+v", s)
	}
}

// A Deliver received encoded borrows its ids from the frame only on its
// way to deliver: one that a listener without deliver gets, or that goes
// the way of every message (a user message with reply addresses, left
// encoded), has strings and a payload of its own. The pipe writes over
// each frame once handled, as a transport that kept no frame would: a
// view of it would change.
func TestDeliversThatMayBeKeptOwnTheirIDs(t *testing.T) {
	var rt entity.ReplyTo[Count]
	if err := json.Unmarshal([]byte(`{"node":"a","incarnation":1,"id":5}`), &rt); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		listen func(keep func(protocol.Deliver)) (handle func(protocol.Message) error, deliver func(protocol.Deliver) error)
		msg    func(n int) any
	}{
		{"handled", func(keep func(protocol.Deliver)) (func(protocol.Message) error, func(protocol.Deliver) error) {
			return func(m protocol.Message) error { keep(m.(protocol.Deliver)); return nil }, nil
		}, func(n int) any { return Add{N: n} }},
		{"with reply addresses", func(keep func(protocol.Deliver)) (func(protocol.Message) error, func(protocol.Deliver) error) {
			return func(protocol.Message) error { return nil }, func(d protocol.Deliver) error { keep(d); return nil }
		}, func(int) any { return Get{ReplyTo: rt} }},
	} {
		var kept []protocol.Deliver
		handle, deliver := c.listen(func(d protocol.Deliver) { kept = append(kept, d) })
		a, b, _, pb := pair(t, newCodec(), nil, false, handle, deliver)
		to := remote.Address{Node: b.Node(), Type: "Counter"}
		for i := range 2 {
			d := protocol.Deliver{Shard: fmt.Sprintf("shard-%d", i), EntityID: fmt.Sprintf("entity-%d", i), Msg: c.msg(i)}
			if err := a.SendDeliver(to, &d); err != nil {
				t.Fatal(err)
			}
		}
		if len(kept) != 2 || len(pb.bad) != 0 {
			t.Fatalf("%s: kept %+v, bad frames %v", c.name, kept, pb.bad)
		}
		for i, d := range kept {
			if d.Shard != fmt.Sprintf("shard-%d", i) || d.EntityID != fmt.Sprintf("entity-%d", i) {
				t.Fatalf("%s: Deliver %d kept as %+v: its ids changed with the next frame", c.name, i, d)
			}
			if e, ok := d.Msg.(wire.Encoded); ok {
				_, want, err := newCodec().Encode(c.msg(i))
				if err != nil || !bytes.Equal(e.Payload, want) {
					t.Fatalf("%s: Deliver %d kept its message as %q, want %q: it changed with the frame's bytes", c.name, i, e.Payload, want)
				}
			}
		}
	}
}

// What a listener keeps of a message received encoded outlives the
// frame's bytes, which the transport writes over once the message is
// handled: a hand-over's mail, and a tell, decoded by a serializer that
// keeps its input, each hold bytes of their own.
func TestKeptMessagesOutliveTheFrame(t *testing.T) {
	var handled []protocol.Message
	var delivered []protocol.Deliver
	a, b, _, pb := pair(t, newCodec(), nil, false,
		func(m protocol.Message) error { handled = append(handled, m); return nil },
		func(d protocol.Deliver) error { delivered = append(delivered, d); return nil })
	to := remote.Address{Node: b.Node(), Type: "Counter"}
	mail := protocol.Deliver{Shard: "s", EntityID: "e", Msg: Blob("mail")}
	if err := a.Send(to, protocol.HandOver{Shard: "s", From: a.Node(), Seq: 1, Msgs: []protocol.Deliver{mail}}); err != nil {
		t.Fatal(err)
	}
	if err := a.SendDeliver(to, &protocol.Deliver{Shard: "s", EntityID: "e", Msg: Blob("tell")}); err != nil {
		t.Fatal(err)
	}
	if len(handled) != 1 || len(delivered) != 1 || len(pb.bad) != 0 {
		t.Fatalf("handled %+v, delivered %+v, bad frames %v", handled, delivered, pb.bad)
	}
	if h, ok := handled[0].(protocol.HandOver); !ok || len(h.Msgs) != 1 || !bytes.Equal(h.Msgs[0].Msg.(Blob), Blob("mail")) {
		t.Fatalf("kept %+v: the hand-over's mail changed with the frame's bytes", handled[0])
	}
	if got := delivered[0].Msg.(Blob); !bytes.Equal(got, Blob("tell")) {
		t.Fatalf("kept a tell of %q: it changed with the frame's bytes", got)
	}
}

// nowhereRef is a Ref through b's transport to a target type that nobody
// listens for on a: a refuses the Get, and fails its ask.
type nowhereRef struct {
	asker *entity.System
	b     *remote.Transport
	a     cluster.UniqueAddress
}

func (r nowhereRef) System() *entity.System { return r.asker }
func (r nowhereRef) Tell(m Get) error {
	return r.b.SendDeliver(remote.Address{Node: r.a, Type: "Nobody"}, &protocol.Deliver{Shard: "s", EntityID: "e", Msg: m})
}

// The failure of an ask that another node refused takes the way of its
// reply (cluster.ReplySender), and fails the ask at once.
func TestAskFailureTakesTheWayOfReplies(t *testing.T) {
	a, b, pa, _ := pair(t, newCodec(), nil, false, func(protocol.Message) error { return nil }, func(protocol.Deliver) error { return nil })
	s, err := entity.NewSystem(entity.Config{NodeID: b.Node().Node, Incarnation: b.Node().Incarnation, Codec: newCodec(), Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	b.Attach(s)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = entity.Ask(ctx, nowhereRef{asker: s, b: b, a: a.Node()}, func(to entity.ReplyTo[Count]) Get { return Get{ReplyTo: to} })
	if !errors.Is(err, remote.ErrUnknownTarget) {
		t.Fatalf("ask of a target nobody listens for: %v, want ErrUnknownTarget", err)
	}
	if pa.replies != 1 {
		t.Fatalf("%d messages sent by SendReply, want the ask's failure", pa.replies)
	}
}

// farRef is a Ref to an entity on the other end of a pipe: a Get told
// through it is answered there, by reply on the other node's System, as
// an entity would.
type farRef struct {
	asker, replier *entity.System
	reply          any // what the far entity answers
}

func (r farRef) System() *entity.System { return r.asker }
func (r farRef) Tell(m Get) error       { return runtime.Reply(r.replier, m.ReplyTo, r.reply.(Count)) }

// A reply to an ask of another node reaches the ask, over a cluster
// transport that takes encoded messages (the envelope's bytes, written
// by wire.AppendReply, sent as a reply: cluster.ReplySender) and over one
// that takes values; a reply with no ask waiting is refused on the asking
// node as it is either way.
func TestRouteReplyReachesTheAsk(t *testing.T) {
	for _, plain := range []bool{false, true} {
		a, b, pa, pb := pair(t, newCodec(), nil, plain, func(protocol.Message) error { return nil }, func(protocol.Deliver) error { return nil })
		var sys [2]*entity.System
		for i, tr := range []*remote.Transport{a, b} {
			s, err := entity.NewSystem(entity.Config{NodeID: tr.Node().Node, Incarnation: tr.Node().Incarnation, Codec: newCodec(), Logger: quiet()})
			if err != nil {
				t.Fatal(err)
			}
			tr.Attach(s)
			sys[i] = s
		}
		// The pipe hands the reply over before Tell returns: the deadline
		// only bounds a reply that never came.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		got, err := entity.Ask(ctx, farRef{asker: sys[1], replier: sys[0], reply: Count{N: 7, Node: "a"}},
			func(to entity.ReplyTo[Count]) Get { return Get{ReplyTo: to} })
		cancel()
		if err != nil || got != (Count{N: 7, Node: "a"}) {
			t.Fatalf("plain %v: ask = %+v, %v", plain, got, err)
		}
		if st := b.Stats(); st.Replies != 1 || len(pb.bad) != 0 {
			t.Fatalf("plain %v: asker's stats %+v, bad frames %v", plain, st, pb.bad)
		}
		if want := map[bool]int{false: 1, true: 0}[plain]; pa.replies != want {
			t.Fatalf("plain %v: %d replies sent by SendReply, want %d", plain, pa.replies, want)
		}
	}
}
