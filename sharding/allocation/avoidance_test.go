package allocation

import (
	"errors"
	"fmt"
	"github.com/shoal-dev/shoal/cluster"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
)

type nodesRow struct {
	line                            int
	excluded, minCap, nodes, usedBy int
}

// readNodesTable parses the proposal's first table, copied verbatim into
// testdata: every markdown row whose four cells are numbers.
func readNodesTable(t *testing.T) []nodesRow {
	data, err := os.ReadFile("testdata/coordinator-avoidance-nodes.md")
	if err != nil {
		t.Fatal(err)
	}
	var rows []nodesRow
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "|") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) != 4 {
			t.Fatalf("line %d: %d cells", i+1, len(cells))
		}
		var n [4]int
		numeric := true
		for j, c := range cells {
			v, err := strconv.Atoi(strings.TrimSpace(c))
			if err != nil {
				numeric = false
				break
			}
			n[j] = v
		}
		if numeric {
			rows = append(rows, nodesRow{i + 1, n[0], n[1], n[2], n[3]})
		}
	}
	return rows
}

// nodes returns n Up, reachable regions n1 (oldest) … nN (youngest).
func nodes(n int) []Region {
	var rs []Region
	for i := 1; i <= n; i++ {
		rs = append(rs, Region{ID: node(fmt.Sprintf("n%d", i)), JoinOrder: uint64(i), AppVersion: "1.0.0", Status: cluster.Up, Reachable: true})
	}
	return rs
}

// TestCoordinatorAvoidanceNodesTable asserts every row of the proposal's
// table "the number of nodes that the strategy allocates shards" three ways:
// the allocation targets; a cluster that allocates shards from scratch; and
// a cluster whose shards all start on the oldest node and are rebalanced
// until stable. In every case the shards end on exactly the youngest
// usedBy nodes.
func TestCoordinatorAvoidanceNodesTable(t *testing.T) {
	rows := readNodesTable(t)
	if len(rows) != 20 {
		t.Fatalf("read %d rows from the table, want 20", len(rows))
	}
	for _, row := range rows {
		name := fmt.Sprintf("excluded=%d,min-cap=%d,nodes=%d", row.excluded, row.minCap, row.nodes)
		t.Run(name, func(t *testing.T) {
			cfg := CoordinatorAvoidanceConfig{OldestExcluded: row.excluded, MinAllocationNodes: row.minCap, AbsoluteLimit: 30, RelativeLimit: 0.1}
			rs := nodes(row.nodes)
			var youngest []string
			for _, r := range rs[row.nodes-row.usedBy:] {
				youngest = append(youngest, r.ID.Node)
			}

			got := names(AllocationTargets(cfg, State{Regions: rs}))
			if !slices.Equal(got, youngest) {
				t.Fatalf("testdata line %d: targets %v, want the %d youngest %v", row.line, got, row.usedBy, youngest)
			}

			s := NewCoordinatorAvoidance(cfg)
			limit := func(total int) int { return rebalanceLimit(cfg.AbsoluteLimit, cfg.RelativeLimit, total) }

			// From scratch: 100 shards per node, allocated one by one.
			sm := newSim(t, s, limit)
			for _, r := range rs {
				sm.upsert(r)
			}
			sm.newShards(100 * row.nodes)
			sm.settle(1000)
			assertUsedBy(t, row, sm, youngest)

			// Everything on the oldest node, then rebalance until stable.
			sm = newSim(t, s, limit)
			for _, r := range rs {
				sm.upsert(r)
			}
			sm.assign("n1", sm.newShards(100*row.nodes)...)
			sm.unallocated = nil
			sm.settle(1000)
			assertUsedBy(t, row, sm, youngest)
		})
	}
}

