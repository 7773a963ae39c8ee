package sharded_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/shoal-dev/shoal/cluster"
	"io"
	"log/slog"
	"maps"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/journal"
	"github.com/shoal-dev/shoal/projection"
	"github.com/shoal-dev/shoal/projection/projectiontest"
	"github.com/shoal-dev/shoal/projection/sharded"
	"github.com/shoal-dev/shoal/sharding"
)

type Added struct{ N int }

const instances = 4

// world is an in-process cluster running the "orders" projection over a
// shared source and store (the database every node reaches), into one
// read model: per persistence id, the N of each seq nr handled — keyed by
// seq nr, so an at-least-once redelivery changes nothing.
type world struct {
	t       *testing.T
	members *sharding.InProcessCluster
	reg     *codec.Registry
	src     *projectiontest.Source
	store   *projection.MemoryStore
	nodes   map[string]*sharding.Sharding
	projs   map[string]*sharded.Projection

	seqs map[string]uint64
	mu   sync.Mutex
	// model is the read model; handling counts envelopes handled.
	model    map[string]map[uint64]int
	handling int
}

func newWorld(t *testing.T) *world {
	reg := codec.NewRegistry()
	codec.MustRegister[Added](reg, "added")
	return &world{t: t, members: sharding.NewInProcessCluster(), reg: reg, src: projectiontest.NewSource(), store: projection.NewMemoryStore(),
		nodes: map[string]*sharding.Sharding{}, projs: map[string]*sharded.Projection{},
		seqs: map[string]uint64{}, model: map[string]map[uint64]int{}}
}

func (w *world) build(slices journal.SliceRange, holder string) (*projection.Projection, error) {
	handle := func(_ context.Context, env projection.Envelope[Added]) error {
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.model[env.PersistenceID] == nil {
			w.model[env.PersistenceID] = map[uint64]int{}
		}
		w.model[env.PersistenceID][env.SeqNr] = env.Event.N
		w.handling++
		return nil
	}
	clear := func(context.Context) error {
		w.mu.Lock()
		defer w.mu.Unlock()
		for pid := range w.model {
			if slices.Contains(journal.SliceOf(pid)) {
				delete(w.model, pid)
			}
		}
		return nil
	}
	return projection.New(projection.Config{
		Name: "orders", EntityType: "Order", Slices: slices, Source: w.src, Codec: w.reg,
		Settings: projection.Settings{Holder: holder, LeaseTTL: 3 * time.Second, SaveInterval: 100 * time.Millisecond},
	}, projection.AtLeastOnce(w.store, handle, clear))
}

func (w *world) join(name string) {
	w.t.Helper()
	sys, err := entity.NewSystem(entity.Config{NodeID: name, Codec: codec.NewRegistry(), ForceSerialization: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		w.t.Fatal(err)
	}
	s, err := w.members.Join(sys)
	if err != nil {
		w.t.Fatal(err)
	}
	p, err := sharded.Start(s, sharded.Config{Name: "orders", Instances: instances, New: w.build, Store: w.store,
		KeepAliveInterval: time.Second, RestartBackoff: time.Second})
	if err != nil {
		w.t.Fatal(err)
	}
	w.nodes[name], w.projs[name] = s, p
}

func (w *world) leave(name string) {
	w.t.Helper()
	w.projs[name].Stop()
	if err := w.nodes[name].Shutdown(context.Background()); err != nil {
		w.t.Fatalf("%s left with %v", name, err)
	}
	delete(w.nodes, name)
	delete(w.projs, name)
}

func (w *world) crash(name string) {
	w.projs[name].Stop()
	w.nodes[name].Terminate()
	w.members.Remove(w.nodes[name].Node())
	delete(w.nodes, name)
	delete(w.projs, name)
}

// stop crashes what is left and lets the runs wind down, so the bubble
// ends with no goroutine left.
func (w *world) stop() {
	for name := range w.nodes {
		w.crash(name)
	}
	time.Sleep(10 * time.Second)
	synctest.Wait()
}

// add appends events: n to each of pids persistence ids.
func (w *world) add(pids, n int) {
	w.t.Helper()
	for i := range pids {
		for range n {
			pid := fmt.Sprintf("Order|o%d", i)
			w.seqs[pid]++
			m, payload, err := w.reg.Encode(Added{N: int(w.seqs[pid]) * 10})
			if err != nil {
				w.t.Fatal(err)
			}
			w.src.Append(journal.Event{PersistenceID: pid, SeqNr: w.seqs[pid], Manifest: m, Payload: payload, Timestamp: time.Now(), WriterID: "w"})
		}
	}
}

// fold is the read model the events make.
func (w *world) fold() map[string]map[uint64]int {
	want := map[string]map[uint64]int{}
	for pid, last := range w.seqs {
		want[pid] = map[uint64]int{}
		for seq := uint64(1); seq <= last; seq++ {
			want[pid][seq] = int(seq) * 10
		}
	}
	return want
}

func (w *world) modelEquals(want map[string]map[uint64]int) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return maps.EqualFunc(w.model, want, func(a, b map[uint64]int) bool { return maps.Equal(a, b) })
}

