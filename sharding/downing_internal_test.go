package sharding

import (
	"bytes"
	"errors"
	"github.com/shoal-dev/shoal/cluster"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func up(n string) cluster.Member { return cluster.Member{Address: addr(n), Status: cluster.Up} }

func statusOf(members []cluster.Member, node string) (cluster.Status, bool, bool) {
	for _, m := range members {
		if m.Address == addr(node) {
			return m.Status, !m.Unreachable, true
		}
	}
	return 0, false, false
}

func TestDowningMachine(t *testing.T) {
	d := newDowning(addr("a"), "", 0)
	b := up("b")
	b.Unreachable = true
	view := []cluster.Member{up("a"), b}
	// c is named by a stored allocation but absent from the view.
	d.observe(view, addrs("a", "b", "c"), t0)
	calls := d.due(t0)
	if want := []downCall{{node: addr("b"), down: true}, {node: addr("c")}}; !slices.Equal(calls, want) {
		t.Fatalf("calls %v, want %v: down the failed member, only check the absent one", calls, want)
	}
	if again := d.due(t0); len(again) != 0 {
		t.Fatalf("calls %v while the first are under way", again)
	}
	core := d.filter(view, nil)
	for _, n := range []string{"b", "c"} {
		st, reachable, ok := statusOf(core, n)
		if !ok || st == cluster.Down || reachable {
			t.Fatalf("%s seen by the core as (%v, reachable %v, present %v) before its lease expired", n, st, reachable, ok)
		}
	}
	if st, reachable, _ := statusOf(core, "a"); st != cluster.Up || !reachable {
		t.Fatal("a healthy member changed")
	}

	// A failed DownNode is retried; a confirmed one is followed by expiry checks.
	if d.result(downResult{call: downCall{node: addr("b"), down: true}, err: errors.New("db down")}, t0) {
		t.Fatal("a failed down reported an expiry")
	}
	if calls := d.due(t0); !slices.Contains(calls, downCall{node: addr("b"), down: true}) {
		t.Fatalf("calls %v: the failed down is not retried", calls)
	}
	d.result(downResult{call: downCall{node: addr("b"), down: true}}, t0)
	d.result(downResult{call: downCall{node: addr("c")}, expired: false}, t0)
	if calls := d.due(t0); !slices.Equal(calls, []downCall{{node: addr("b")}, {node: addr("c")}}) {
		t.Fatalf("calls %v, want expiry checks of b and c", calls)
	}
	if d.result(downResult{call: downCall{node: addr("b")}, expired: false}, t0) {
		t.Fatal("an unexpired lease reported as expired")
	}
	// c turns up in the view, healthy: the view had lagged. It is left alone.
	view = append(view, up("c"))
	d.observe(view, addrs("a", "b", "c"), t0)
	if st, reachable, _ := statusOf(d.filter(view, nil), "c"); st != cluster.Up || !reachable {
		t.Fatal("a member that turned up healthy is still held back")
	}
	// b refutes its failure after it was downed: it is doomed all the same.
	view[1].Unreachable = false
	d.observe(view, addrs("a", "b", "c"), t0)
	if st, _, _ := statusOf(d.filter(view, nil), "b"); st == cluster.Up {
		t.Fatal("a downed member came back Up")
	}
	d.due(t0)
	if !d.result(downResult{call: downCall{node: addr("b")}, expired: true}, t0) {
		t.Fatal("the expiry was not reported")
	}
	if st, _, _ := statusOf(d.filter(view, nil), "b"); st != cluster.Down {
		t.Fatalf("b is %v once its lease expired, want Down", st)
	}
	if calls := d.due(t0); slices.ContainsFunc(calls, func(c downCall) bool { return c.node == addr("b") }) {
		t.Fatalf("calls %v: an expired node is asked about again", calls)
	}
	// Once neither the view nor the core names b, it is forgotten.
	view = []cluster.Member{up("a"), up("c")}
	d.observe(view, addrs("a", "c"), t0)
	if _, _, ok := statusOf(d.filter(view, nil), "b"); ok {
		t.Fatal("a removed node is still shown to the core")
	}
}

// A region that registered after the coordinator's last view (the view
// lags behind the region's Register) is not gone when another node's
// lease expiry makes the coordinator show its core the view again: the
// core would move the shards just allocated to it while it runs them.
func TestDowningHoldsARegionTheViewHasNotCaughtUpWith(t *testing.T) {
	d := newDowning(addr("a"), "", 0)
	b := up("b")
	b.Unreachable = true
	view := []cluster.Member{up("a"), b}
	d.observe(view, addrs("a", "b"), t0)
	d.due(t0)
	d.result(downResult{call: downCall{node: addr("b"), down: true}}, t0)
	d.due(t0)
	if !d.result(downResult{call: downCall{node: addr("b")}, expired: true}, t0) {
		t.Fatal("the expiry was not reported")
	}
	// c registered meanwhile; the view does not hold it yet.
	core := d.filter(view, addrs("a", "b", "c"))
	if st, reachable, ok := statusOf(core, "c"); !ok || st == cluster.Down || reachable {
		t.Fatalf("c seen by the core as (%v, reachable %v, present %v): it would lose its shards while it runs them", st, reachable, ok)
	}
	if calls := d.due(t0); !slices.Contains(calls, downCall{node: addr("c")}) {
		t.Fatalf("calls %v: c's lease is never checked", calls)
	}
	// The view catches up: c is a healthy member again.
	view = append(view, up("c"))
	d.observe(view, addrs("a", "b", "c"), t0)
	if st, reachable, _ := statusOf(d.filter(view, addrs("a", "b", "c")), "c"); st != cluster.Up || !reachable {
		t.Fatal("c is still held back once the view holds it")
	}
}

func upAt(n string, joined uint64, reachable bool) cluster.Member {
	return cluster.Member{Address: addr(n), JoinOrder: joined, Status: cluster.Up, Unreachable: !reachable}
}

// members builds a view: "a1" is node a, joined first, reachable; "b2-"
// is b, joined second, unreachable; "c3d" is c, Down (memberlist's own
// verdict: it left, or failed past its reconnect timeout); "d4l" is d,
// Leaving.
func members(specs ...string) []cluster.Member {
	var out []cluster.Member
	for _, s := range specs {
		m := upAt(s[:1], uint64(s[1]-'0'), true)
		switch s[2:] {
		case "-":
			m.Unreachable = true
		case "d":
			m.Status, m.Unreachable = cluster.Down, true
		case "l":
			m.Status = cluster.Leaving
		}
		out = append(out, m)
	}
	return out
}

// downingStep is what happens at a moment of a downing scenario: a new
// view, and leases that end in the store from then on.
type downingStep struct {
	at      time.Duration
	view    []cluster.Member
	expired []string
}

// runDowning drives d as its runner does, every 250 ms for 30 s: views
// as the steps say, every store call answered at once from the leases
// the steps ended, a downing tick after each. A stand-down restarts the
// runner (resume). It returns the nodes downed and when d first stood
// down (-1: never).
func runDowning(d *downing, steps []downingStep) (downs []string, stoodDown time.Duration) {
	stoodDown = -1
	ended := map[string]bool{}
	for at := time.Duration(0); at <= 30*time.Second; at += 250 * time.Millisecond {
		now := t0.Add(at)
		for _, s := range steps {
			if s.at == at {
				for _, n := range s.expired {
					ended[n] = true
				}
				if s.view != nil {
					d.observe(s.view, nil, now)
				}
			}
		}
		for _, c := range d.due(now) {
			if c.down && !slices.Contains(downs, addrName(c.node)) {
				downs = append(downs, addrName(c.node))
			}
			d.result(downResult{call: c, expired: !c.down && ended[addrName(c.node)]}, now)
		}
		if d.standDown(now, 5*time.Second) {
			if stoodDown < 0 {
				stoodDown = at
			}
			d.resume()
		}
	}
	slices.Sort(downs)
	return downs, stoodDown
}

// Keep the majority (docs/DESIGN.md, "Downing: keep the majority"), as a
// pure machine: the coordinator downs unreachable members only while its side
// is a strict majority of the members that count (on a tie, the side of the
// oldest), where a member counts until the store says its lease ended,
// whatever memberlist says of it; on the minority side it downs nobody and
// stands down.
func TestDowningKeepsTheMajority(t *testing.T) {
	const s = time.Second
	for _, tc := range []struct {
		name      string
		self      string
		steps     []downingStep
		downs     []string
		standDown bool
	}{
		{name: "3 nodes cut 1|2: the coordinator alone, memberlist downs and drops the others", self: "a",
			steps: []downingStep{
				{at: 0, view: members("a1", "b2", "c3")},
				{at: 1 * s, view: members("a1", "b2-", "c3")},
				{at: 1250 * time.Millisecond, view: members("a1", "b2-", "c3-")},
				{at: 6 * s, view: members("a1", "b2d", "c3d")}, // reconnect timeout
				{at: 7 * s, view: members("a1")},               // removed from the view
			}, downs: nil, standDown: true},
		{name: "3 nodes cut 1|2: the majority's coordinator", self: "b",
			steps: []downingStep{
				{at: 0, view: members("a1-", "b2", "c3")},
				{at: 6 * s, view: members("a1d", "b2", "c3")},
				{at: 7 * s, view: members("b2", "c3")},
			}, downs: []string{"a"}},
		{name: "4 nodes 2|2: the side of the oldest", self: "a",
			steps: []downingStep{
				{at: 0, view: members("a1", "b2", "c3", "d4")},
				{at: 1 * s, view: members("a1", "b2", "c3-", "d4-")},
			}, downs: []string{"c", "d"}},
		{name: "4 nodes 2|2: the side without the oldest", self: "c",
			steps: []downingStep{
				{at: 0, view: members("a1", "b2", "c3", "d4")},
				{at: 1 * s, view: members("a1-", "b2-", "c3", "d4")},
				{at: 8 * s, view: members("a1d", "b2d", "c3", "d4")},
				{at: 9 * s, view: members("c3", "d4")},
			}, downs: nil, standDown: true},
		{name: "5 nodes cut 2|3: memberlist downs the majority on the minority side before their leases expire", self: "a",
			steps: []downingStep{
				{at: 0, view: members("a1", "b2", "c3", "d4", "e5")},
				{at: 1 * s, view: members("a1", "b2", "c3-", "d4", "e5")},
				{at: 1500 * time.Millisecond, view: members("a1", "b2", "c3-", "d4-", "e5-")},
				{at: 6 * s, view: members("a1", "b2", "c3d", "d4d", "e5-")},
				{at: 7 * s, view: members("a1", "b2", "e5d")},
				{at: 8 * s, view: members("a1", "b2")},
			}, downs: nil, standDown: true},
		{name: "a member that left gracefully (lease released) stops counting", self: "a",
			steps: []downingStep{
				{at: 0, view: members("a1", "b2", "c3")},
				{at: 1 * s, view: members("a1", "b2", "c3l")},
				{at: 2 * s, view: members("a1", "b2", "c3d"), expired: []string{"c"}},
				{at: 3 * s, view: members("a1", "b2")},
				// Then b is cut off: a and b tie, a is the oldest.
				{at: 5 * s, view: members("a1", "b2-")},
			}, downs: []string{"b"}},
		{name: "the newest of 2 cut off after the third left gracefully", self: "b",
			steps: []downingStep{
				{at: 0, view: members("a1", "b2", "c3")},
				{at: 2 * s, view: members("a1", "b2", "c3d"), expired: []string{"c"}},
				{at: 5 * s, view: members("a1-", "b2")},
			}, downs: nil, standDown: true},
		{name: "the majority downs a crashed member", self: "a",
			steps: []downingStep{
				{at: 0, view: members("a1", "b2", "c3")},
				{at: 1 * s, view: members("a1", "b2", "c3-")},
				{at: 10 * s, expired: []string{"c"}}, // its lease ran out
				{at: 11 * s, view: members("a1", "b2", "c3d")},
				{at: 12 * s, view: members("a1", "b2")},
			}, downs: []string{"c"}},
		{name: "a lone survivor of a crashed oldest waits for its lease, then counts alone", self: "b",
			steps: []downingStep{
				{at: 0, view: members("a1", "b2")},
				{at: 1 * s, view: members("a1-", "b2")},
				{at: 6 * s, expired: []string{"a"}},
			}, downs: nil, standDown: true},
		// Its peers across the cut never see it join: counted on one side
		// only, it would make both sides a majority (c, d, e against a, b
		// here; a, b against c, d, holding the oldest, there), and each
		// would down the other.
		{name: "4 nodes 2|2: a member joining the side without the oldest during the cut does not count", self: "c",
			steps: []downingStep{
				{at: 0, view: members("a1", "b2", "c3", "d4")},
				{at: 1 * s, view: members("a1-", "b2-", "c3", "d4")},
				{at: 2 * s, view: members("a1-", "b2-", "c3", "d4", "e5")},
			}, downs: nil, standDown: true},
		{name: "a member that joined while another was cut off counts once that one's lease ended", self: "a",
			steps: []downingStep{
				{at: 0, view: members("a1", "b2", "c3")},
				{at: 1 * s, view: members("a1", "b2", "c3-")},
				{at: 2 * s, view: members("a1", "b2", "c3-", "d4")},
				{at: 5 * s, expired: []string{"c"}},
				// No new view since: a, b, d count, so a cut of b and d
				// leaves a the minority.
				{at: 10 * s, view: members("a1", "b2-", "d4-")},
			}, downs: []string{"c"}, standDown: true},
		{name: "a member joining does not count until Up", self: "a",
			steps: []downingStep{
				{at: 0, view: []cluster.Member{upAt("a", 1, true), upAt("b", 2, true), {Address: addr("c"), Status: cluster.Joining}, {Address: addr("d"), Status: cluster.Joining}}},
				{at: 1 * s, view: []cluster.Member{upAt("a", 1, true), upAt("b", 2, false), {Address: addr("c"), Status: cluster.Joining}, {Address: addr("d"), Status: cluster.Joining}}},
			}, downs: []string{"b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newDowning(addr(tc.self), "", 2*time.Second)
			downs, stood := runDowning(d, tc.steps)
			if !slices.Equal(downs, tc.downs) {
				t.Errorf("downed %v, want %v", downs, tc.downs)
			}
			if stood >= 0 != tc.standDown {
				t.Errorf("stood down at %v (-1: never), want a stand-down %v", stood, tc.standDown)
			}
		})
	}
}

// A lone survivor of a crashed oldest (a tie the oldest wins) is the
// minority only until the crashed node's lease expires: then it is all
// that counts, and may down again.
func TestDowningSurvivorRegainsTheMajority(t *testing.T) {
	d := newDowning(addr("b"), "", 2*time.Second)
	_, stood := runDowning(d, []downingStep{
		{at: 0, view: members("a1", "b2")},
		{at: 1 * time.Second, view: members("a1-", "b2")},
		{at: 6 * time.Second, expired: []string{"a"}},
	})
	if stood < 0 || stood >= 6*time.Second {
		t.Fatalf("stood down at %v, want before a's lease expired", stood)
	}
	if mine, theirs := d.sides(); !mine || len(theirs) != 0 {
		t.Fatalf("after a's lease expired: majority %v, other side %v; want b alone the majority", mine, theirs)
	}
	if !d.mayDown(t0.Add(30 * time.Second)) {
		t.Fatal("b may not down once it is all that counts")
	}
}

// A coordinator restarted on the minority side (the machine outlives its
// runner: resume) still counts the members memberlist dropped, keeps off
// the lease for the hold, and does not down them once it holds it again.
func TestDowningRestartedMinorityCoordinator(t *testing.T) {
	d := newDowning(addr("a"), "", 2*time.Second)
	_, stood := runDowning(d, []downingStep{
		{at: 0, view: members("a1", "b2", "c3")},
		{at: 1 * time.Second, view: members("a1", "b2-", "c3-")},
		{at: 7 * time.Second, view: members("a1")},
	})
	if stood < 0 {
		t.Fatal("never stood down")
	}
	// Its runner restarts a minute later, memberlist long since dropped
	// b and c.
	at := t0.Add(time.Minute)
	d.resume()
	d.observe(members("a1"), nil, at)
	again := time.Duration(-1)
	for now := at; now.Before(at.Add(10 * time.Second)); now = now.Add(250 * time.Millisecond) {
		for _, c := range d.due(now) {
			if c.down {
				t.Fatalf("at %v the restarted minority coordinator downs %s", now.Sub(at), c.node)
			}
			d.result(downResult{call: c}, now)
		}
		if again < 0 && d.standDown(now, 5*time.Second) {
			again = now.Sub(at)
			if !d.offLease(now.Add(4 * time.Second)) {
				t.Fatal("a minority coordinator that stood down takes the lease at once")
			}
			if d.offLease(now.Add(5 * time.Second)) {
				t.Fatal("a coordinator that stood down keeps off the lease past the hold")
			}
		}
	}
	if again < 0 {
		t.Fatal("the restarted minority coordinator never stands down")
	}
	if mine, theirs := d.sides(); mine || !slices.Equal(theirs, addrs("b", "c")) {
		t.Fatalf("majority %v, other side %v; want the minority against b and c", mine, theirs)
	}
}

// A coordinator that sees only part of the other side unreachable (the
// failure detector finds them one by one) waits: the change resets the
// stability clock, so it never downs the first before it sees the second
// and learns it is the minority.
func TestDowningWaitsForAStableView(t *testing.T) {
	d := newDowning(addr("a"), "", 10*time.Second)
	d.observe([]cluster.Member{upAt("a", 1, true), upAt("b", 2, false), upAt("c", 3, true)}, nil, t0)
	d.due(t0)
	d.result(downResult{call: downCall{node: addr("b")}}, t0)
	if calls := d.due(t0.Add(9 * time.Second)); slices.Contains(calls, downCall{node: addr("b"), down: true}) {
		t.Fatalf("calls %v: b downed before the view was stable", calls)
	}
	d.result(downResult{call: downCall{node: addr("b")}}, t0)
	d.observe([]cluster.Member{upAt("a", 1, true), upAt("b", 2, false), upAt("c", 3, false)}, nil, t0.Add(9*time.Second))
	calls := d.due(t0.Add(15 * time.Second))
	if slices.ContainsFunc(calls, func(c downCall) bool { return c.down }) {
		t.Fatalf("calls %v: the minority downs", calls)
	}
	for _, c := range calls {
		d.result(downResult{call: c}, t0.Add(15*time.Second))
	}
	if d.standDown(t0.Add(15*time.Second), time.Second) {
		t.Fatal("stood down before the view was stable for stableAfter")
	}
	if !d.standDown(t0.Add(19*time.Second), time.Second) {
		t.Fatal("the minority coordinator does not stand down")
	}
}

// An entity type that leaves DowningStableAfter zero takes the node's
// derived one (Config.DowningStableAfter), else the 10 s default; one
// that sets it no longer than the membership's spread is warned of, and
// keeps its value.
func TestDowningSettingsTakeTheNodesDefaultAndWarnOfAShortOne(t *testing.T) {
	derived := Config{DowningStableAfter: 66 * time.Second, DowningSpread: 65 * time.Second}
	for _, c := range []struct {
		name string
		cfg  Config
		set  time.Duration
		want time.Duration
		warn bool
	}{
		{"derived default", derived, 0, 66 * time.Second, false},
		{"set, longer than the spread", derived, 70 * time.Second, 70 * time.Second, false},
		{"set, within the spread", derived, time.Second, time.Second, true},
		{"set, equal to the spread", derived, 65 * time.Second, 65 * time.Second, true},
		{"no node default", Config{}, 0, 10 * time.Second, false},
		{"no spread", Config{}, time.Second, time.Second, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			var logged bytes.Buffer
			s := &Sharding{cfg: c.cfg, log: slog.New(slog.NewTextHandler(&logged, nil))}
			got := s.downingSettings("orders", Settings{DowningStableAfter: c.set}).withDefaults()
			if got.DowningStableAfter != c.want {
				t.Errorf("DowningStableAfter %v, want %v", got.DowningStableAfter, c.want)
			}
			if warned := strings.Contains(logged.String(), "level=WARN"); warned != c.warn {
				t.Errorf("warned %v, want %v: %q", warned, c.warn, logged.String())
			}
		})
	}
}