func assertUsedBy(t *testing.T, row nodesRow, sm *sim, youngest []string) {
	t.Helper()
	var used []string
	lo, hi := -1, -1
	for _, r := range sm.regions {
		n := len(sm.shards[r.ID.Node])
		if n == 0 {
			continue
		}
		used = append(used, r.ID.Node)
		if lo < 0 || n < lo {
			lo = n
		}
		hi = max(hi, n)
	}
	if !slices.Equal(used, youngest) {
		t.Fatalf("testdata line %d: shards on %v, want on the %d youngest %v (%s)", row.line, used, row.usedBy, youngest, sm.countsString())
	}
	if hi-lo > 1 {
		t.Fatalf("testdata line %d: not balanced: %s", row.line, sm.countsString())
	}
}

func TestCoordinatorAvoidanceTargetsSkipUnavailable(t *testing.T) {
	cfg := CoordinatorAvoidanceConfig{OldestExcluded: 1, MinAllocationNodes: 1}
	rs := nodes(4)
	// The oldest is leaving: the next oldest, which takes over the
	// coordinator, is excluded in its place.
	rs[0].Status = cluster.Leaving
	if got := names(AllocationTargets(cfg, State{Regions: rs})); !slices.Equal(got, []string{"n3", "n4"}) {
		t.Fatalf("targets = %v, want [n3 n4]", got)
	}
	// An unreachable or down region is no target either.
	rs[3].Reachable = false
	rs[2].Status = cluster.Down
	if got := names(AllocationTargets(cfg, State{Regions: rs})); !slices.Equal(got, []string{"n2"}) {
		t.Fatalf("targets = %v, want [n2] (min-cap keeps one)", got)
	}
	s := NewCoordinatorAvoidance(cfg)
	if got, err := s.Allocate(node("n1"), "x", State{Regions: rs}); err != nil || got != node("n2") {
		t.Fatalf("Allocate = %q, %v; want n2", got, err)
	}
	rs[1].Status = cluster.Leaving
	if _, err := s.Allocate(node("n1"), "x", State{Regions: rs}); !errors.Is(err, ErrNoRegion) {
		t.Fatalf("Allocate: %v, want ErrNoRegion", err)
	}
	// Joining regions are targets; they are the youngest.
	rs = append(nodes(2), Region{ID: node("n3"), JoinOrder: 3, Status: cluster.Joining, Reachable: true})
	if got := names(AllocationTargets(cfg, State{Regions: rs})); !slices.Equal(got, []string{"n2", "n3"}) {
		t.Fatalf("targets = %v, want [n2 n3]", got)
	}
	// Settings below their minimum act as the minimum.
	if got := names(AllocationTargets(CoordinatorAvoidanceConfig{OldestExcluded: -3, MinAllocationNodes: 0}, State{Regions: nodes(2)})); !slices.Equal(got, []string{"n1", "n2"}) {
		t.Fatalf("targets = %v, want [n1 n2]", got)
	}
	if got := names(AllocationTargets(CoordinatorAvoidanceConfig{OldestExcluded: 5, MinAllocationNodes: 0}, State{Regions: nodes(2)})); !slices.Equal(got, []string{"n2"}) {
		t.Fatalf("targets = %v, want [n2]", got)
	}
}

func TestCoordinatorAvoidanceRebalanceWaits(t *testing.T) {
	cfg := CoordinatorAvoidanceConfig{OldestExcluded: 1, MinAllocationNodes: 1, RelativeLimit: 1}
	s := NewCoordinatorAvoidance(cfg)
	base := func() State {
		return State{Regions: nodes(3), Shards: map[cluster.UniqueAddress][]string{node("n1"): shardRange(1, 10)}}
	}
	if got := s.Rebalance(base(), nil); !slices.Equal(got, shardRange(1, 10)) {
		t.Fatalf("Rebalance = %v, want all shards of the excluded oldest", got)
	}
	if got := s.Rebalance(base(), map[string]bool{"005": true}); got != nil {
		t.Fatalf("Rebalance while in progress = %v", got)
	}
	for _, change := range []func(*Region){
		func(r *Region) { r.Status = cluster.Joining },
		func(r *Region) { r.Status = cluster.Leaving },
		func(r *Region) { r.Status = cluster.Leaving },
		func(r *Region) { r.Status = cluster.Down },
		func(r *Region) { r.Reachable = false },
	} {
		st := base()
		change(&st.Regions[2])
		if got := s.Rebalance(st, nil); got != nil {
			t.Fatalf("Rebalance with %+v = %v, want nothing", st.Regions[2], got)
		}
	}
	// Versions do not matter: rebalancing onto new-version nodes is what
	// the proposal's rolling update does.
	st := base()
	st.Regions[2].AppVersion = "2.0.0"
	if got := s.Rebalance(st, nil); len(got) == 0 {
		t.Fatalf("Rebalance with mixed versions = nothing")
	}
	if got := s.Rebalance(State{}, nil); got != nil {
		t.Fatalf("Rebalance of empty state = %v", got)
	}
	if c := DefaultCoordinatorAvoidanceConfig(); c != (CoordinatorAvoidanceConfig{OldestExcluded: 1, MinAllocationNodes: 1, AbsoluteLimit: 0, RelativeLimit: 0.1}) {
		t.Fatalf("DefaultCoordinatorAvoidanceConfig() = %+v", c)
	}
}

