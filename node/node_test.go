package node_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/cluster/lease"
	leasepg "github.com/shoal-dev/shoal/cluster/lease/postgres"
	"github.com/shoal-dev/shoal/cluster/memberlist"
	"github.com/shoal-dev/shoal/cluster/tcp"
	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/eventsourced"
	"github.com/shoal-dev/shoal/internal/pgtest"
	"github.com/shoal-dev/shoal/internal/poll"
	"github.com/shoal-dev/shoal/internal/testcert"
	"github.com/shoal-dev/shoal/node"
	"github.com/shoal-dev/shoal/sharding"
)

var pg = pgtest.New()

func TestMain(m *testing.M) { os.Exit(pg.Run(m)) }

// The test entity: an event-sourced log of operation ids, so that the
// test can tell which acknowledged operations survived and that none was
// applied twice.
type Command interface{ isCommand() }

type Apply struct {
	Op      string
	ReplyTo entity.ReplyTo[int]
}

type Read struct{ ReplyTo entity.ReplyTo[Snapshot] }

type Stop struct{}

type Applied struct{ Op string }

type State struct{ Ops []string }

type Snapshot struct {
	Ops  []string
	Node string
}

func (Apply) isCommand() {}
func (Read) isCommand()  {}
func (Stop) isCommand()  {}

var opsKey = entity.NewTypeKey[Command]("Ops")

func newCodec() *codec.Registry {
	reg := codec.NewRegistry()
	codec.MustRegister[Apply](reg, "test.Apply")
	codec.MustRegister[Read](reg, "test.Read")
	codec.MustRegister[Stop](reg, "test.Stop")
	codec.MustRegister[Applied](reg, "test.Applied")
	codec.MustRegister[State](reg, "test.State")
	codec.MustRegister[Snapshot](reg, "test.Snapshot")
	return reg
}

func newOps(nodeID string) func(entity.Context[Command]) entity.Behavior[Command] {
	return func(ec entity.Context[Command]) entity.Behavior[Command] {
		return eventsourced.New(eventsourced.Config[Command, Applied, State]{
			PersistenceID: eventsourced.PersistenceIDOf(opsKey, ec.EntityID()),
			OnCommand: func(ctx eventsourced.CommandContext[Command, Applied, State], s State, c Command) eventsourced.Effect[Applied, State] {
				switch c := c.(type) {
				case Apply:
					return ctx.Persist(Applied{Op: c.Op}).ThenReplyFrom(func(s State) eventsourced.Answer {
						return eventsourced.To(c.ReplyTo, len(s.Ops))
					})
				case Read:
					return ctx.Reply(eventsourced.To(c.ReplyTo, Snapshot{Ops: slices.Clone(s.Ops), Node: nodeID}))
				case Stop:
					return ctx.Stop()
				}
				return ctx.Unhandled()
			},
			OnEvent: func(_ eventsourced.Context[Command], s State, e Applied) State {
				s.Ops = append(slices.Clone(s.Ops), e.Op)
				return s
			},
		})
	}
}

// testTiming is fast gossip with a lenient failure detector: joins and
// leaves spread in well under a second, and a node starved of CPU by the
// race detector or a busy machine is not declared failed.
func testTiming() memberlist.Timing {
	t := memberlist.FastTiming()
	t.ProbeInterval, t.ProbeTimeout = time.Second, 500*time.Millisecond
	t.SuspicionMult, t.SuspicionMaxTimeoutMult = 4, 6
	t.TCPTimeout = 5 * time.Second
	t.ReconnectTimeout = 5 * time.Minute
	return t
}

// testLeases are longer than lease.DefaultSettings, which fence a node
// after 1.5 s without a successful renewal: beside many test binaries on
// two cores, a healthy node's renewals were seen to wait that long, and a
// test about something else failed with "lease: fenced". Here a node fences
// after 6 s without one, and a killed node's shards move 8 s after its
// last renewal. Tests about the lease set their own.
func testLeases() lease.Settings {
	t := lease.Timing{Length: 8 * time.Second, RenewEvery: 500 * time.Millisecond, Margin: 2 * time.Second}
	return lease.Settings{Node: t, Coordinator: t}
}

type testNode struct {
	*node.Node
	ops *sharding.Region[Command]
}

func startNode(t testing.TB, dsn, id string, seeds []string, tune ...func(*node.Config)) *testNode {
	t.Helper()
	return startNodeWith(t, dsn, id, seeds, sharding.Settings{NumberOfShards: 30, MinMembers: len(seeds) + 1}, tune...)
}

