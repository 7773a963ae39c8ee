package clustertest

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// reachBound is the stated bound: after healing, every entity answers
// within it.
const reachBound = 30 * time.Second

// scenarioBound keeps a broken scenario from hanging the run.
const scenarioBound = 8 * time.Minute

// all reports whether SHOAL_CLUSTER_TESTS=all asks for every scenario;
// without it only the fast core set runs.
func all() bool { return os.Getenv("SHOAL_CLUSTER_TESTS") == "all" }

func extended(t *testing.T) {
	t.Helper()
	if !all() {
		t.Skip("an extended cluster scenario: run with SHOAL_CLUSTER_TESTS=all (make test-cluster)")
	}
}

func scenarioContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), scenarioBound)
	t.Cleanup(cancel)
	return ctx
}

// load is the workload every scenario runs through its fault.
type load struct {
	payments *Payments
	counters *Counters
}

// startLoad starts 3 payment clients and 4 counter clients on 6
// counters; a test that fails midway stops them at its end.
func startLoad(c *Cluster) *load {
	l := &load{payments: c.StartPayments(3), counters: c.StartCounters(4, 6)}
	c.t.Cleanup(l.stop)
	return l
}

func (l *load) stop() {
	l.payments.Stop()
	l.counters.Stop()
}

// waitAcked waits until at least n more payments than now are
// acknowledged: the cluster serves.
func (c *Cluster) waitAcked(ctx context.Context, p *Payments, n int, why string) {
	c.t.Helper()
	target := len(p.Acked()) + n
	deadline := time.Now().Add(opBound)
	for len(p.Acked()) < target {
		if time.Now().After(deadline) || ctx.Err() != nil {
			c.t.Fatalf("clustertest: %s: %d more acknowledged payments not reached within %v (%v)", why, n, opBound, p)
		}
		pause(ctx, 20*time.Millisecond)
	}
}

// waitNoShardsOn waits until no shard is allocated to node's current
// incarnation any more: its shards moved or were released.
func (c *Cluster) waitNoShardsOn(ctx context.Context, node string) time.Duration {
	c.t.Helper()
	start := time.Now()
	for {
		var n int
		if err := c.DB.QueryRow(ctx, `SELECT count(*) FROM shard_allocations WHERE region LIKE $1 || '#%'`, node).Scan(&n); err != nil {
			c.t.Fatalf("clustertest: shard allocations: %v", err)
		}
		if n == 0 {
			return time.Since(start)
		}
		if time.Since(start) > opBound {
			c.t.Fatalf("clustertest: %d shards still allocated to %s after %v", n, node, opBound)
		}
		pause(ctx, 50*time.Millisecond)
	}
}

// verify heals the cluster and checks everything from outside, the read
// model against the journal last.
func (c *Cluster) verify(ctx context.Context, l *load) {
	c.t.Helper()
	l.stop()
	c.Heal(ctx)
	healed := time.Now()
	slowest := c.CheckPaymentsKept(ctx, l.payments.Acked(), reachBound)
	slowestCounter := c.CheckCountersReachable(ctx, l.counters, reachBound)
	c.t.Logf("payments: %v; every entity answered %v after healing (payments), %v (counters); bound %v",
		l.payments, slowest.Round(time.Millisecond), slowestCounter.Round(time.Millisecond), reachBound)
	ops := l.counters.History.Ops()
	unknown, kinds := 0, map[string]int{}
	for _, op := range ops {
		if op.Unknown {
			unknown++
			kinds[op.Err]++
		}
	}
	began := time.Now()
	res := CheckLinearizable(ops, 2*time.Minute)
	c.t.Logf("linearizability: %v over %d counter operations (%d without an answer: %v), checked in %v",
		res, len(ops), unknown, kinds, time.Since(began).Round(time.Millisecond))
	if res != porcupine.Ok {
		c.t.Errorf("the counter history is not linearizable: %v", res)
	}
	rep := c.CheckNoDualActivation(ctx)
	c.t.Logf("activation log: %d activations, %d overlaps, %d write conflicts; verified %v after healing",
		len(rep.Intervals), len(rep.Overlaps), len(rep.Conflicts), time.Since(healed).Round(time.Millisecond))
	c.CheckReadModel(ctx)
}