// The cut that keep-majority's stable-after must outlast, as memberlist showed
// it (cluster/memberlist TestCutIsSeenWithinCutSpread, LAN timing): a
// node cut off alone from the four others sees them declared failed 25 s,
// 42 s, 42 s and 50 s after the cut. With the former fixed 10 s it counts
// itself the majority after the first (four of five unseen) and downs a
// member of the real majority; with the stable-after derived for five
// members on LAN timing (66 s) it waits for the whole cut and stands down.
func TestDowningWaitsForTheWholeCut(t *testing.T) {
	seen := map[string]time.Duration{"b": 25 * time.Second, "c": 42 * time.Second, "d": 42 * time.Second, "e": 50 * time.Second}
	run := func(stableAfter time.Duration) (downed []string, stoodDown bool) {
		d := newDowning(addr("a"), "", stableAfter)
		for step := time.Duration(0); step <= 3*time.Minute; step += time.Second {
			now := t0.Add(step)
			view := []cluster.Member{up("a")}
			for _, n := range []string{"b", "c", "d", "e"} {
				m := up(n)
				m.Unreachable = !(step < seen[n])
				view = append(view, m)
			}
			d.observe(view, nil, now)
			for _, c := range d.due(now) {
				if c.down {
					downed = append(downed, addrName(c.node))
				}
				d.result(downResult{call: c}, now) // downed; every lease live
			}
			if d.standDown(now, time.Minute) {
				return downed, true
			}
		}
		return downed, false
	}
	if downed, _ := run(10 * time.Second); len(downed) == 0 {
		t.Errorf("with a 10 s stable-after nothing was downed: the scenario no longer shows the hazard")
	}
	if downed, stoodDown := run(66 * time.Second); len(downed) > 0 || !stoodDown {
		t.Errorf("with 66 s: downed %v, stood down %v; want nobody downed and a stand-down", downed, stoodDown)
	}
}

