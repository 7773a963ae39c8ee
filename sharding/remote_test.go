package sharding_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/shoal-dev/shoal/internal/logtest"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/cluster/inproc"
	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/sharding"
	"github.com/shoal-dev/shoal/sharding/internal/protocol"
	"github.com/shoal-dev/shoal/sharding/internal/remote"
	"github.com/shoal-dev/shoal/sharding/internal/wire"
	"github.com/shoal-dev/shoal/timers"
)

// The test entity: a counter that remembers which node ran it.
type cmd interface{ isCmd() }

type Add struct{ N int }

type Get struct{ ReplyTo entity.ReplyTo[Count] }

// Big carries a payload to test the frame limit.
type Big struct{ Blob string }

// Probe is a command that some nodes cannot decode (a newer version's).
type Probe struct{ ReplyTo entity.ReplyTo[Count] }

type Count struct {
	N    int
	Node string
}

func (Add) isCmd()   {}
func (Get) isCmd()   {}
func (Big) isCmd()   {}
func (Probe) isCmd() {}

func newCodec() *codec.Registry {
	reg := codec.NewRegistry()
	codec.MustRegister[Add](reg, "test.Add")
	codec.MustRegister[Get](reg, "test.Get")
	codec.MustRegister[Big](reg, "test.Big")
	codec.MustRegister[Count](reg, "test.Count")
	registerFailureTypes(reg)
	return reg
}

// withProbe is newCodec with Probe, the command of a newer version.
func withProbe() *codec.Registry {
	reg := newCodec()
	codec.MustRegister[Probe](reg, "test.Probe")
	return reg
}

func remoteCounter(node string) func(entity.Context[cmd]) entity.Behavior[cmd] {
	return func(entity.Context[cmd]) entity.Behavior[cmd] {
		n := 0
		return entity.Receive(func(ctx entity.Context[cmd], m cmd) entity.Behavior[cmd] {
			switch m := m.(type) {
			case Add:
				n += m.N
			case Get:
				_ = entity.Reply(ctx, m.ReplyTo, Count{N: n, Node: node})
			}
			return entity.Same[cmd]()
		})
	}
}

var (
	counters = entity.NewTypeKey[cmd]("counter")
	others   = entity.NewTypeKey[cmd]("other")
)

// remoteNode is one node of the in-process cluster: its runtime, the remote
// transport and membership under sharding, and a region of each type.
type remoteNode struct {
	self     cluster.UniqueAddress
	sys      *entity.System
	tr       *remote.Transport // sh's dispatch
	members  cluster.Membership
	sh       *sharding.Sharding
	counters *sharding.Region[cmd]
	others   *sharding.Region[cmd]
}

type remoteCluster struct {
	net   *inproc.Network
	nodes []*remoteNode
	stop  func()
}

// newCluster starts n nodes that all see each other Up, over an inproc
// network with a delay on every link, delivered by Run on the bubble's
// clock. The network's codec knows every type; a node's knows those of
// codecs(i), withProbe() if codecs is nil.
func newRemoteCluster(t *testing.T, n int, log *slog.Logger, codecs ...func(i int) *codec.Registry) *remoteCluster {
	t.Helper()
	o := remoteOpts{log: log}
	if len(codecs) > 0 {
		o.codecs = codecs[0]
	}
	return startRemoteCluster(t, n, o)
}

// remoteOpts varies the cluster startCluster builds.
type remoteOpts struct {
	log *slog.Logger
	// codecs gives node i its codec; default withProbe().
	codecs func(i int) *codec.Registry
	// create builds the counters entities of a node; default counter.
	create func(node string) func(entity.Context[cmd]) entity.Behavior[cmd]
	// settings are those of both entity types; default 12 shards.
	settings sharding.Settings
}