// With OldestExcluded 0 the strategy rebalances as least-shard does: the
// Akka vectors give the same moves.
func TestCoordinatorAvoidanceZeroExcludedIsLeastShard(t *testing.T) {
	cfg := CoordinatorAvoidanceConfig{OldestExcluded: 0, MinAllocationNodes: 1, AbsoluteLimit: 1000, RelativeLimit: 1}
	for _, abc := range [][3]int{{4, 4, 0}, {4, 4, 2}, {5, 5, 0}, {50, 50, 0}, {1, 9, 0}, {3, 0, 0}} {
		a := abcSim(t, NewLeastShard(noLimits), nil, abc[0], abc[1], abc[2])
		b := abcSim(t, NewCoordinatorAvoidance(cfg), nil, abc[0], abc[1], abc[2])
		for round := 1; ; round++ {
			ma, mb := a.round(), b.round()
			if !slices.Equal(ma, mb) || !slices.Equal(a.counts(), b.counts()) {
				t.Fatalf("%v round %d: least-shard moved %v → %v; coordinator avoidance moved %v → %v", abc, round, ma, a.counts(), mb, b.counts())
			}
			if len(ma) == 0 {
				break
			}
		}
	}
}

// TestRollingUpdateMatchesProposal checks that the `counts` rows of the
// replayed scenario testdata/rolling-update.txt are, in order, exactly the
// rows of the proposal's rolling-update table (copied verbatim into
// testdata/coordinator-avoidance-rolling-update.md), so that regenerating the
// scenario's expected output with -rewrite cannot drift from the table.
// TestDataDriven checks that the scenario produces those rows.
func TestRollingUpdateMatchesProposal(t *testing.T) {
	cells := func(line string) []string {
		var out []string
		for _, c := range strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|") {
			out = append(out, strings.TrimSpace(c))
		}
		return out
	}
	table, err := os.ReadFile("testdata/coordinator-avoidance-rolling-update.md")
	if err != nil {
		t.Fatal(err)
	}
	var want [][]string
	for _, line := range strings.Split(string(table), "\n") {
		if !strings.HasPrefix(line, "|") || strings.HasPrefix(line, "|--") || strings.HasPrefix(line, "| state") {
			continue
		}
		want = append(want, cells(line))
	}
	scenario, err := os.ReadFile("testdata/rolling-update.txt")
	if err != nil {
		t.Fatal(err)
	}
	var got [][]string
	lines := strings.Split(string(scenario), "\n")
	for i := range lines {
		if strings.HasPrefix(lines[i], "counts ") && i+2 < len(lines) {
			got = append(got, cells(lines[i+2]))
		}
	}
	if len(want) != 17 {
		t.Fatalf("read %d rows from the proposal's table, want 17", len(want))
	}
	if len(got) != len(want) {
		t.Fatalf("scenario has %d counts rows, table %d", len(got), len(want))
	}
	for i := range want {
		if !slices.Equal(got[i], want[i]) {
			t.Errorf("row %d: scenario %v, table %v", i+1, got[i], want[i])
		}
	}
}