// wantModel waits until the read model is the fold of every event.
func (w *world) wantModel(within time.Duration) {
	w.t.Helper()
	want := w.fold()
	deadline := time.Now().Add(within)
	for !w.modelEquals(want) {
		if time.Now().After(deadline) {
			w.mu.Lock()
			defer w.mu.Unlock()
			w.t.Fatalf("after %v the read model is %v, want %v", within, w.model, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// handledSince waits until events were handled after the count was
// handled, and returns how many (0 if none within the time).
func (w *world) handledSince(handled int, within time.Duration) int {
	deadline := time.Now().Add(within)
	for {
		w.mu.Lock()
		again := w.handling - handled
		w.mu.Unlock()
		if again > 0 || time.Now().After(deadline) {
			return again
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// placement is, per instance, the nodes it runs on now (their runners
// hold its lease) — each instance must have one.
func (w *world) placement() map[projection.Instance][]string {
	out := map[projection.Instance][]string{}
	for name, p := range w.projs {
		for _, st := range p.Local() {
			if st.Running {
				out[st.Instance] = append(out[st.Instance], name)
			}
		}
	}
	return out
}

// wantPlaced waits until every instance runs on exactly one node, and the
// store names that node's holder; it returns the node of each.
func (w *world) wantPlaced(within time.Duration) map[projection.Instance]string {
	w.t.Helper()
	deadline := time.Now().Add(within)
	for {
		placed, ok := map[projection.Instance]string{}, true
		for inst, nodes := range w.placement() {
			if len(nodes) > 1 {
				w.t.Fatalf("%s runs on %v at once", inst, nodes)
			}
			placed[inst] = nodes[0]
		}
		states, err := w.store.Instances(context.Background(), "orders")
		if err != nil {
			w.t.Fatal(err)
		}
		for _, st := range states {
			node, on := placed[st.Instance]
			if !on || !st.Held || st.Holder != w.projs[node].Holder() || holderNode(st.Holder) != node {
				ok = false
			}
		}
		if ok && len(placed) == instances && len(states) == instances {
			return placed
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("after %v: instances run on %v; the store has %+v", within, placed, states)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// settled waits until the instances stopped moving (the coordinator
// rebalances what the first node took, a few per round).
func (w *world) settled() map[projection.Instance]string {
	w.t.Helper()
	placed := w.wantPlaced(30 * time.Second)
	for range 20 {
		time.Sleep(20 * time.Second)
		now := w.wantPlaced(30 * time.Second)
		if maps.Equal(now, placed) {
			return now
		}
		placed = now
	}
	w.t.Fatalf("instances still move after 400 s: %v", placed)
	return nil
}

// elsewhere is a node of placed other than "a" (the coordinator's), and an
// instance on it.
func elsewhere(t *testing.T, placed map[projection.Instance]string) (string, projection.Instance) {
	t.Helper()
	for inst, n := range placed {
		if n != "a" {
			return n, inst
		}
	}
	t.Fatalf("every instance runs on a: %v", placed)
	return "", projection.Instance{}
}

func TestInstancesRunOnceEachAndFoldEveryEvent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t)
		defer w.stop()
		w.add(40, 3)
		for _, n := range []string{"a", "b", "c"} {
			w.join(n)
		}
		placed := w.settled()
		perNode := map[string]int{}
		for _, n := range placed {
			perNode[n]++
		}
		if len(perNode) < 2 {
			t.Errorf("instances not spread: %v", placed)
		}
		w.add(40, 2)
		w.wantModel(30 * time.Second)
	})
}

func TestInstancesMoveWhenANodeLeaves(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t)
		defer w.stop()
		w.add(40, 2)
		for _, n := range []string{"a", "b", "c"} {
			w.join(n)
		}
		leaver, _ := elsewhere(t, w.settled())
		w.add(40, 1)
		w.leave(leaver)
		w.add(40, 1)
		for inst, n := range w.wantPlaced(60 * time.Second) {
			if n == leaver {
				t.Errorf("%s still runs on %s, which left", inst, leaver)
			}
		}
		w.wantModel(30 * time.Second)
	})
}

func TestInstancesOfACrashedNodeRunElsewhere(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t)
		defer w.stop()
		w.add(40, 2)
		for _, n := range []string{"a", "b", "c"} {
			w.join(n)
		}
		crashed, _ := elsewhere(t, w.settled())
		w.crash(crashed)
		w.add(40, 2)
		for inst, n := range w.wantPlaced(90 * time.Second) {
			if n == crashed {
				t.Errorf("%s still runs on %s, which crashed", inst, crashed)
			}
		}
		w.wantModel(30 * time.Second)
	})
}