// A "live" answer to an expiry check asked before the other side last
// changed says nothing of the side as it is now: on the minority side it
// must not let the coordinator stand down (here the fresh checks fail,
// the store being in trouble, so only the stale answers could).
func TestDowningStandsDownOnlyOnChecksAskedSinceTheOtherSideChanged(t *testing.T) {
	d := newDowning(addr("d"), "", 2*time.Second)
	d.observe(members("a1", "b2", "c3", "d4"), nil, t0)
	d.observe(members("a1-", "b2-", "c3", "d4"), nil, t0.Add(time.Second))
	stale := d.due(t0.Add(time.Second)) // checks of a and b, under way
	// c is cut off too before they answer: the other side changed.
	at := t0.Add(1500 * time.Millisecond)
	d.observe(members("a1-", "b2-", "c3-", "d4"), nil, at)
	for _, c := range stale {
		d.result(downResult{call: c}, at) // live, as asked before the change
	}
	for now := at; now.Before(t0.Add(10 * time.Second)); now = now.Add(250 * time.Millisecond) {
		for _, c := range d.due(now) {
			err := error(nil)
			if c.node != addr("c") {
				err = errors.New("store timeout")
			}
			d.result(downResult{call: c, err: err}, now)
		}
		if d.standDown(now, time.Minute) {
			t.Fatalf("stood down at %v on answers asked before the other side changed", now.Sub(t0))
		}
	}
}

