package entity_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/cluster/inproc"
	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/internal/runtime"
)

// The tests in this file ask across nodes: two Systems, each an incarnation
// on a cluster/inproc network that encodes every message, so commands and
// replies cross as bytes exactly as over a socket.

type quote struct {
	Symbol string
	Cents  int64
}

// price is another type, for a reply whose manifest names the wrong one.
type price struct{ Amount float64 }

type quoteCmd interface{ isQuoteCmd() }

type askQuote struct {
	Symbol  string
	ReplyTo entity.ReplyTo[quote]
}

// holdQuote keeps the address; releaseQuote answers it.
type holdQuote struct{ ReplyTo entity.ReplyTo[quote] }
type releaseQuote struct{}

func (askQuote) isQuoteCmd()     {}
func (holdQuote) isQuoteCmd()    {}
func (releaseQuote) isQuoteCmd() {}

// replyFrame is the glue's wire message: a reply on its way to the asking
// incarnation.
type replyFrame struct {
	To       entity.ReplyAddress
	Manifest string
	Payload  []byte
}

var quoteKey = entity.NewTypeKey[quoteCmd]("quoter")

// wireCodec is the network's codec: commands and reply frames.
func wireCodec() *codec.Registry {
	reg := codec.NewRegistry()
	codec.MustRegister[askQuote](reg, "askQuote")
	codec.MustRegister[holdQuote](reg, "holdQuote")
	codec.MustRegister[releaseQuote](reg, "releaseQuote")
	codec.MustRegister[replyFrame](reg, "replyFrame")
	return reg
}

// remoteNode is one System joined to the network, with the glue a transport
// runner provides: replies for other nodes leave encoded through its
// ReplyRouter, arriving reply frames go to DeliverReply, arriving commands
// to the node's quoter.
type remoteNode struct {
	sys          *entity.System
	tr           *inproc.Transport
	quoter       *entity.Cell[quoteCmd]
	replyErrs    recorder[error] // what Reply returned on this node
	deliveryErrs recorder[error] // what DeliverReply returned on this node
}