func startRemoteCluster(t *testing.T, n int, o remoteOpts) *remoteCluster {
	t.Helper()
	log := o.log
	if o.create == nil {
		o.create = remoteCounter
	}
	if o.settings.NumberOfShards == 0 {
		o.settings.NumberOfShards = 12
	}
	reg := withProbe()
	if err := wire.RegisterTypes(reg); err != nil {
		t.Fatal(err)
	}
	net, err := inproc.NewNetwork(inproc.Config{Codec: reg, Clock: timers.Real{}, Delay: 5 * time.Millisecond, MaxFrameSize: 16 << 10, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	var members []cluster.Member
	for i := range n {
		members = append(members, cluster.Member{
			Address: cluster.UniqueAddress{Node: fmt.Sprintf("n%d", i+1), Incarnation: 7},
			Status:  cluster.Up, JoinOrder: uint64(i + 1),
		})
	}
	view, err := cluster.NewView(members...)
	if err != nil {
		t.Fatal(err)
	}
	c := &remoteCluster{net: net}
	for i, m := range members {
		tn := &remoteNode{self: m.Address}
		lm := cluster.NewLocalMembership(m.Address, view)
		nodeReg := withProbe()
		if o.codecs != nil {
			nodeReg = o.codecs(i)
		}
		ct, err := net.Join(m.Address, func(from cluster.UniqueAddress, msg any) { tn.sh.Receive(from, msg) })
		if err != nil {
			t.Fatal(err)
		}
		if tn.sys, err = entity.NewSystem(entity.Config{
			NodeID: m.Address.Node, Incarnation: m.Address.Incarnation, Codec: nodeReg,
			Logger: log,
		}); err != nil {
			t.Fatal(err)
		}
		tn.members = lm
		if tn.sh, err = sharding.New(tn.sys, sharding.Config{Transport: ct, Membership: tn.members, Logger: log}); err != nil {
			t.Fatal(err)
		}
		tn.tr = sharding.RemoteOf(tn.sh)
		settings := o.settings
		if tn.counters, err = sharding.Init(tn.sh, sharding.Entity[cmd]{Key: counters, Create: o.create(m.Address.Node), Settings: settings}); err != nil {
			t.Fatal(err)
		}
		if tn.others, err = sharding.Init(tn.sh, sharding.Entity[cmd]{Key: others, Create: remoteCounter(m.Address.Node), Settings: settings}); err != nil {
			t.Fatal(err)
		}
		c.nodes = append(c.nodes, tn)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = net.Run(ctx)
	}()
	settleRemote() // every region registers before traffic starts
	c.stop = func() {
		for _, tn := range c.nodes {
			tn.sh.Terminate()
		}
		cancel()
		<-done
	}
	return c
}

// settle lets the bubble's clock run until every delayed message has
// been delivered and handled.
func settleRemote() {
	time.Sleep(time.Second)
	synctest.Wait()
}

func ask(t *testing.T, r *sharding.Region[cmd], id string) Count {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := entity.Ask(ctx, r.EntityRefFor(id), func(to entity.ReplyTo[Count]) cmd { return Get{ReplyTo: to} })
	if err != nil {
		t.Fatalf("ask %s: %v", id, err)
	}
	return got
}

// Messages told on any node reach entities wherever their shards live,
// and asks from any node get their replies decoded into the asker's type,
// for two entity types at once.
func TestMessagesAndAsksAcrossNodes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newRemoteCluster(t, 3, quiet())
		defer c.stop()
		var ids []string
		for i := range 24 {
			ids = append(ids, fmt.Sprintf("e%02d", i))
		}
		for i, id := range ids {
			for k, tn := range c.nodes { // every node adds i+k+1
				if err := tn.counters.EntityRefFor(id).Tell(Add{N: i + k + 1}); err != nil {
					t.Fatalf("tell %s via %s: %v", id, tn.self, err)
				}
				if err := tn.others.EntityRefFor(id).Tell(Add{N: 1}); err != nil {
					t.Fatalf("tell other %s via %s: %v", id, tn.self, err)
				}
			}
		}
		settleRemote()
		hosts := map[string]bool{}
		crossed := 0
		for i, id := range ids {
			want := 3*i + 6
			for _, tn := range c.nodes {
				got := ask(t, tn.counters, id)
				if got.N != want {
					t.Fatalf("%s asked via %s: %d, want %d", id, tn.self, got.N, want)
				}
				hosts[got.Node] = true
				if got.Node != tn.self.Node {
					crossed++
				}
				if o := ask(t, tn.others, id); o.N != 3 {
					t.Fatalf("other %s asked via %s: %d, want 3", id, tn.self, o.N)
				}
			}
		}
		if len(hosts) != 3 {
			t.Fatalf("entities hosted on %v, want all three nodes", hosts)
		}
		if crossed == 0 {
			t.Fatal("no ask crossed nodes")
		}
		for _, tn := range c.nodes {
			st := tn.tr.Stats()
			if st.Sent == 0 || st.Replies == 0 || st.Delivered == 0 {
				t.Fatalf("%s: stats %+v: expected traffic over the cluster transport", tn.self, st)
			}
			if st.Undecodable+st.UnknownTarget+st.NotProtocol+st.Stale+st.ReplyRefused != 0 {
				t.Fatalf("%s: refused messages in a clean run: %+v", tn.self, st)
			}
		}
	})
}