// A second runner of a range that runs already is refused by the store,
// whichever node it is on.
func TestASecondRunnerOfARangeIsRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t)
		defer w.stop()
		for _, n := range []string{"a", "b"} {
			w.join(n)
		}
		placed := w.settled()
		for inst, n := range placed {
			other := "a"
			if n == "a" {
				other = "b"
			}
			p, err := w.build(inst.Slices, w.projs[other].Holder())
			if err != nil {
				t.Fatal(err)
			}
			if err := p.Run(context.Background()); !errors.Is(err, projection.ErrInstanceHeld) {
				t.Errorf("a second run of %s on %s: %v, want ErrInstanceHeld", inst, other, err)
			}
		}
		if now := w.wantPlaced(time.Second); !maps.Equal(now, placed) {
			t.Errorf("the refused runs moved instances: %v, then %v", placed, now)
		}
	})
}

// status waits until cond holds for inst's stored state, as node sees it.
func (w *world) status(node string, inst projection.Instance, what string, cond func(projection.InstanceState) bool) projection.InstanceState {
	w.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		states, err := w.projs[node].Status(context.Background())
		if err != nil {
			w.t.Fatal(err)
		}
		for _, st := range states {
			if st.Instance == inst && cond(st) {
				return st
			}
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("%s never became %s: %+v", inst, what, states)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// pidIn is a persistence id of the first pids whose slice inst covers.
func pidIn(t *testing.T, inst projection.Instance, pids int) string {
	for i := range pids {
		if pid := fmt.Sprintf("Order|o%d", i); inst.Slices.Contains(journal.SliceOf(pid)) {
			return pid
		}
	}
	t.Fatalf("no pid in %s", inst)
	return ""
}

func TestOperationsFromAnyNodeApplyWhereTheInstanceRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t)
		defer w.stop()
		w.add(40, 2)
		for _, n := range []string{"a", "b", "c"} {
			w.join(n)
		}
		runsOn, inst := elsewhere(t, w.settled())
		w.wantModel(30 * time.Second)
		local := func() projection.Status {
			for _, st := range w.projs[runsOn].Local() {
				if st.Instance == inst {
					return st
				}
			}
			t.Fatalf("%s no longer runs on %s", inst, runsOn)
			return projection.Status{}
		}

		// Status from a: offset, holder, lag in events (the source counts).
		st := w.status("a", inst, "reported and caught up", func(st projection.InstanceState) bool {
			return !st.ReportedAt.IsZero() && st.Report.LagEvents == 0 && st.Report.Offset == local().Offset
		})
		if holderNode(st.Holder) != runsOn || st.Epoch < 1 || st.Paused || st.Report.LastEventTime.IsZero() {
			t.Errorf("status seen from a: %+v; want held by %s, not paused, with a last event", st, runsOn)
		}

		// Pause from a applies on runsOn: new events of its range wait.
		if _, err := w.projs["a"].Pause(context.Background(), inst); err != nil {
			t.Fatal(err)
		}
		w.status("a", inst, "paused", func(st projection.InstanceState) bool { return st.Paused && len(st.Pending) == 0 })
		if !local().Paused {
			t.Errorf("the runner on %s is not paused: %+v", runsOn, local())
		}
		pid := pidIn(t, inst, 40)
		w.mu.Lock()
		before := len(w.model[pid])
		w.mu.Unlock()
		w.seqs[pid]++
		m, payload, _ := w.reg.Encode(Added{N: int(w.seqs[pid]) * 10})
		w.src.Append(journal.Event{PersistenceID: pid, SeqNr: w.seqs[pid], Manifest: m, Payload: payload, Timestamp: time.Now(), WriterID: "w"})
		w.status("a", inst, "lagging by one event", func(st projection.InstanceState) bool { return st.Report.LagEvents == 1 })
		w.mu.Lock()
		after := len(w.model[pid])
		w.mu.Unlock()
		if after != before {
			t.Fatalf("a paused instance handled an event of %s", pid)
		}

		// Resume from c (or b): the event is handled.
		from := "c"
		if runsOn == "c" {
			from = "b"
		}
		if _, err := w.projs[from].Resume(context.Background(), inst); err != nil {
			t.Fatal(err)
		}
		w.wantModel(30 * time.Second)
		w.status("a", inst, "resumed", func(st projection.InstanceState) bool { return !st.Paused && st.Report.LagEvents == 0 })

		// Rebuild: the range's part of the model is cleared and made again.
		w.mu.Lock()
		handled := w.handling
		w.mu.Unlock()
		if _, err := w.projs["a"].Rebuild(context.Background(), inst); err != nil {
			t.Fatal(err)
		}
		w.status("a", inst, "rebuilt", func(st projection.InstanceState) bool { return len(st.Pending) == 0 })
		w.wantModel(30 * time.Second)
		// The status may show the request done before the runner handled
		// anything again (its report comes with the next heartbeat).
		again := w.handledSince(handled, 30*time.Second)
		if again == 0 {
			t.Errorf("Rebuild handled no event again")
		}

		// Reset to an offset of another journal is refused by the runner:
		// the request completes and the error shows in the status.
		if _, err := w.projs["a"].Reset(context.Background(), inst, journal.Offset{Kind: "postgres", Tx: 1, Pos: 1}); err != nil {
			t.Fatal(err)
		}
		st = w.status("a", inst, "refusing the reset", func(st projection.InstanceState) bool {
			return len(st.Pending) == 0 && st.Report.LastError != ""
		})
		if !errors.Is(local().LastError, journal.ErrOffsetMismatch) {
			t.Errorf("last error %v, want ErrOffsetMismatch", local().LastError)
		}

		// Reset to the start: every event of the range is handled again.
		w.mu.Lock()
		handled = w.handling
		w.mu.Unlock()
		if _, err := w.projs["b"].Reset(context.Background(), inst, journal.Offset{}); err != nil {
			t.Fatal(err)
		}
		w.status("a", inst, "reset", func(st projection.InstanceState) bool { return len(st.Pending) == 0 && st.Report.LagEvents == 0 })
		again = w.handledSince(handled, 30*time.Second)
		if again == 0 {
			t.Errorf("Reset to the start handled no event again")
		}

		// Unknown instances are refused.
		if _, err := w.projs["a"].Pause(context.Background(), projection.Instance{Name: "orders", Slices: journal.SliceRange{Min: 0, Max: 3}}); !errors.Is(err, projection.ErrUnknownInstance) {
			t.Errorf("Pause of an instance the projection does not have: %v, want ErrUnknownInstance", err)
		}
		if _, err := w.projs["a"].Instance("7"); !errors.Is(err, projection.ErrUnknownInstance) {
			t.Errorf("Instance(7) of 4: %v, want ErrUnknownInstance", err)
		}
		if got, err := w.projs["a"].Instance(fmt.Sprintf("%d-%d", inst.Slices.Min, inst.Slices.Max)); err != nil || got != inst {
			t.Errorf("Instance by range: %v, %v", got, err)
		}
	})
}