// Crash failover (ClusterShardingSpec): kill -9 of a node that does not
// host the coordinator, under load. Its shards move once its lease has
// expired; nothing acknowledged is lost; no entity runs twice.
func TestCrashFailover(t *testing.T) {
	c := Start(t, Options{})
	ctx := scenarioContext(t)
	l := startLoad(c)
	c.waitAcked(ctx, l.payments, 30, "before the fault")
	victim := c.notCoordinator(ctx)
	killed := time.Now()
	victim.Kill(ctx)
	c.waitNoShardsOn(ctx, victim.Name)
	t.Logf("%s killed; its shards released %v later (lease %v)", victim.Name, time.Since(killed).Round(time.Millisecond), c.opts.Lease)
	c.waitAcked(ctx, l.payments, 30, "after the kill")
	c.verify(ctx, l)
}

// Coordinator crash (ClusterShardingSpec): kill -9 of the node holding
// the coordinator lease (the oldest). A new coordinator takes over from
// Postgres once the old lease expired, at a higher epoch; the shards move.
func TestCoordinatorCrash(t *testing.T) {
	extended(t)
	c := Start(t, Options{})
	ctx := scenarioContext(t)
	l := startLoad(c)
	c.waitAcked(ctx, l.payments, 30, "before the fault")
	victim, epoch := c.Coordinator(ctx)
	killed := time.Now()
	victim.Kill(ctx)
	c.waitNoShardsOn(ctx, victim.Name)
	successor, newEpoch := c.Coordinator(ctx)
	if successor == victim || newEpoch <= epoch {
		t.Fatalf("after the coordinator on %s (epoch %d) died, the lease is %s's at epoch %d", victim.Name, epoch, successor.Name, newEpoch)
	}
	t.Logf("%s (coordinator, epoch %d) killed; its shards released %v later (lease %v); coordinator now on %s, epoch %d",
		victim.Name, epoch, time.Since(killed).Round(time.Millisecond), c.opts.Lease, successor.Name, newEpoch)
	c.waitAcked(ctx, l.payments, 30, "after the kill")
	c.verify(ctx, l)
}

// notCoordinator is a node that does not host the coordinator.
func (c *Cluster) notCoordinator(ctx context.Context) *Node {
	oldest, _ := c.Coordinator(ctx)
	for i := len(c.Nodes) - 1; i >= 0; i-- {
		if n := c.Nodes[i]; n != oldest {
			return n
		}
	}
	c.t.Fatal("clustertest: one node only")
	return nil
}

// Graceful leave (ClusterShardingGracefulShutdownSpec and ...OldestSpec):
// SIGTERM of a node, then of the oldest. Each hands its shards off and
// exits 0; the others serve everything.
func TestGracefulLeave(t *testing.T) {
	extended(t)
	c := Start(t, Options{})
	ctx := scenarioContext(t)
	l := startLoad(c)
	c.waitAcked(ctx, l.payments, 30, "before the fault")
	for i := range 2 {
		victim := c.notCoordinator(ctx)
		if i == 1 {
			victim, _ = c.Coordinator(ctx)
		}
		began := time.Now()
		victim.Stop(ctx)
		if _, code := victim.Running(ctx); code != 0 {
			t.Errorf("%s exited %d after SIGTERM, want 0 (a clean hand-off)", victim.Name, code)
		}
		c.waitNoShardsOn(ctx, victim.Name)
		t.Logf("%s left gracefully in %v", victim.Name, time.Since(began).Round(time.Millisecond))
		c.waitAcked(ctx, l.payments, 20, "after "+victim.Name+" left")
	}
	c.verify(ctx, l)
}

