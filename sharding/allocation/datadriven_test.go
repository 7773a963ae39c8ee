package allocation

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/shoal-dev/shoal/cluster"

	"github.com/shoal-dev/shoal/internal/scenario"
)

// Scenario files in testdata/*.txt are replayed through the simulated
// coordinator, in the style of go.etcd.io/raft's data-driven tests. A test
// case is one command line, a line "----", and the expected output up to the
// next blank line; lines starting with # between cases are comments. Run
// with -rewrite to regenerate the expected output (then review the diff).
//
// Commands:
//
//	strategy least abs=N rel=F
//	strategy avoidance excluded=N min-cap=N abs=N rel=F
//	region ID [age=N] [version=V] [status=up|joining|leaving|exiting|down]
//	                   (exiting, Akka's, is leaving here) [reachable=true|false]
//	                   add a region (Up and reachable unless told), or change
//	                   the given fields of a known one
//	columns ID...      the regions `counts` prints, in this order
//	new-shards N       N new shards without a home (named 001, 002, …)
//	allocate           allocate every shard without a home, in sorted order
//	hand-off ID        deallocate every shard of a region (graceful leave)
//	remove ID          unregister a region; its remaining shards lose their home
//	rebalance          print what Rebalance picks, without applying it
//	round              one rebalance round, applied
//	settle             allocate, then rebalance rounds until one moves nothing
//	                   (each round is checked against the strategy's limit)
//	counts LABEL...    print "| LABEL | n | n | … |" over the columns; "-" for
//	                   a region that is not registered
var rewrite = flag.Bool("rewrite", false, "rewrite the expected output of testdata/*.txt")

// statuses reads the status names of the scenarios.
var statuses = map[string]cluster.Status{"up": cluster.Up, "joining": cluster.Joining, "leaving": cluster.Leaving,
	"exiting": cluster.Leaving, "down": cluster.Down}

func TestDataDriven(t *testing.T) {
	scenario.RunDir(t, "testdata/*.txt", *rewrite, func(t *testing.T) scenario.RunFunc {
		sc := &scenarioRun{t: t}
		return sc.run
	})
}

type scenarioRun struct {
	t       *testing.T
	sim     *sim
	columns []string
}

func (sc *scenarioRun) run(where, line string) string {
	t := sc.t
	t.Helper()
	c := scenario.Parse(line)
	cmd, pos, kv := c.Name, c.Pos, c.KV
	atoi := func(k string, def int) int {
		v, ok := kv[k]
		if !ok {
			return def
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("%s: %s=%q: %v", where, k, v, err)
		}
		return n
	}
	atof := func(k string, def float64) float64 {
		v, ok := kv[k]
		if !ok {
			return def
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			t.Fatalf("%s: %s=%q: %v", where, k, v, err)
		}
		return f
	}
	needSim := func() {
		if sc.sim == nil {
			t.Fatalf("%s: %s before strategy", where, cmd)
		}
	}
	switch cmd {
	case "strategy":
		if len(pos) != 1 {
			t.Fatalf("%s: strategy least|avoidance", where)
		}
		abs, rel := atoi("abs", 0), atof("rel", 0.1)
		limit := func(total int) int { return rebalanceLimit(abs, rel, total) }
		var s Strategy
		switch pos[0] {
		case "least":
			s = NewLeastShard(LeastShardConfig{AbsoluteLimit: abs, RelativeLimit: rel})
		case "avoidance":
			s = NewCoordinatorAvoidance(CoordinatorAvoidanceConfig{
				OldestExcluded: atoi("excluded", 1), MinAllocationNodes: atoi("min-cap", 1),
				AbsoluteLimit: abs, RelativeLimit: rel,
			})
		default:
			t.Fatalf("%s: unknown strategy %q", where, pos[0])
		}
		sc.sim = newSim(t, s, limit)
		return fmt.Sprint(s)
	case "region":
		needSim()
		if len(pos) != 1 {
			t.Fatalf("%s: region ID [key=value…]", where)
		}
		r := Region{ID: node(pos[0]), Status: cluster.Up, Reachable: true}
		if p := sc.sim.region(pos[0]); p != nil {
			r = *p
		}
		r.JoinOrder = uint64(atoi("age", int(r.JoinOrder)))
		if v, ok := kv["version"]; ok {
			r.AppVersion = v
		}
		if v, ok := kv["status"]; ok {
			s, found := statuses[v]
			r.Status = s
			if !found {
				t.Fatalf("%s: unknown status %q", where, v)
			}
		}
		if v, ok := kv["reachable"]; ok {
			r.Reachable = v == "true"
		}
		sc.sim.upsert(r)
		return ""
	case "columns":
		sc.columns = pos
		return ""
	case "new-shards":
		needSim()
		n, err := strconv.Atoi(pos[0])
		if err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		sc.sim.newShards(n)
		return ""
	case "allocate":
		needSim()
		return fmt.Sprintf("allocated %d", sc.sim.allocateUnallocated())
	case "hand-off":
		needSim()
		return fmt.Sprintf("handed off %d", sc.sim.handOffAll(pos[0]))
	case "remove":
		needSim()
		return fmt.Sprintf("removed; %d shards lost their home", sc.sim.remove(pos[0]))
	case "rebalance":
		needSim()
		moved := sc.sim.strategy.Rebalance(sc.sim.state(), nil)
		if len(moved) == 0 {
			return "none"
		}
		return strings.Join(moved, " ")
	case "round":
		needSim()
		moved := sc.sim.round()
		return fmt.Sprintf("moved %d", len(moved))
	case "settle":
		needSim()
		allocated, rounds, moved, maxPer := sc.sim.settle(atoi("max-rounds", 1000))
		return fmt.Sprintf("allocated %d; %d rebalance rounds moved %d shards, at most %d per round", allocated, rounds, moved, maxPer)
	case "counts":
		needSim()
		cols := sc.columns
		if cols == nil {
			for _, r := range sc.sim.regions {
				cols = append(cols, r.ID.Node)
			}
		}
		var b strings.Builder
		fmt.Fprintf(&b, "| %-12s |", strings.Join(pos, " "))
		for _, c := range cols {
			v := "-"
			if sc.sim.region(c) != nil {
				v = strconv.Itoa(len(sc.sim.shards[c]))
			}
			fmt.Fprintf(&b, " %-5s |", v)
		}
		return b.String()
	}
	t.Fatalf("%s: unknown command %q", where, cmd)
	return ""
}
