package sharding

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/cluster/inproc"
	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/sharding/internal/protocol"
	"github.com/shoal-dev/shoal/sharding/internal/wire"
)

// ---- the pipeline as a pure machine ----

func home(to, shard, region string) outbound {
	return outbound{to: addr(to), msg: protocol.ShardHome{Shard: shard, Region: addr(region), Epoch: 1}}
}

// A step's messages wait until every change of that step and of every
// earlier one committed, and go out in step order; batches are the
// changes of consecutive steps, in order, one in flight at a time.
func TestPipelineHoldsMessagesUntilTheirBatchCommitted(t *testing.T) {
	var p coordinatorPipeline
	if now := p.take(protocol.ShardStarted{}, nil, []outbound{home("b", "s0", "a")}); len(now) != 1 {
		t.Fatalf("nothing held, no change: sent %v, want it at once", sent(now))
	}
	if now := p.take(protocol.GetShardHome{Shard: "s1", Region: addr("b")}, []change{{shard: "s1", region: addr("a")}}, []outbound{home("b", "s1", "a")}); now != nil {
		t.Fatalf("a step with a change sent %v at once", sent(now))
	}
	b1 := p.next()
	if b1 == nil || !slices.Equal(b1.changes, []AllocationChange{{Shard: "s1", Region: addr("a")}}) {
		t.Fatalf("first batch %+v", b1)
	}
	p.take(protocol.GetShardHome{Shard: "s2", Region: addr("b")}, []change{{shard: "s2", region: addr("a")}}, []outbound{home("b", "s2", "a")})
	if now := p.take(protocol.RegisterProxy{Region: addr("c")}, nil, []outbound{{to: addr("c"), msg: protocol.RegisterAck{}}}); now != nil {
		t.Fatalf("a step behind held ones sent %v at once", sent(now))
	}
	p.take(protocol.GetShardHome{Shard: "s3", Region: addr("b")}, []change{{shard: "s3", region: addr("a")}}, []outbound{home("b", "s3", "a")})
	if p.next() != nil {
		t.Fatal("a second batch went in flight beside the first")
	}
	if got := sent(p.committed(b1.seq)); !slices.Equal(got, []string{"b: ShardHome s1@a"}) {
		t.Fatalf("first commit released %v", got)
	}
	b2 := p.next()
	want := []AllocationChange{{Shard: "s2", Region: addr("a")}, {Shard: "s3", Region: addr("a")}}
	if b2 == nil || !slices.Equal(b2.changes, want) {
		t.Fatalf("second batch %+v, want %v", b2, want)
	}
	if got := sent(p.committed(b2.seq)); !slices.Equal(got, []string{"b: ShardHome s2@a", "c: RegisterAck", "b: ShardHome s3@a"}) {
		t.Fatalf("second commit released %v", got)
	}
	if p.held() || p.next() != nil {
		t.Fatal("something still held")
	}
}

// A failed batch stays in flight and is written again whole; the steps
// behind it wait in order, and nothing is lost.
func TestPipelineRetriesAFailedBatchWhole(t *testing.T) {
	var p coordinatorPipeline
	p.take(protocol.GetShardHome{Shard: "s1", Region: addr("b")}, []change{{shard: "s1", region: addr("a")}}, []outbound{home("b", "s1", "a")})
	b1 := p.next()
	if !p.failed(b1.seq) || !p.retrying() {
		t.Fatal("failure of the batch in flight not taken")
	}
	p.take(protocol.GetShardHome{Shard: "s2", Region: addr("b")}, []change{{shard: "s2", region: addr("a")}}, []outbound{home("b", "s2", "a")})
	if p.next() != nil {
		t.Fatal("a batch went in flight past a failed one")
	}
	again := p.retry()
	if again == nil || again.seq != b1.seq || !slices.Equal(again.changes, []AllocationChange{{Shard: "s1", Region: addr("a")}}) {
		t.Fatalf("retried %+v", again)
	}
	if p.retry() != nil {
		t.Fatal("a batch being written was handed out again")
	}
	if got := sent(p.committed(b1.seq)); !slices.Equal(got, []string{"b: ShardHome s1@a"}) {
		t.Fatalf("released %v", got)
	}
	b2 := p.next()
	if b2 == nil || !slices.Equal(b2.changes, []AllocationChange{{Shard: "s2", Region: addr("a")}}) || p.retrying() {
		t.Fatalf("after the retry: batch %+v, retrying %v", b2, p.retrying())
	}
	if got := sent(p.committed(b2.seq)); !slices.Equal(got, []string{"b: ShardHome s2@a"}) {
		t.Fatalf("released %v", got)
	}
}