// Partition (ClusterShardCoordinatorDowningSpec): a node cut from its
// peers but not from Postgres is downed by the coordinator; its next
// renewal fails, it fences itself and exits; its shards move. After the
// heal it comes back as a new incarnation.
func TestPartition(t *testing.T) {
	c := Start(t, Options{})
	ctx := scenarioContext(t)
	partition(t, ctx, c, c.notCoordinator(ctx))
}

// The same cut for the node that hosts the coordinators. Postgres is the
// arbiter (docs/DESIGN.md, "Downing: keep the majority"), and the
// coordinator still reaches it, but it must not down the others and serve
// alone: the majority is kept (as Pekko's keep-majority). The cut-off
// coordinator counts the others until the store shows their leases ended
// (memberlist's own Down verdicts do not shrink its count), so it downs
// nobody and stands down; the majority's oldest takes the coordinator lease
// and downs it; it fences itself and exits; its shards move. After the heal
// every node must serve again through its own API.
func TestPartitionCoordinator(t *testing.T) {
	extended(t)
	c := Start(t, Options{})
	ctx := scenarioContext(t)
	victim, l := partitionCoordinator(t, ctx, c)
	victim.Reconnect(ctx)
	c.verify(ctx, l)
	c.checkEachNodeServes(ctx, l.counters)
}

// The cut-off coordinator, fenced, restarts while still cut off. Were it
// to start, no seed would answer and it
// would bootstrap a cluster of its own, which nothing else ever contacts:
// it keeps trying its seeds (node.Config.RejoinSeeds) so that the two
// merge after the heal. Here the cut is a network disconnect, and a node
// cut off so cannot resolve its own advertised name either: it exits at
// once and is started again (compose's restart: on-failure) until the
// heal. Either way, after the heal it must be in the one cluster: every
// entity answers through its API.
func TestPartitionCoordinatorRestartWhileCut(t *testing.T) {
	extended(t)
	c := Start(t, Options{})
	ctx := scenarioContext(t)
	victim, l := partitionCoordinator(t, ctx, c)
	victim.Start(ctx)
	deadline := time.Now().Add(opBound)
	for {
		if victim.ready(ctx) == nil {
			if !strings.Contains(victim.Logs(ctx), "bootstrapping a new cluster") {
				t.Fatalf("%s is ready while cut off without a cluster of its own", victim.Name)
			}
			t.Logf("%s restarted while cut off: it bootstrapped a cluster of its own", victim.Name)
			break
		}
		if running, code := victim.Running(ctx); !running {
			t.Logf("%s restarted while cut off: it exited %d (it cannot start cut off)", victim.Name, code)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s neither started nor exited within %v of its restart while cut off", victim.Name, opBound)
		}
		pause(ctx, 100*time.Millisecond)
	}
	victim.Reconnect(ctx)
	c.verify(ctx, l) // starts it again if it exited
	c.checkEachNodeServes(ctx, l.counters)
}