func startNode(t *testing.T, net *inproc.Network, addr cluster.UniqueAddress, replyCodec *codec.Registry) *remoteNode {
	t.Helper()
	n := &remoteNode{}
	n.sys = newSystem(t, func(c *entity.Config) {
		c.NodeID, c.Incarnation, c.Codec = addr.Node, addr.Incarnation, replyCodec
	})
	runtime.SetReplyRouter(n.sys, encodingRouter{replyCodec, func(to entity.ReplyAddress, manifest string, payload []byte) error {
		return n.tr.Send(cluster.UniqueAddress{Node: to.Node, Incarnation: to.Incarnation},
			replyFrame{To: to, Manifest: manifest, Payload: payload})
	}})
	n.quoter = entity.Spawn(n.sys, &entity.Props[quoteCmd]{Key: quoteKey, Create: n.quoterBehavior}, "q")
	tr, err := net.Join(addr, func(_ cluster.UniqueAddress, msg any) {
		switch m := msg.(type) {
		case replyFrame:
			if err := runtime.DeliverReply(context.Background(), n.sys, m.To, m.Manifest, m.Payload); err != nil {
				n.deliveryErrs.add(err)
			}
		case quoteCmd:
			_ = n.quoter.Tell(m)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	n.tr = tr
	return n
}

func (n *remoteNode) quoterBehavior(entity.Context[quoteCmd]) entity.Behavior[quoteCmd] {
	var held entity.ReplyTo[quote]
	return entity.Receive(func(ctx entity.Context[quoteCmd], m quoteCmd) entity.Behavior[quoteCmd] {
		var err error
		switch m := m.(type) {
		case askQuote:
			err = entity.Reply(ctx, m.ReplyTo, quote{Symbol: m.Symbol, Cents: 4200})
		case holdQuote:
			held = m.ReplyTo
		case releaseQuote:
			err = entity.Reply(ctx, held, quote{Symbol: "held", Cents: 1})
		}
		if err != nil {
			n.replyErrs.add(err)
		}
		return entity.Same[quoteCmd]()
	})
}

// remoteRef is a Ref whose Tell crosses the network to another incarnation.
type remoteRef struct {
	from *remoteNode
	to   cluster.UniqueAddress
}

func (r remoteRef) Tell(m quoteCmd) error  { return r.from.tr.Send(r.to, m) }
func (r remoteRef) System() *entity.System { return r.from.sys }

// captureRef keeps what is told to it, so a test holds an Ask's address.
type captureRef struct {
	sys *entity.System
	got chan quoteCmd
}

func (r captureRef) Tell(m quoteCmd) error  { r.got <- m; return nil }
func (r captureRef) System() *entity.System { return r.sys }

func newNetwork(t *testing.T) *inproc.Network {
	t.Helper()
	net, err := inproc.NewNetwork(inproc.Config{Codec: wireCodec(), Clock: nowClock{}, Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	return net
}

// nowClock is time.Now: inside a synctest bubble, the bubble's fake time.
type nowClock struct{}

func (nowClock) Now() time.Time { return time.Now() }

// pump delivers until nothing is in flight and every goroutine (entity
// workers, askers) has settled.
func pump(net *inproc.Network) {
	for {
		synctest.Wait()
		if net.DeliverDue() == 0 {
			return
		}
	}
}

type askResult struct {
	q   quote
	err error
	at  time.Time
}

// askAsync starts an Ask on its own goroutine; the result arrives on the channel.
func askAsync(ctx context.Context, ref entity.Ref[quoteCmd], build func(entity.ReplyTo[quote]) quoteCmd) <-chan askResult {
	res := make(chan askResult, 1)
	go func() {
		q, err := entity.Ask(ctx, ref, build)
		res <- askResult{q, err, time.Now()}
	}()
	return res
}

var (
	nodeA1 = cluster.UniqueAddress{Node: "a", Incarnation: 1}
	nodeA2 = cluster.UniqueAddress{Node: "a", Incarnation: 2}
	nodeB1 = cluster.UniqueAddress{Node: "b", Incarnation: 1}
)

func quoteCodec(manifest string) *codec.Registry {
	reg := codec.NewRegistry()
	codec.MustRegister[quote](reg, manifest)
	return reg
}

// A asks the quoter on B: the command crosses as bytes, B's Reply hands the
// encoded reply to its ReplyRouter, the network carries it, and A's
// pending ask decodes it into its own R, whether the reply type is
// registered or travels as JSON.
func TestAskAcrossNodes(t *testing.T) {
	for name, codecs := range map[string][2]*codec.Registry{
		"unregistered reply as JSON": {nil, nil},
		"registered reply":           {quoteCodec("quote"), quoteCodec("quote")},
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				net := newNetwork(t)
				a := startNode(t, net, nodeA1, codecs[0])
				b := startNode(t, net, nodeB1, codecs[1])
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				res := askAsync(ctx, remoteRef{from: a, to: nodeB1}, func(r entity.ReplyTo[quote]) quoteCmd {
					return askQuote{Symbol: "SHL", ReplyTo: r}
				})
				pump(net)
				r := <-res
				if r.err != nil {
					t.Fatalf("ask across nodes: %v (B's Reply: %v, A's delivery: %v)", r.err, b.replyErrs.get(), a.deliveryErrs.get())
				}
				if r.q != (quote{Symbol: "SHL", Cents: 4200}) {
					t.Fatalf("reply %+v", r.q)
				}
				if st := net.Stats(); st.Delivered != 2 || st.Undecodable != 0 {
					t.Fatalf("network %+v, want the command and the reply delivered as frames", st)
				}
				if a.sys.DeadLetters() != 0 || b.sys.DeadLetters() != 0 || a.sys.Stats().AsksWaiting != 0 {
					t.Fatalf("dead letters a=%d b=%d, asks waiting %d", a.sys.DeadLetters(), b.sys.DeadLetters(), a.sys.Stats().AsksWaiting)
				}
			})
		})
	}
}

// A reply whose bytes do not decode into the asker's R fails that Ask at
// once with ErrReplyUndecodable wrapping the codec's reason: no timeout.
func TestAskAcrossNodesUndecodableReply(t *testing.T) {
	cases := map[string]struct {
		askerCodec, replierCodec *codec.Registry
		want                     error
	}{
		"unknown manifest": {quoteCodec("quote"), quoteCodec("quote.v2"), codec.ErrUnknownManifest},
		"wrong type": {
			func() *codec.Registry {
				reg := codec.NewRegistry()
				codec.MustRegister[price](reg, "price")
				return reg
			}(),
			quoteCodec("price"),
			codec.ErrTypeMismatch,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				net := newNetwork(t)
				a := startNode(t, net, nodeA1, tc.askerCodec)
				startNode(t, net, nodeB1, tc.replierCodec)
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				start := time.Now()
				res := askAsync(ctx, remoteRef{from: a, to: nodeB1}, func(r entity.ReplyTo[quote]) quoteCmd {
					return askQuote{Symbol: "SHL", ReplyTo: r}
				})
				pump(net)
				r := <-res
				if !errors.Is(r.err, entity.ErrReplyUndecodable) || !errors.Is(r.err, tc.want) {
					t.Fatalf("ask: %v, want ErrReplyUndecodable wrapping %v", r.err, tc.want)
				}
				if waited := r.at.Sub(start); waited != 0 {
					t.Fatalf("the ask failed after %v, want at once", waited)
				}
				errs := a.deliveryErrs.get()
				if len(errs) != 1 || !errors.Is(errs[0], entity.ErrReplyUndecodable) {
					t.Fatalf("DeliverReply returned %v, want one ErrReplyUndecodable", errs)
				}
				if a.sys.DeadLetters() != 1 || a.sys.Stats().AsksWaiting != 0 {
					t.Fatalf("dead letters %d, asks waiting %d; want 1, 0", a.sys.DeadLetters(), a.sys.Stats().AsksWaiting)
				}
			})
		})
	}
}