// The answer to a GetShardHome overtakes held messages only when it names
// a committed home and nothing held for the asker names its shard.
func TestPipelineAnswersCommittedHomesAtOnce(t *testing.T) {
	var p coordinatorPipeline
	p.take(protocol.GetShardHome{Shard: "s1", Region: addr("b")}, []change{{shard: "s1", region: addr("a")}}, []outbound{home("b", "s1", "a")})
	p.next()
	p.take(protocol.BeginHandOff{}, nil, []outbound{{to: addr("c"), msg: protocol.BeginHandOff{Shard: "s9", Epoch: 1}}})
	cases := []struct {
		name string
		in   Message
		out  []outbound
		now  bool
	}{
		{"committed home", protocol.GetShardHome{Shard: "s0", Region: addr("b")}, []outbound{home("b", "s0", "a")}, true},
		{"home in flight", protocol.GetShardHome{Shard: "s1", Region: addr("b")}, []outbound{home("b", "s1", "a")}, false},
		{"held message names the shard", protocol.GetShardHome{Shard: "s9", Region: addr("c")}, []outbound{home("c", "s9", "a")}, false},
		{"held message names another shard", protocol.GetShardHome{Shard: "s0", Region: addr("c")}, []outbound{home("c", "s0", "a")}, true},
		{"not a GetShardHome", protocol.ShardStarted{Shard: "s0", Region: addr("b")}, []outbound{home("b", "s0", "a")}, false},
		{"not to the asker", protocol.GetShardHome{Shard: "s0", Region: addr("b")}, []outbound{home("c", "s0", "a")}, false},
	}
	for _, tc := range cases {
		if got := p.mayAnswerNow(tc.in, tc.out); got != tc.now {
			t.Errorf("%s: may answer now %v, want %v", tc.name, got, tc.now)
		}
	}
	p.take(protocol.RegisterProxy{Region: addr("b")}, nil, []outbound{{to: addr("b"), msg: protocol.ShardHomes{Epoch: 1}}})
	if p.mayAnswerNow(protocol.GetShardHome{Shard: "s0", Region: addr("b")}, []outbound{home("b", "s0", "a")}) {
		t.Error("answered past a held ShardHomes to the asker")
	}
}

// ---- the runner, with a store whose commits a test holds ----

// gateStore records every Update; while gate is set, an Update waits for
// it to close (or its context), and the first fails Updates fail.
type gateStore struct {
	*MemoryCoordinatorStore
	mu        sync.Mutex
	gate      chan struct{}
	fails     int
	attempts  [][]AllocationChange
	committed [][]AllocationChange
}

func (s *gateStore) Update(ctx context.Context, typeName string, epoch uint64, changes []AllocationChange) error {
	s.mu.Lock()
	s.attempts = append(s.attempts, slices.Clone(changes))
	gate, fail := s.gate, s.fails > 0
	if fail {
		s.fails--
	}
	s.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if fail {
		return errors.New("store unavailable")
	}
	if err := s.MemoryCoordinatorStore.Update(ctx, typeName, epoch, changes); err != nil {
		return err
	}
	s.mu.Lock()
	s.committed = append(s.committed, slices.Clone(changes))
	s.mu.Unlock()
	return nil
}