// A message over the frame limit is refused on Send with the cluster's
// typed error, and one the codec cannot encode with the codec's; the
// sender's Tell returns it and nothing is lost silently.
func TestOversizedAndUnregisteredRefusedOnSend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newRemoteCluster(t, 2, quiet())
		defer c.stop()
		a, b := c.nodes[0], c.nodes[1]
		to := sharding.Address{Node: b.self, Type: counters.Name()}
		err := a.tr.Send(to, protocol.Deliver{Shard: "1", EntityID: "x", Msg: Big{Blob: strings.Repeat("x", 32<<10)}})
		if !errors.Is(err, cluster.ErrFrameTooLarge) {
			t.Fatalf("oversized: %v, want ErrFrameTooLarge", err)
		}
		err = a.tr.Send(to, protocol.Deliver{Shard: "1", EntityID: "x", Msg: struct{ X int }{1}})
		if !errors.Is(err, codec.ErrUnregisteredType) {
			t.Fatalf("unregistered: %v, want codec.ErrUnregisteredType", err)
		}
		// Through the region: an entity whose shard lives on b.
		id := onNode(t, c, a, b)
		if err := a.counters.EntityRefFor(id).Tell(Big{Blob: strings.Repeat("x", 32<<10)}); !errors.Is(err, cluster.ErrFrameTooLarge) {
			t.Fatalf("oversized Tell to an entity on another node: %v, want ErrFrameTooLarge", err)
		}
		if err := a.counters.EntityRefFor(id).Tell(Add{N: 2}); err != nil {
			t.Fatal(err)
		}
		settleRemote()
		if got := ask(t, a.counters, id); got.N != 2 || got.Node != b.self.Node {
			t.Fatalf("after the refusal: %+v, want 2 on %s", got, b.self.Node)
		}
	})
}

// captureRef hands the asks sent to it to the test.
type captureRef struct {
	sys *entity.System
	ch  chan Get
}

func (r captureRef) Tell(m cmd) error {
	r.ch <- m.(Get)
	return nil
}
func (r captureRef) System() *entity.System { return r.sys }

// onNode returns an entity id whose shard via's region knows to live on home.
func onNode(t *testing.T, c *remoteCluster, via, home *remoteNode) string {
	t.Helper()
	for i := range 200 {
		id := fmt.Sprintf("probe-%d", i)
		if got := ask(t, via.counters, id); got.Node == home.self.Node {
			return id
		}
	}
	t.Fatalf("no entity found on %s", home.self)
	return ""
}