// partitionCoordinator cuts the coordinator's node off from its peers
// under load and checks that the majority is kept: the cut-off node is
// downed and fences itself, no other node is, and the others serve.
func partitionCoordinator(t *testing.T, ctx context.Context, c *Cluster) (*Node, *load) {
	t.Helper()
	victim, _ := c.Coordinator(ctx)
	l := startLoad(c)
	c.waitAcked(ctx, l.payments, 30, "before the fault")
	cut := time.Now()
	victim.Partition(ctx)
	var others []*Node
	var otherNames []string
	for _, n := range c.Nodes {
		if n != victim {
			others = append(others, n)
			otherNames = append(otherNames, n.Name)
		}
	}
	if survivor := c.waitOneSideFenced(ctx, victim, others); survivor != "the others" {
		t.Fatalf("the partitioned coordinator %s survived alone: the majority side fenced itself", survivor)
	}
	fenced := time.Since(cut)
	code := victim.WaitExit(ctx)
	logs := victim.Logs(ctx)
	if code != 1 || !strings.Contains(logs, "node lease lost") {
		t.Errorf("%s exited %d after the partition; want 1 after fencing itself (node lease lost)", victim.Name, code)
	}
	if !strings.Contains(logs, "minority side of a partition; standing down") {
		t.Errorf("%s's coordinator did not stand down on the minority side", victim.Name)
	}
	for _, n := range others {
		if running, code := n.Running(ctx); !running {
			t.Errorf("%s (majority side) exited %d: the cut-off coordinator downed it", n.Name, code)
		}
	}
	var victimDown bool
	var othersDowned int
	if err := c.DB.QueryRow(ctx, `SELECT bool_or(down) FILTER (WHERE node_id = $1), count(*) FILTER (WHERE node_id = ANY($2) AND down)
		FROM node_leases`, victim.Name, otherNames).Scan(&victimDown, &othersDowned); err != nil {
		t.Fatalf("node leases: %v", err)
	}
	if !victimDown || othersDowned != 0 {
		t.Errorf("node leases: %s down %v, %d leases of %v down; want only the cut-off node downed", victim.Name, victimDown, othersDowned, otherNames)
	}
	if coord, epoch := c.Coordinator(ctx); coord == victim {
		t.Errorf("the coordinator lease (epoch %d) is still %s's", epoch, victim.Name)
	} else {
		t.Logf("coordinator now on %s, epoch %d", coord.Name, epoch)
	}
	c.waitNoShardsOn(ctx, victim.Name)
	t.Logf("coordinator %s partitioned; fenced and exited %v later, its shards released %v later (lease %v); the majority side serves",
		victim.Name, fenced.Round(time.Millisecond), time.Since(cut).Round(time.Millisecond), c.opts.Lease)
	c.waitAcked(ctx, l.payments, 20, "during the partition")
	return victim, l
}

// waitOneSideFenced waits until either victim or every one of others has
// exited after fencing itself, and says which side survived. Both sides
// fenced is allowed (everything restarts); both serving is not.
func (c *Cluster) waitOneSideFenced(ctx context.Context, victim *Node, others []*Node) string {
	c.t.Helper()
	deadline := time.Now().Add(opBound)
	for {
		if running, _ := victim.Running(ctx); !running {
			return "the others"
		}
		down := 0
		for _, n := range others {
			if running, _ := n.Running(ctx); !running {
				down++
			}
		}
		if down == len(others) {
			return victim.Name
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("clustertest: %v after the partition neither %s nor all of the others fenced themselves", opBound, victim.Name)
		}
		pause(ctx, 100*time.Millisecond)
	}
}

// checkEachNodeServes fails the test unless every counter answers through
// every node's own API within reachBound: no node is left in a cluster
// of its own.
func (c *Cluster) checkEachNodeServes(ctx context.Context, w *Counters) {
	c.t.Helper()
	for _, n := range c.Nodes {
		deadline := time.Now().Add(reachBound)
		for _, name := range w.Names() {
			for {
				short, cancel := context.WithTimeout(ctx, 5*time.Second)
				_, err := counterRequest(short, n.URL, CounterOp{Counter: name})
				cancel()
				if err == nil {
					break
				}
				if time.Now().After(deadline) {
					c.t.Errorf("counter %s does not answer through %s within %v of healing: %v", name, n.Name, reachBound, err)
					return
				}
				pause(ctx, errorPause)
			}
		}
	}
}