func (s *gateStore) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gate = make(chan struct{})
}

func (s *gateStore) open() {
	s.mu.Lock()
	defer s.mu.Unlock()
	close(s.gate)
	s.gate = nil
}

func (s *gateStore) batches() (attempts, committed [][]AllocationChange) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.attempts), slices.Clone(s.committed)
}

// fakeRegion is a node on the network that runs no real region: it
// records the protocol messages a coordinator sends it, and speaks to the
// coordinator for it.
type fakeRegion struct {
	name string
	tr   *inproc.Transport
	co   Address
	mu   sync.Mutex
	got  []outbound
}

func newFakeRegion(t *testing.T, net *inproc.Network, name string, co Address) *fakeRegion {
	f := &fakeRegion{name: name, co: co}
	tr, err := net.Join(addr(name), func(from cluster.UniqueAddress, m any) {
		if _, msg, ok := sentProtocol(addr(name), m); ok {
			f.mu.Lock()
			f.got = append(f.got, outbound{to: addr(name), msg: msg})
			f.mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	f.tr = tr
	return f
}

func (f *fakeRegion) send(t *testing.T, m Message) {
	t.Helper()
	env := wire.Envelope{To: wire.Target{Type: f.co.Type, Coordinator: f.co.Coordinator}, Msg: m}
	if err := f.tr.Send(f.co.Node, env); err != nil {
		t.Fatal(err)
	}
}

// homes lists the ShardHome messages received, as sent() names them.
func (f *fakeRegion) homes() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var homes []outbound
	for _, o := range f.got {
		if _, ok := o.msg.(protocol.ShardHome); ok {
			homes = append(homes, o)
		}
	}
	return sent(homes)
}

func (f *fakeRegion) received() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return sent(f.got)
}

// pipelineNode starts node a (the coordinator, the only hosting region,
// on one entity worker) with proxies b and c that tests play; entity id
// = shard id. Entities record what they get on seen.
func pipelineNode(t *testing.T, store CoordinatorStore, settings Settings) (s *Sharding, r *Region[string], b, c *fakeRegion, seen chan string) {
	t.Helper()
	return pipelineNodeWith(t, Config{CoordinatorStore: store}, settings)
}

// pipelineNodeWith is pipelineNode with cfg's stores.
func pipelineNodeWith(t *testing.T, cfg Config, settings Settings) (s *Sharding, r *Region[string], b, c *fakeRegion, seen chan string) {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	members, net := newTestCluster(), newTestNet(t)
	sys, err := entity.NewSystem(entity.Config{NodeID: "a", Logger: quiet, Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Membership = members.Join("a")
	s = startOn(t, net, sys, cfg)
	seen = make(chan string, 100)
	settings.ShardID = func(id string) string { return id }
	r, err = Init(s, Entity[string]{Key: entity.NewTypeKey[string]("Pipe"), Settings: settings,
		Create: func(entity.Context[string]) entity.Behavior[string] {
			return entity.Receive(func(_ entity.Context[string], m string) entity.Behavior[string] {
				seen <- m
				return entity.Same[string]()
			})
		}})
	if err != nil {
		t.Fatal(err)
	}
	co := Address{Node: addr("a"), Type: "Pipe", Coordinator: true}
	b, c = newFakeRegion(t, net, "b", co), newFakeRegion(t, net, "c", co)
	members.Join("b")
	members.Join("c")
	synctest.Wait()
	b.send(t, protocol.RegisterProxy{Region: addr("b")})
	synctest.Wait()
	return s, r, b, c, seen
}

func drain(seen chan string) []string {
	var got []string
	for {
		select {
		case m := <-seen:
			got = append(got, m)
		default:
			return got
		}
	}
}

// While a store commit hangs, the coordinator keeps taking messages, and
// the node's only entity worker keeps running entities: the commit runs
// on a goroutine of its own. A GetShardHome for a committed home is
// answered at once; what depends on the batch in flight (the new home,
// the welcome of a region that registers, whose ShardHomes would name
// it) waits for its commit. (It used to commit on the worker: nothing
// ran until the store answered.)
func TestCoordinatorKeepsWorkingWhileACommitHangs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &gateStore{MemoryCoordinatorStore: NewMemoryCoordinatorStore()}
		s, r, b, c, seen := pipelineNode(t, store, Settings{StoreTimeout: time.Hour})
		defer s.Terminate()
		if err := r.EntityRefFor("s1").Tell("1"); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if got := drain(seen); !slices.Equal(got, []string{"1"}) {
			t.Fatalf("entity got %v before the store hung", got)
		}

		before := len(c.received()) // the new coordinator's announcement
		store.close()
		b.send(t, protocol.GetShardHome{Shard: "s2", Region: addr("b")}) // allocates: the commit hangs
		synctest.Wait()
		if err := r.EntityRefFor("s1").Tell("2"); err != nil {
			t.Fatal(err)
		}
		b.send(t, protocol.GetShardHome{Shard: "s1", Region: addr("b")}) // committed: answered now
		c.send(t, protocol.RegisterProxy{Region: addr("c")})             // its welcome names s2: held
		b.send(t, protocol.GetShardHome{Shard: "s2", Region: addr("b")}) // in flight: held
		synctest.Wait()
		if got := drain(seen); !slices.Equal(got, []string{"2"}) {
			t.Fatalf("while the commit hangs the entity got %v, want [2]", got)
		}
		if got := b.homes(); !slices.Equal(got, []string{"b: ShardHome s1@a", "b: ShardHome s1@a"}) {
			t.Fatalf("while the commit hangs b got homes %v, want s1's pushed, then s1's answer", got)
		}
		if got := c.received()[before:]; len(got) != 0 {
			t.Fatalf("while the commit hangs c got %v, want nothing", got)
		}

		store.open()
		synctest.Wait()
		if got := b.homes()[2:]; !slices.Equal(got, []string{"b: ShardHome s2@a", "b: ShardHome s2@a"}) {
			t.Fatalf("after the commit b got homes %v, want s2's push, then s2's answer", got)
		}
		if got := c.received()[before:]; len(got) < 2 || got[0] != "c: RegisterAck" || got[1] != "c: ShardHomes" {
			t.Fatalf("after the commit c got %v, want its welcome", got)
		}
		_, committed := store.batches()
		if want := [][]AllocationChange{{{Shard: "s1", Region: addr("a")}}, {{Shard: "s2", Region: addr("a")}}}; !slices.EqualFunc(committed, want, slices.Equal) {
			t.Fatalf("committed %v, want %v", committed, want)
		}
	})
}