// Bad messages that reach a node (a user message with an unknown manifest
// or a corrupt payload, a target nobody listens at, a sender the view
// holds as replaced, a type that is no protocol message, a reply to an
// ask that ended or that does not decode) are refused with typed errors, counted, logged once per kind
// and sender, and the node keeps serving.
func TestBadMessagesRefusedWithTypedErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &logtest.Recorder{}
		c := newRemoteCluster(t, 2, slog.New(rec))
		defer c.stop()
		a, b := c.nodes[0], c.nodes[1]
		id := onNode(t, c, a, b)
		shard := b.counters.ShardID(id)
		to := wire.Target{Type: counters.Name()}
		// deliver is a Deliver as it arrives: its user message encoded.
		deliver := func(manifest, payload string) wire.Envelope {
			return wire.Envelope{To: to, Msg: protocol.Deliver{Shard: shard, EntityID: id,
				Msg: wire.Encoded{Manifest: manifest, Payload: []byte(payload)}}}
		}
		bad := []struct {
			name string
			msg  any
			from cluster.UniqueAddress
			want []error
		}{
			{"unknown manifest", deliver("test.Nope", `{}`),
				a.self, []error{sharding.ErrUndecodable, codec.ErrUnknownManifest}},
			{"unknown manifest again", deliver("test.Nope", `{}`),
				a.self, []error{sharding.ErrUndecodable, codec.ErrUnknownManifest}},
			{"corrupt payload", deliver("test.Add", `{"N":`),
				a.self, []error{sharding.ErrUndecodable}},
			{"unknown target", wire.Envelope{To: wire.Target{Type: "nobody"}, Msg: protocol.Register{Region: a.self}},
				a.self, []error{sharding.ErrUnknownTarget}},
			{"stale sender", deliver("test.Add", `{"N":100}`),
				cluster.UniqueAddress{Node: a.self.Node, Incarnation: a.self.Incarnation - 1}, []error{cluster.ErrStaleIncarnation}},
			{"not protocol", Count{N: 1},
				a.self, []error{remote.ErrNotProtocol}},
			{"reply to an ask that ended", wire.Envelope{Msg: wire.Reply{To: entity.ReplyAddress{Node: b.self.Node, Incarnation: b.self.Incarnation, AskID: 1 << 40}, Manifest: "test.Count"}},
				a.self, []error{entity.ErrAskEnded}},
		}
		for _, tc := range bad {
			err := b.tr.Receive(tc.from, tc.msg)
			for _, w := range tc.want {
				if !errors.Is(err, w) {
					t.Errorf("%s: %v, want %v", tc.name, err, w)
				}
			}
		}
		st := b.tr.Stats()
		if st.Undecodable != 3 || st.UnknownTarget != 1 || st.Stale != 1 || st.NotProtocol != 1 || st.ReplyRefused != 1 {
			t.Fatalf("stats %+v", st)
		}
		if n := rec.Count("test.Nope"); n != 1 {
			t.Fatalf("unknown manifest twice from one sender logged %d times at Warn, want once:\n%s", n, strings.Join(rec.Warns(), "\n"))
		}
		// The node keeps serving: the entity got none of the bad messages
		// and takes good ones.
		if err := a.counters.EntityRefFor(id).Tell(Add{N: 5}); err != nil {
			t.Fatal(err)
		}
		settleRemote()
		if got := ask(t, a.counters, id); got.N != 5 {
			t.Fatalf("entity after bad messages: %+v, want 5", got)
		}
		// A hand-over keeps the messages that decode and reports the others.
		err := b.tr.Receive(a.self, wire.Envelope{To: wire.Target{Type: counters.Name(), Coordinator: true},
			Msg: protocol.HandOver{Shard: shard, From: cluster.UniqueAddress{Node: "x", Incarnation: 1}, Msgs: []protocol.Deliver{
				{Shard: shard, EntityID: id, Msg: wire.Encoded{Manifest: "test.Nope"}},
				{Shard: shard, EntityID: id, Msg: wire.Encoded{Manifest: "test.Add", Payload: []byte(`{"N":1}`)}}}}})
		if !errors.Is(err, sharding.ErrUnknownTarget) || b.tr.Stats().Undecodable != 4 {
			t.Fatalf("hand-over with an undecodable entry to a node without coordinator: %v, stats %+v", err, b.tr.Stats())
		}

		// A reply that does not decode into the asker's type fails the ask
		// at once with a typed error, not at its deadline.
		asked := make(chan Get, 1)
		result := make(chan error, 1)
		go func() {
			_, err := entity.Ask(context.Background(), captureRef{b.sys, asked}, func(to entity.ReplyTo[Count]) cmd { return Get{ReplyTo: to} })
			result <- err
		}()
		g := <-asked
		if err := b.tr.Receive(a.self, wire.Envelope{Msg: wire.Reply{To: g.ReplyTo.Address(), Manifest: "test.Count", Payload: []byte(`"not a count"`)}}); !errors.Is(err, entity.ErrReplyUndecodable) {
			t.Fatalf("undecodable reply: %v, want entity.ErrReplyUndecodable", err)
		}
		if err := <-result; !errors.Is(err, entity.ErrReplyUndecodable) {
			t.Fatalf("the ask: %v, want entity.ErrReplyUndecodable", err)
		}
	})
}