// A counted member the view shows healthy has its lease polled: once the
// store says it expired (a crash the failure detector has not noticed
// yet, a paused node), it is Down to the core and no longer counts,
// without waiting for the membership.
func TestDowningPollsTheLeasesOfHealthyMembers(t *testing.T) {
	d := newDowning(addr("a"), "", 0)
	view := []cluster.Member{up("a"), up("b"), up("c")}
	d.observe(view, addrs("a", "b", "c"), t0)
	calls := d.due(t0)
	if want := []downCall{{node: addr("b"), poll: true}, {node: addr("c"), poll: true}}; !slices.Equal(calls, want) {
		t.Fatalf("calls %v, want %v: poll every other counted member", calls, want)
	}
	if again := d.due(t0); len(again) != 0 {
		t.Fatalf("calls %v while the polls are under way", again)
	}
	if d.result(downResult{call: downCall{node: addr("b"), poll: true}, expired: false}, t0) {
		t.Fatal("a live lease reported as expired")
	}
	if d.result(downResult{call: downCall{node: addr("c"), poll: true}, err: errors.New("db down")}, t0) {
		t.Fatal("a failed poll reported as expired")
	}
	if calls := d.due(t0); !slices.Equal(calls, []downCall{{node: addr("b"), poll: true}, {node: addr("c"), poll: true}}) {
		t.Fatalf("calls %v: the polls do not repeat", calls)
	}
	if !d.result(downResult{call: downCall{node: addr("c"), poll: true}, expired: true}, t0) {
		t.Fatal("an expired lease of a healthy member was not reported")
	}
	if st, reachable, _ := statusOf(d.filter(view, nil), "c"); st != cluster.Down || reachable {
		t.Fatalf("c seen by the core as (%v, reachable %v) after its lease expired, want Down", st, reachable)
	}
	if _, counts := d.counted[addr("c")]; counts {
		t.Fatal("c still counts towards the majority after its lease expired")
	}
	d.result(downResult{call: downCall{node: addr("b"), poll: true}}, t0)
	d.observe(view, addrs("a", "b", "c"), t0) // the view still shows c healthy
	if st, _, _ := statusOf(d.filter(view, nil), "c"); st != cluster.Down {
		t.Fatal("an expired member came back Up with the next view")
	}
	if calls := d.due(t0); !slices.Equal(calls, []downCall{{node: addr("b"), poll: true}}) {
		t.Fatalf("calls %v, want only b's poll: c's expiry is final", calls)
	}
}