// Batches commit in the order of the steps that made them; the steps
// behind a batch in flight form the next batch, in order, and each
// step's messages go out only after its batch committed, in step order.
func TestCoordinatorCommitsInStepOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &gateStore{MemoryCoordinatorStore: NewMemoryCoordinatorStore()}
		s, _, b, _, _ := pipelineNode(t, store, Settings{StoreTimeout: time.Hour})
		defer s.Terminate()
		store.close()
		for _, shard := range []string{"s3", "s1", "s4", "s2"} {
			b.send(t, protocol.GetShardHome{Shard: shard, Region: addr("b")})
		}
		synctest.Wait()
		if got := b.homes(); len(got) != 0 {
			t.Fatalf("before any commit b got %v", got)
		}
		store.open()
		synctest.Wait()
		_, committed := store.batches()
		want := [][]AllocationChange{{{Shard: "s3", Region: addr("a")}}, {{Shard: "s1", Region: addr("a")}, {Shard: "s4", Region: addr("a")}, {Shard: "s2", Region: addr("a")}}}
		if !slices.EqualFunc(committed, want, slices.Equal) {
			t.Fatalf("committed %v, want %v", committed, want)
		}
		if got := b.homes(); !slices.Equal(got, []string{"b: ShardHome s3@a", "b: ShardHome s1@a", "b: ShardHome s4@a", "b: ShardHome s2@a"}) {
			t.Fatalf("b got %v, want the homes in the order asked", got)
		}
	})
}