// startNodeWith starts a node hosting the Ops type with settings.
func startNodeWith(t testing.TB, dsn, id string, seeds []string, settings sharding.Settings, tune ...func(*node.Config)) *testNode {
	t.Helper()
	cfg := node.DefaultConfig(id)
	cfg.PostgresDSN = dsn
	cfg.Seeds = seeds
	cfg.Timing = testTiming()
	cfg.Leases = testLeases()
	cfg.Codec = newCodec()
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	for _, f := range tune {
		f(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := node.Start(ctx, cfg)
	if err != nil {
		t.Fatalf("start %s: %v", id, err)
	}
	t.Cleanup(n.Kill)
	ops, err := sharding.Init(n.Sharding(), sharding.Entity[Command]{
		Key: opsKey, Create: newOps(id), StopMessage: Stop{}, Settings: settings,
	})
	if err != nil {
		t.Fatal(err)
	}
	return &testNode{Node: n, ops: ops}
}

// awaitUp waits until every node sees all of them Up and is ready.
func awaitUp(t testing.TB, nodes []*testNode) {
	t.Helper()
	for _, n := range nodes {
		eventually(t, "every node sees the others Up and is ready", func() error {
			up := 0
			for _, m := range n.Membership().View().Members() {
				if m.Status == cluster.Up {
					up++
				}
			}
			if up != len(nodes) {
				return fmt.Errorf("%s sees %d Up of %d", n.Self(), up, len(nodes))
			}
			return n.Ready()
		})
	}
}

// eventually polls cond until it holds or 30 s have passed.
func eventually(t testing.TB, what string, cond func() error) {
	t.Helper()
	poll.Within(t, 30*time.Second, what, cond)
}

func apply(ctx context.Context, r *sharding.Region[Command], id, op string) error {
	_, err := entity.Ask(ctx, r.EntityRefFor(id), func(to entity.ReplyTo[int]) Command { return Apply{Op: op, ReplyTo: to} })
	return err
}

func read(ctx context.Context, r *sharding.Region[Command], id string) (Snapshot, error) {
	return entity.Ask(ctx, r.EntityRefFor(id), func(to entity.ReplyTo[Snapshot]) Command { return Read{ReplyTo: to} })
}

// ledger records what was attempted and what was acknowledged, per entity.
type ledger struct {
	mu        sync.Mutex
	attempted map[string]map[string]bool
	acked     map[string][]string
}

func newLedger() *ledger {
	return &ledger{attempted: map[string]map[string]bool{}, acked: map[string][]string{}}
}

func (l *ledger) try(id, op string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.attempted[id] == nil {
		l.attempted[id] = map[string]bool{}
	}
	l.attempted[id][op] = true
}

// firstOps gives each of 60 entities one operation, "p1-" + its id,
// through every node in turn, and returns their ids.
func (l *ledger) firstOps(t testing.TB, ctx context.Context, nodes []*testNode) []string {
	t.Helper()
	var ids []string
	for i := range 60 {
		id := fmt.Sprintf("ops-%02d", i)
		ids = append(ids, id)
		via, op := nodes[i%len(nodes)], "p1-"+id
		l.try(id, op)
		if err := apply(ctx, via.ops, id, op); err != nil {
			t.Fatalf("apply %s via %s: %v", id, via.Self(), err)
		}
		l.ack(id, op)
	}
	return ids
}

// load writes "p2-w-k" operations to ids through each of via (w its
// index) until the returned stop is called, which waits for the writers.
// Each ask waits at most timeout; the acknowledged ones are recorded.
func (l *ledger) load(ctx context.Context, via []*testNode, ids []string, timeout time.Duration) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for w, n := range via {
		wg.Go(func() {
			for k := 0; ; k++ {
				select {
				case <-done:
					return
				default:
				}
				id := ids[(k*7+w)%len(ids)]
				op := fmt.Sprintf("p2-%d-%d", w, k)
				l.try(id, op)
				actx, cancel := context.WithTimeout(ctx, timeout)
				if err := apply(actx, n.ops, id, op); err == nil {
					l.ack(id, op)
				}
				cancel()
			}
		})
	}
	return func() {
		close(done)
		wg.Wait()
	}
}

// check fails t unless ops, the state of entity id, holds every
// acknowledged operation, none twice, and nothing never attempted.
func (l *ledger) check(t testing.TB, id string, ops []string) {
	t.Helper()
	seen := map[string]bool{}
	for _, op := range ops {
		if seen[op] {
			t.Fatalf("%s applied %s twice: %v", id, op, ops)
		}
		seen[op] = true
		if !l.attempted[id][op] {
			t.Fatalf("%s applied %s, never sent", id, op)
		}
	}
	for _, op := range l.acked[id] {
		if !seen[op] {
			t.Fatalf("%s lost acknowledged %s: has %v", id, op, ops)
		}
	}
}

func (l *ledger) ack(id, op string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.acked[id] = append(l.acked[id], op)
}

// Three nodes in one process, over real loopback sockets and a real
// Postgres: entities on all three, asks across nodes, then one node leaves
// gracefully while the others keep writing; its entities come back on the
// others with their event-sourced state, and no acknowledged operation is
// lost or applied twice. The leaver is the newest node, or the oldest,
// which hosts the coordinator as well.
func TestThreeNodesGracefulLeave(t *testing.T) {
	t.Run("newest", func(t *testing.T) { testGracefulLeave(t, 2) })
	t.Run("oldest", func(t *testing.T) { testGracefulLeave(t, 0) })
}

func testGracefulLeave(t *testing.T, leaver int) {
	dsn := pg.MigratedDSN(t)
	n1 := startNode(t, dsn, "node-1", nil)
	seeds := []string{n1.GossipAddr()}
	n2 := startNode(t, dsn, "node-2", seeds)
	n3 := startNode(t, dsn, "node-3", seeds)
	nodes := []*testNode{n1, n2, n3}
	awaitUp(t, nodes)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	led := newLedger()
	ids := led.firstOps(t, ctx, nodes)
	hostOf := map[string]string{}
	crossed := 0
	for i, id := range ids {
		via := nodes[(i+1)%3]
		s, err := read(ctx, via.ops, id)
		if err != nil {
			t.Fatalf("read %s via %s: %v", id, via.Self(), err)
		}
		hostOf[id] = s.Node
		if s.Node != via.Self().Node {
			crossed++
		}
		if !slices.Equal(s.Ops, []string{"p1-" + id}) {
			t.Fatalf("%s: %v", id, s.Ops)
		}
	}
	for _, n := range nodes {
		if len(n.ops.State().Shards) == 0 {
			t.Fatalf("%s hosts no shard", n.Self())
		}
	}
	if crossed == 0 {
		t.Fatal("no ask crossed nodes")
	}

	// Phase 2: the others keep writing while the leaver leaves.
	gone := nodes[leaver]
	var stay []*testNode
	for i, n := range nodes {
		if i != leaver {
			stay = append(stay, n)
		}
	}
	stopLoad := led.load(ctx, stay, ids, 20*time.Second)
	time.Sleep(200 * time.Millisecond) // some writes before the leave
	sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
	err := gone.Shutdown(sctx)
	scancel()
	if err != nil {
		t.Fatalf("%s shutdown: %v", gone.Self(), err)
	}
	if err := gone.Alive(); !errors.Is(err, node.ErrShuttingDown) {
		t.Fatalf("%s Alive after Shutdown: %v", gone.Self(), err)
	}
	eventually(t, "the others see the leaver gone", func() error {
		for _, n := range stay {
			if m, ok := n.Membership().View().Member(gone.Self()); ok && m.Status != cluster.Down {
				return fmt.Errorf("%s sees %s", n.Self(), m)
			}
		}
		return nil
	})
	time.Sleep(200 * time.Millisecond) // some writes after the leave
	stopLoad()

	// Every entity answers from a remaining node, with every acknowledged
	// operation, none twice, and nothing that was never attempted.
	moved := 0
	for _, id := range ids {
		var s Snapshot
		eventually(t, "read "+id, func() error {
			var err error
			s, err = read(ctx, stay[0].ops, id)
			return err
		})
		if s.Node == gone.Self().Node {
			t.Fatalf("%s still answered by the node that left", id)
		}
		if hostOf[id] == gone.Self().Node {
			moved++
		}
		led.check(t, id, s.Ops)
	}
	if moved == 0 {
		t.Fatal("no entity had lived on the leaver")
	}
	acked := 0
	for _, ops := range led.acked {
		acked += len(ops)
	}
	t.Logf("%d entities moved from %s; %d operations acknowledged", moved, gone.Self(), acked)
	for _, n := range stay {
		if err := n.Ready(); err != nil {
			t.Fatalf("%s not ready after the leave: %v", n.Self(), err)
		}
	}
	for _, n := range slices.Backward(stay) {
		sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := n.Shutdown(sctx)
		scancel()
		if err != nil {
			t.Fatalf("%s shutdown: %v", n.Self(), err)
		}
	}
}

// A Config without a node id or a database is refused before anything
// starts.
func TestStartRefusesIncompleteConfig(t *testing.T) {
	ctx := context.Background()
	if _, err := node.Start(ctx, node.Config{PostgresDSN: "postgres://x"}); !errors.Is(err, node.ErrInvalidConfig) {
		t.Fatalf("no NodeID: %v, want ErrInvalidConfig", err)
	}
	if _, err := node.Start(ctx, node.DefaultConfig("a")); !errors.Is(err, node.ErrInvalidConfig) {
		t.Fatalf("no database: %v, want ErrInvalidConfig", err)
	}
	cfg := node.DefaultConfig("a")
	cfg.PostgresDSN = "not a dsn ::"
	if _, err := node.Start(ctx, cfg); !errors.Is(err, node.ErrInvalidConfig) {
		t.Fatalf("bad DSN: %v, want ErrInvalidConfig", err)
	}
}

// A node whose seeds do not answer fails to start with a typed error, and
// releases the node lease it took, so its incarnation is down at once.
func TestStartFailsWhenNoSeedAnswers(t *testing.T) {
	dsn := pg.MigratedDSN(t)
	cfg := node.DefaultConfig("lonely")
	cfg.PostgresDSN = dsn
	cfg.Seeds = []string{"127.0.0.1:1"}
	cfg.Incarnation = 42
	cfg.Timing = testTiming()
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := node.Start(ctx, cfg)
	if !errors.Is(err, memberlist.ErrNoSeedReachable) {
		t.Fatalf("start: %v, want memberlist.ErrNoSeedReachable", err)
	}
	leases := leasepg.New(pgtest.NewPool(t, dsn, nil))
	self := cluster.UniqueAddress{Node: "lonely", Incarnation: 42}
	if expired, err := leases.NodeLeaseExpired(ctx, self); err != nil || !expired {
		t.Fatalf("node lease after the failed start: expired %v, %v; want released", expired, err)
	}
}

// A node downed in the database fences itself: its next renewal is
// refused, every entity stops at once, and Alive and Ready say so.
func TestDownedNodeFencesItself(t *testing.T) {
	dsn := pg.MigratedDSN(t)
	cfg := node.DefaultConfig("fenced")
	cfg.PostgresDSN = dsn
	cfg.Timing = testTiming()
	cfg.Codec = newCodec()
	cfg.Leases.Node = lease.Timing{Length: 10 * time.Second, RenewEvery: 200 * time.Millisecond, Margin: 5 * time.Second}
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError + 4}))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := node.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Kill)
	ops, err := sharding.Init(n.Sharding(), sharding.Entity[Command]{Key: opsKey, Create: newOps("fenced"), StopMessage: Stop{}})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "ready", n.Ready)
	if err := apply(ctx, ops, "e", "op-1"); err != nil {
		t.Fatal(err)
	}
	if err := leasepg.New(n.Pool()).DownNode(ctx, n.Self()); err != nil {
		t.Fatal(err)
	}
	eventually(t, "fenced", func() error {
		if err := n.Alive(); !errors.Is(err, node.ErrFenced) || !errors.Is(err, lease.ErrNodeDown) {
			return fmt.Errorf("Alive: %v", err)
		}
		return nil
	})
	if err := n.Ready(); !errors.Is(err, node.ErrFenced) {
		t.Fatalf("Ready of a fenced node: %v", err)
	}
	eventually(t, "entities stopped", func() error {
		if err := ops.EntityRefFor("e").Tell(Apply{Op: "op-2"}); !errors.Is(err, sharding.ErrRegionStopped) {
			return fmt.Errorf("Tell after fencing: %v, want ErrRegionStopped", err)
		}
		return nil
	})
}