// A pause requested while no node runs the instance holds when it starts.
func TestAPauseBeforeTheStartHolds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t)
		defer w.stop()
		w.add(40, 1)
		w.join("a")
		placed := w.settled()
		var inst projection.Instance
		for i := range placed {
			inst = i
			break
		}
		w.leave("a")
		time.Sleep(5 * time.Second)
		w.join("b")
		if _, err := w.projs["b"].Pause(context.Background(), inst); err != nil {
			t.Fatal(err)
		}
		// b's instances start after b joined; the pause may be applied
		// before or after the first events: it must hold from then on.
		w.status("b", inst, "paused", func(st projection.InstanceState) bool { return st.Paused && st.Held && len(st.Pending) == 0 })
		pid := pidIn(t, inst, 40)
		w.mu.Lock()
		before := len(w.model[pid])
		w.mu.Unlock()
		w.add(40, 1)
		time.Sleep(10 * time.Second)
		w.mu.Lock()
		after := len(w.model[pid])
		w.mu.Unlock()
		if after != before {
			t.Errorf("the paused instance handled events of %s: %d, then %d", pid, before, after)
		}
	})
}

// holderNode is the node id of a holder: HolderNode names the node
// incarnation, node#incarnation.
func holderNode(holder string) string {
	a, err := cluster.ParseUniqueAddress(sharded.HolderNode(holder))
	if err != nil {
		return holder
	}
	return a.Node
}