func partition(t *testing.T, ctx context.Context, c *Cluster, victim *Node) {
	l := startLoad(c)
	c.waitAcked(ctx, l.payments, 30, "before the fault")
	cut := time.Now()
	victim.Partition(ctx)
	code := victim.WaitExit(ctx)
	fenced := time.Since(cut)
	if code != 1 || !strings.Contains(victim.Logs(ctx), "node lease lost") {
		t.Errorf("%s exited %d after the partition; want 1 after fencing itself (node lease lost)", victim.Name, code)
	}
	c.waitNoShardsOn(ctx, victim.Name)
	t.Logf("%s partitioned; fenced and exited %v later, its shards released %v later (lease %v)",
		victim.Name, fenced.Round(time.Millisecond), time.Since(cut).Round(time.Millisecond), c.opts.Lease)
	c.waitAcked(ctx, l.payments, 30, "during the partition")
	victim.Reconnect(ctx)
	c.verify(ctx, l)
	c.checkEachNodeServes(ctx, l.counters)
}

// Pause past the lease (ClusterShardingFailureSpec, Kleppmann's pause):
// the paused node's lease expires and its shards move; on unpause it must
// fence itself before it acts: it exits, and the activation log and the
// counters show it served nothing after its lease ran out.
func TestPausePastLease(t *testing.T) {
	extended(t)
	c := Start(t, Options{})
	ctx := scenarioContext(t)
	l := startLoad(c)
	c.waitAcked(ctx, l.payments, 30, "before the fault")
	victim := c.notCoordinator(ctx)
	victim.Pause(ctx)
	c.waitNoShardsOn(ctx, victim.Name)
	c.waitAcked(ctx, l.payments, 30, "while paused")
	victim.Unpause(ctx)
	if code := victim.WaitExit(ctx); code != 1 || !strings.Contains(victim.Logs(ctx), "node lease lost") {
		t.Errorf("%s exited %d after the unpause; want 1 after fencing itself (node lease lost)", victim.Name, code)
	}
	c.verify(ctx, l)
}

// Postgres restart under load (ClusterShardingFailureSpec): nodes that
// cannot renew their leases fence themselves; once Postgres is back and
// the fenced nodes restarted, every acknowledged payment is there.
func TestPostgresRestart(t *testing.T) {
	extended(t)
	c := Start(t, Options{})
	ctx := scenarioContext(t)
	l := startLoad(c)
	c.waitAcked(ctx, l.payments, 30, "before the fault")
	c.RestartPostgres(ctx, c.opts.Lease)
	fenced := 0
	for _, n := range c.Nodes {
		if running, _ := n.Running(ctx); !running {
			fenced++
		}
	}
	t.Logf("postgres restarted; %d of %d nodes had fenced themselves by then", fenced, len(c.Nodes))
	c.Heal(ctx)
	c.waitAcked(ctx, l.payments, 30, "after the restart")
	c.verify(ctx, l)
}

// A Postgres stall past the lease (the database frozen, its connections
// open, nothing answering): no node can renew its lease, so every node
// fences itself and exits, and the cluster serves again once they
// restarted as new incarnations. That is the rule (docs/DESIGN.md,
// "Leases and self-fencing"): a node that cannot prove its lease stops,
// whatever the cause; once the stall ends the database's time has passed
// every lease, and a node still serving would answer beside the shards'
// next homes. Nothing acknowledged is lost; no entity ran twice.
func TestPostgresStall(t *testing.T) {
	extended(t)
	c := Start(t, Options{})
	ctx := scenarioContext(t)
	l := startLoad(c)
	c.waitAcked(ctx, l.payments, 30, "before the fault")
	stalled := time.Now()
	c.StallPostgres(ctx, c.opts.Lease+2*time.Second)
	for _, n := range c.Nodes {
		if code := n.WaitExit(ctx); code != 1 || !strings.Contains(n.Logs(ctx), "node lease lost") {
			t.Errorf("%s exited %d after the stall; want 1 after fencing itself (node lease lost)", n.Name, code)
		}
	}
	t.Logf("postgres stalled for %v; every node fenced itself and exited within %v", c.opts.Lease+2*time.Second, time.Since(stalled).Round(time.Millisecond))
	c.Heal(ctx)
	c.waitAcked(ctx, l.payments, 30, "after the stall")
	c.verify(ctx, l)
}