// An ask whose command the receiving node cannot decode (a type of a newer
// version, say, during a rolling update) fails at once with a typed error
// naming the refusal, instead of waiting for its deadline.
func TestAskRefusedByPeerFailsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newRemoteCluster(t, 2, quiet(), func(i int) *codec.Registry {
			if i == 1 {
				return newCodec() // the older node: no Probe
			}
			return withProbe()
		})
		defer c.stop()
		a, b := c.nodes[0], c.nodes[1]
		id := onNode(t, c, a, b)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err := entity.Ask(ctx, a.counters.EntityRefFor(id), func(to entity.ReplyTo[Count]) cmd { return Probe{ReplyTo: to} })
		var refused *sharding.RefusedError
		if !errors.As(err, &refused) || !errors.Is(err, sharding.ErrUndecodable) || !errors.Is(err, sharding.ErrRefusedByPeer) {
			t.Fatalf("ask of an undecodable command: %v, want a RefusedError matching ErrUndecodable", err)
		}
		if refused.Peer != b.self {
			t.Fatalf("refused by %s, want %s", refused.Peer, b.self)
		}
		if st := b.tr.Stats(); st.AsksFailed != 1 || st.Undecodable != 1 {
			t.Fatalf("refusing node's stats %+v", st)
		}
		// The entity is unharmed and the older node keeps serving.
		if got := ask(t, a.counters, id); got.N != 0 || got.Node != b.self.Node {
			t.Fatalf("after the refusal: %+v", got)
		}
	})
}

// Tells from one node reach each entity on another in the order they
// were told: the first while the shard is still being placed (they wait
// in the regions), the later ones once it runs there (straight from the
// transport to the entity), and none overtakes another on the way.
func TestTellsAcrossNodesKeepTheirOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		seen := map[string][]int{}
		record := func(node string) func(entity.Context[cmd]) entity.Behavior[cmd] {
			return func(entity.Context[cmd]) entity.Behavior[cmd] {
				return entity.Receive(func(ctx entity.Context[cmd], m cmd) entity.Behavior[cmd] {
					switch m := m.(type) {
					case Add:
						mu.Lock()
						seen[ctx.EntityID()] = append(seen[ctx.EntityID()], m.N)
						mu.Unlock()
					case Get:
						_ = entity.Reply(ctx, m.ReplyTo, Count{Node: node})
					}
					return entity.Same[cmd]()
				})
			}
		}
		c := startRemoteCluster(t, 2, remoteOpts{log: quiet(), create: record})
		defer c.stop()
		a, b := c.nodes[0], c.nodes[1]
		const rounds = 100
		var ids []string
		for i := range 12 {
			ids = append(ids, fmt.Sprintf("o%02d", i))
		}
		for n := range rounds {
			for _, id := range ids {
				if err := a.counters.EntityRefFor(id).Tell(Add{N: n}); err != nil {
					t.Fatalf("tell %s #%d: %v", id, n, err)
				}
			}
			time.Sleep(time.Millisecond) // the bubble's clock: placement happens meanwhile
		}
		settleRemote()
		crossed := 0
		for _, id := range ids {
			if ask(t, a.counters, id).Node == b.self.Node {
				crossed++
			}
			mu.Lock()
			got := seen[id]
			mu.Unlock()
			if len(got) != rounds {
				t.Fatalf("%s got %d of %d tells", id, len(got), rounds)
			}
			for n, v := range got {
				if v != n {
					t.Fatalf("%s got tell #%d in place %d: %v", id, v, n, got)
				}
			}
		}
		if crossed == 0 {
			t.Fatal("no entity on the other node")
		}
	})
}