// With mutual TLS configured, nodes talk over TLS: asks cross nodes, the
// transport refused no handshake, and its listener speaks TLS.
func TestMutualTLS(t *testing.T) {
	dsn := pg.MigratedDSN(t)
	ca := testcert.New(t, "shoal test CA")
	withTLS := func(c *node.Config) {
		c.ServerTLS, c.ClientTLS = tcp.MutualTLS(ca.Leaf(t, c.NodeID), ca.Pool)
	}
	a := startNode(t, dsn, "tls-a", nil, withTLS)
	b := startNode(t, dsn, "tls-b", []string{a.GossipAddr()}, withTLS)
	awaitUp(t, []*testNode{a, b})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	hosts := map[string]bool{}
	for i := range 20 {
		id := fmt.Sprintf("tls-%d", i)
		if err := apply(ctx, a.ops, id, "op"); err != nil {
			t.Fatal(err)
		}
		s, err := read(ctx, b.ops, id)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(s.Ops, []string{"op"}) {
			t.Fatalf("%s: %v", id, s.Ops)
		}
		hosts[s.Node] = true
	}
	if len(hosts) != 2 {
		t.Fatalf("entities on %v, want both nodes", hosts)
	}
	for _, n := range []*testNode{a, b} {
		st, _ := n.Stats()
		if st.RefusedHandshakes != 0 || st.Dials == 0 {
			t.Fatalf("%s transport stats %+v", n.Self(), st)
		}
	}
	// The transport's listener speaks TLS with the cluster's CA.
	conn, err := tls.Dial("tcp", a.TransportAddr(), &tls.Config{
		RootCAs: ca.Pool, ServerName: "127.0.0.1", Certificates: []tls.Certificate{ca.Leaf(t, "probe")}, MinVersion: tls.VersionTLS13,
	})
	if err != nil {
		t.Fatalf("TLS handshake with the transport: %v", err)
	}
	conn.Close()
}