// Remembered entities after a full cluster restart
// (ClusterShardingRememberEntitiesSpec): counters are remembered; after
// every node stopped and started again, each counter is active again
// before anyone asks for it.
func TestRememberedEntitiesAfterFullRestart(t *testing.T) {
	extended(t)
	c := Start(t, Options{})
	ctx := scenarioContext(t)
	l := startLoad(c)
	c.waitAcked(ctx, l.payments, 10, "before the restart")
	l.stop()
	c.CheckCountersReachable(ctx, l.counters, reachBound)
	restarted := time.Now()
	for _, n := range c.Nodes {
		n.Stop(ctx)
	}
	for _, n := range c.Nodes {
		n.Start(ctx)
	}
	c.WaitAllReady(ctx)
	deadline := time.Now().Add(opBound)
	for {
		active := map[string]bool{}
		for _, iv := range c.Activations(ctx).Intervals {
			if iv.Type == "counter" && iv.From.After(restarted) {
				active[iv.Entity] = true
			}
		}
		missing := 0
		for _, name := range l.counters.Names() {
			if !active[name] {
				missing++
			}
		}
		if missing == 0 {
			t.Logf("all %d counters active again %v after the restart began, none asked for", len(active), time.Since(restarted).Round(time.Millisecond))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d remembered counters not restarted within %v of the full restart", missing, len(l.counters.Names()), opBound)
		}
		pause(ctx, 200*time.Millisecond)
	}
	c.verify(ctx, l)
}

// Min-nr-of-members (ClusterShardingMinMembersSpec): with -min-members 2
// no shard is allocated while one node runs; once the second joins,
// requests are served.
func TestMinMembers(t *testing.T) {
	extended(t)
	c := Start(t, Options{Nodes: 2, Initial: 1, MinMembers: 2})
	ctx := scenarioContext(t)
	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	_, err := counterRequest(short, c.Nodes[0].URL, CounterOp{Counter: "minmembers", Add: true, By: 1})
	cancel()
	if err == nil {
		t.Fatal("a counter answered with one node of a required two")
	}
	// The entity types' shards; the read model's projection runs on a
	// daemon of its own (projection/sharded), which -min-members does not
	// hold back: its instances may catch up on the first node.
	var allocated int
	if err := c.DB.QueryRow(ctx, `SELECT count(*) FROM shard_allocations WHERE type_name NOT LIKE 'daemon-%'`).Scan(&allocated); err != nil {
		t.Fatal(err)
	}
	if allocated != 0 {
		t.Fatalf("%d shards allocated with one node of a required two", allocated)
	}
	c.AddNode(ctx)
	c.WaitAllReady(ctx)
	l := startLoad(c)
	c.waitAcked(ctx, l.payments, 20, "with two nodes")
	c.verify(ctx, l)
}

// Rolling update (RollingUpdateShardAllocationSpec, the coordinator-avoidance
// proposal's order): each node in turn, the oldest last, stops gracefully and
// starts again as a new incarnation, under load.
func TestRollingUpdate(t *testing.T) {
	extended(t)
	c := Start(t, Options{})
	ctx := scenarioContext(t)
	l := startLoad(c)
	c.waitAcked(ctx, l.payments, 20, "before the update")
	oldest, _ := c.Coordinator(ctx)
	order := []*Node{}
	for i := len(c.Nodes) - 1; i >= 0; i-- {
		if c.Nodes[i] != oldest {
			order = append(order, c.Nodes[i])
		}
	}
	for _, n := range append(order, oldest) {
		began := time.Now()
		n.Stop(ctx)
		if _, code := n.Running(ctx); code != 0 {
			t.Errorf("%s exited %d after SIGTERM, want 0", n.Name, code)
		}
		n.Start(ctx)
		n.WaitReady(ctx)
		t.Logf("%s replaced in %v", n.Name, time.Since(began).Round(time.Millisecond))
		c.waitAcked(ctx, l.payments, 10, "after replacing "+n.Name)
	}
	c.verify(ctx, l)
}