// DeliverReply checks the bytes against the pending ask's own decoder: a
// corrupt payload, JSON of another shape, or an unknown manifest each fail
// that ask at once and are returned to the deliverer.
func TestDeliverReplyUndecodable(t *testing.T) {
	cases := map[string]struct {
		manifest, payload string
		want              error
	}{
		"corrupt JSON reply":   {runtime.JSONReplyManifest, `{"Symbol":`, entity.ErrReplyUndecodable},
		"JSON of another type": {runtime.JSONReplyManifest, `"just a string"`, entity.ErrReplyUndecodable},
		"unknown manifest":     {"nobody.knows", `{}`, codec.ErrUnknownManifest},
		"corrupt registered":   {"quote", `[1,2`, entity.ErrReplyUndecodable},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				sys := newSystem(t, func(c *entity.Config) { c.Codec = quoteCodec("quote") })
				ref := captureRef{sys: sys, got: make(chan quoteCmd, 1)}
				res := askAsync(context.Background(), ref, func(r entity.ReplyTo[quote]) quoteCmd { return askQuote{ReplyTo: r} })
				to := (<-ref.got).(askQuote).ReplyTo.Address()
				err := runtime.DeliverReply(context.Background(), sys, to, tc.manifest, []byte(tc.payload))
				if !errors.Is(err, entity.ErrReplyUndecodable) || !errors.Is(err, tc.want) {
					t.Fatalf("DeliverReply: %v, want ErrReplyUndecodable wrapping %v", err, tc.want)
				}
				synctest.Wait()
				select {
				case r := <-res:
					if !errors.Is(r.err, entity.ErrReplyUndecodable) {
						t.Fatalf("ask: %v", r.err)
					}
				default:
					t.Fatal("the ask still waits after an undecodable reply")
				}
				if sys.DeadLetters() != 1 {
					t.Fatalf("dead letters %d, want 1", sys.DeadLetters())
				}
			})
		})
	}
}

// A restarts as a new incarnation while B holds the old one's reply
// address. The new incarnation's first ask has the same ask id, but B's
// reply is refused, typed, and never reaches it: at B's Reply (the
// transport knows a#1 is gone) and, for a frame that comes anyway, at A's
// DeliverReply.
func TestAskAcrossNodesRestartedAsker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		net := newNetwork(t)
		a1 := startNode(t, net, nodeA1, nil)
		b := startNode(t, net, nodeB1, nil)
		ctx1, cancel1 := context.WithCancel(context.Background())
		var old entity.ReplyAddress
		res1 := askAsync(ctx1, remoteRef{from: a1, to: nodeB1}, func(r entity.ReplyTo[quote]) quoteCmd {
			old = r.Address()
			return holdQuote{ReplyTo: r}
		})
		pump(net) // B holds a#1's address

		a2 := startNode(t, net, nodeA2, nil) // the restart: a#1 dies
		cancel1()
		if r := <-res1; !errors.Is(r.err, context.Canceled) {
			t.Fatalf("a#1's ask: %v", r.err)
		}
		ref := captureRef{sys: a2.sys, got: make(chan quoteCmd, 1)}
		ctx2, cancel2 := context.WithCancel(context.Background())
		defer cancel2()
		res2 := askAsync(ctx2, ref, func(r entity.ReplyTo[quote]) quoteCmd { return askQuote{ReplyTo: r} })
		successor := (<-ref.got).(askQuote).ReplyTo.Address()
		if successor.AskID != old.AskID || successor.Incarnation == old.Incarnation {
			t.Fatalf("addresses %v and %v: the test needs the same ask id on two incarnations", old, successor)
		}

		mustTell[quoteCmd](t, b.quoter, releaseQuote{})
		pump(net)
		errs := b.replyErrs.get()
		if len(errs) != 1 || !errors.Is(errs[0], cluster.ErrStaleIncarnation) {
			t.Fatalf("B's Reply returned %v, want one cluster.ErrStaleIncarnation", errs)
		}
		if b.sys.DeadLetters() != 1 {
			t.Fatalf("B's dead letters %d, want 1", b.sys.DeadLetters())
		}

		payload, _ := json.Marshal(quote{Symbol: "late"})
		err := runtime.DeliverReply(context.Background(), a2.sys, old, runtime.JSONReplyManifest, payload)
		if !errors.Is(err, entity.ErrStaleIncarnation) {
			t.Fatalf("DeliverReply of a#1's reply to a#2: %v, want ErrStaleIncarnation", err)
		}
		synctest.Wait()
		if len(res2) != 0 || a2.sys.Stats().AsksWaiting != 1 {
			t.Fatalf("a#2's ask got a reply meant for a#1 (asks waiting %d)", a2.sys.Stats().AsksWaiting)
		}
		if a2.sys.DeadLetters() != 1 || len(a2.deliveryErrs.get()) != 0 {
			t.Fatalf("a#2: dead letters %d, delivery errors %v; want 1, none", a2.sys.DeadLetters(), a2.deliveryErrs.get())
		}
	})
}