// A failed commit is retried after a back-off with the same batch; the
// steps taken meanwhile commit after it, in order; no message goes out
// before its batch committed, and none is lost.
func TestCoordinatorRetriesAFailedBatchLosingNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &gateStore{MemoryCoordinatorStore: NewMemoryCoordinatorStore()}
		s, _, b, _, _ := pipelineNode(t, store, Settings{RetryInterval: time.Second})
		defer s.Terminate()
		store.mu.Lock()
		store.fails = 2
		store.mu.Unlock()
		b.send(t, protocol.GetShardHome{Shard: "s1", Region: addr("b")})
		synctest.Wait()
		b.send(t, protocol.GetShardHome{Shard: "s2", Region: addr("b")})
		b.send(t, protocol.GetShardHome{Shard: "s3", Region: addr("b")})
		synctest.Wait()
		if got := b.homes(); len(got) != 0 {
			t.Fatalf("after a failed commit b got %v", got)
		}
		time.Sleep(time.Minute) // the back-offs
		synctest.Wait()
		attempts, committed := store.batches()
		s1 := []AllocationChange{{Shard: "s1", Region: addr("a")}}
		rest := []AllocationChange{{Shard: "s2", Region: addr("a")}, {Shard: "s3", Region: addr("a")}}
		if want := [][]AllocationChange{s1, s1, s1, rest}; !slices.EqualFunc(attempts, want, slices.Equal) {
			t.Fatalf("attempts %v, want %v", attempts, want)
		}
		if want := [][]AllocationChange{s1, rest}; !slices.EqualFunc(committed, want, slices.Equal) {
			t.Fatalf("committed %v, want %v", committed, want)
		}
		if got := b.homes(); !slices.Equal(got, []string{"b: ShardHome s1@a", "b: ShardHome s2@a", "b: ShardHome s3@a"}) {
			t.Fatalf("b got %v, want every home, in order", got)
		}
	})
}

// A coordinator told to stop while a batch is in flight records and sends
// what it decided before it goes, then releases its lease; a commit that
// hangs holds the stop only until the batch's StoreTimeout.
func TestCoordinatorStopWaitsForTheBatchInFlightWithinItsTimeout(t *testing.T) {
	for _, hangs := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			store := &gateStore{MemoryCoordinatorStore: NewMemoryCoordinatorStore()}
			s, r, b, _, _ := pipelineNode(t, store, Settings{StoreTimeout: 10 * time.Second})
			defer s.Terminate()
			store.close()
			b.send(t, protocol.GetShardHome{Shard: "s2", Region: addr("b")})
			synctest.Wait()
			start := time.Now()
			stopped := make(chan struct{})
			go func() { hostOf(r).stopCoordinator(); close(stopped) }()
			time.Sleep(time.Second)
			synctest.Wait()
			select {
			case <-stopped:
				t.Fatal("stopped with a batch in flight")
			default:
			}
			if !hangs {
				store.open()
			}
			<-stopped
			took := time.Since(start)
			_, committed := store.batches()
			if hangs {
				if took != 10*time.Second || len(committed) != 0 || len(b.homes()) != 0 {
					t.Fatalf("hung commit: stopped after %v, committed %v, b got %v; want 10s (StoreTimeout), nothing committed or pushed", took, committed, b.homes())
				}
				return
			}
			if took != time.Second || len(committed) != 1 || !slices.Contains(b.homes(), "b: ShardHome s2@a") {
				t.Fatalf("stopped after %v, committed %v, b got %v; want 1s, s2 committed and pushed", took, committed, b.homes())
			}
			if _, _, err := store.Acquire(context.Background(), "Pipe", addr("z"), time.Minute); err != nil {
				t.Fatalf("the lease was not released: %v", err)
			}
		})
	}
}
