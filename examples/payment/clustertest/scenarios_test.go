package clustertest

import (
	"context"
	"os"
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

func startLoad(c *Cluster) *load {
	return &load{payments: c.StartPayments(3), counters: c.StartCounters(4, 6)}
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

// verify heals the cluster and checks everything from outside.
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
	unknown := 0
	for _, op := range ops {
		if op.Unknown {
			unknown++
		}
	}
	began := time.Now()
	res := CheckLinearizable(ops, 2*time.Minute)
	c.t.Logf("linearizability: %v over %d counter operations (%d without an answer), checked in %v",
		res, len(ops), unknown, time.Since(began).Round(time.Millisecond))
	if res != porcupine.Ok {
		c.t.Errorf("the counter history is not linearizable: %v", res)
	}
	rep := c.CheckNoDualActivation(ctx)
	c.t.Logf("activation log: %d activations, %d overlaps, %d write conflicts; verified %v after healing",
		len(rep.Intervals), len(rep.Overlaps), len(rep.Conflicts), time.Since(healed).Round(time.Millisecond))
}

// Crash failover (ClusterShardingSpec): kill -9 of a node that is not the
// coordinator's, under load. Its shards move once its lease has expired;
// nothing acknowledged is lost; no entity runs twice.
func TestCrashFailover(t *testing.T) {
	ctx := scenarioContext(t)
	c := Start(t, Options{})
	l := startLoad(c)
	c.waitAcked(ctx, l.payments, 30, "before the fault")
	victim := c.Nodes[len(c.Nodes)-1]
	if victim == c.Oldest(ctx) {
		victim = c.Nodes[0]
	}
	killed := time.Now()
	victim.Kill(ctx)
	moved := c.waitNoShardsOn(ctx, victim.Name)
	t.Logf("%s killed; its shards released %v later (lease %v)", victim.Name, (time.Since(killed) - 0).Round(time.Millisecond), c.opts.Lease)
	_ = moved
	c.waitAcked(ctx, l.payments, 30, "after the kill")
	c.verify(ctx, l)
}