// A reply that arrives after its ask has timed out is refused with
// ErrAskEnded to the deliverer and counted as a dead letter.
func TestAskAcrossNodesReplyAfterAskEnded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		net := newNetwork(t)
		a := startNode(t, net, nodeA1, nil)
		b := startNode(t, net, nodeB1, nil)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		res := askAsync(ctx, remoteRef{from: a, to: nodeB1}, func(r entity.ReplyTo[quote]) quoteCmd {
			return holdQuote{ReplyTo: r}
		})
		pump(net)
		if r := <-res; !errors.Is(r.err, entity.ErrAskTimeout) {
			t.Fatalf("ask: %v, want ErrAskTimeout", r.err)
		}
		mustTell[quoteCmd](t, b.quoter, releaseQuote{})
		pump(net)
		if errs := b.replyErrs.get(); len(errs) != 0 {
			t.Fatalf("B's Reply: %v; the reply did leave B", errs)
		}
		errs := a.deliveryErrs.get()
		if len(errs) != 1 || !errors.Is(errs[0], entity.ErrAskEnded) {
			t.Fatalf("DeliverReply returned %v, want one ErrAskEnded", errs)
		}
		if a.sys.DeadLetters() != 1 {
			t.Fatalf("A's dead letters %d, want 1", a.sys.DeadLetters())
		}
	})
}

// AskFrom keeps the same decoder: an entity on A asking B without blocking
// gets B's reply decoded into its R, or ErrReplyUndecodable at once.
func TestAskFromAcrossNodes(t *testing.T) {
	cases := map[string]struct {
		askerCodec, replierCodec *codec.Registry
		want                     string
	}{
		"decoded":     {quoteCodec("quote"), quoteCodec("quote"), "SHL 4200"},
		"undecodable": {quoteCodec("quote"), quoteCodec("quote.v2"), "undecodable"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				net := newNetwork(t)
				a := startNode(t, net, nodeA1, tc.askerCodec)
				startNode(t, net, nodeB1, tc.replierCodec)
				var outcomes recorder[string]
				asker := spawnFunc(a.sys, "asker", func(ctx entity.Context[string], m string) entity.Behavior[string] {
					if m != "go" {
						outcomes.add(m)
						return entity.Same[string]()
					}
					entity.AskFrom(ctx, remoteRef{from: a, to: nodeB1}, 5*time.Second,
						func(r entity.ReplyTo[quote]) quoteCmd { return askQuote{Symbol: "SHL", ReplyTo: r} },
						func(q quote, err error) string {
							if errors.Is(err, entity.ErrReplyUndecodable) {
								return "undecodable"
							}
							if err != nil {
								return err.Error()
							}
							return q.Symbol + " " + strconv.FormatInt(q.Cents, 10)
						})
					return entity.Same[string]()
				})
				start := time.Now()
				mustTell(t, asker, "go")
				pump(net)
				if got := outcomes.get(); len(got) != 1 || got[0] != tc.want {
					t.Fatalf("outcomes %q, want [%q]", got, tc.want)
				}
				if waited := time.Since(start); waited != 0 {
					t.Fatalf("the outcome came after %v, want at once", waited)
				}
			})
		})
	}
}
