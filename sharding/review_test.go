package sharding_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/shoal-dev/shoal/cluster"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/sharding"
	"github.com/shoal-dev/shoal/sharding/internal/protocol"
)

// A proxy region is never allocated a shard, so it has no LeaveAck to wait
// for: it leaves at once even when no node hosts the type, hence no
// coordinator answers.
func TestProxyShutdownWithoutCoordinatorReturns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, sharding.Settings{})
		p := s.join("proxy") // no "host" role, and no node has it
		synctest.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := p.sh.Shutdown(ctx); err != nil {
			t.Fatalf("proxy shutdown: %v", err)
		}
	})
}

// When the last node with the role is marked Leaving before it shuts
// down, no coordinator is left in its view to acknowledge the leave; a
// region holding nothing leaves at once rather than wait for its deadline.
func TestLastHostingNodeLeavingWithoutCoordinatorReturns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, sharding.Settings{})
		a := s.join("a", "host")
		synctest.Wait()
		s.cluster.SetStatus("a", cluster.Leaving) // no Up member has the role now
		synctest.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := a.sh.Shutdown(ctx); err != nil {
			t.Fatalf("shutdown: %v", err)
		}
	})
}

// delayedView is a membership whose subscribers hear of a change some time
// after the view shows it, as with a gossiped membership.
type delayedView struct {
	cluster.Membership
	delay time.Duration
}

func (v delayedView) Subscribe(fn func(cluster.Change)) (cluster.View, func()) {
	return v.Membership.Subscribe(func(c cluster.Change) {
		go func() {
			time.Sleep(v.delay)
			fn(c)
		}()
	})
}

// registerCounter counts the Register messages nodes send each other and,
// past a limit, refuses them, so that a message loop ends.
type registerCounter struct{ n atomic.Int64 }

func (c *registerCounter) intercept(_ cluster.UniqueAddress, _ sharding.Address, m sharding.Message) error {
	if _, ok := m.(protocol.Register); ok && c.n.Add(1) > 1000 {
		return errors.New("too many Register messages")
	}
	return nil
}

// coordinatorMove starts a (whose membership hears of changes late, and
// which runs on workers workers), b, and c (late as a), then makes b the
// oldest Up member. Until they hear of it, a and c still take a for the
// oldest: c registers with a's coordinator, across the network.
func coordinatorMove(t *testing.T, workers int) (a, b *node, tr *registerCounter, s *sim) {
	s = newSim(t, sharding.Settings{})
	tr = &registerCounter{}
	s.intercept = tr.intercept
	start := func(name string, workers int, delay time.Duration) *node {
		sys, err := entity.NewSystem(entity.Config{NodeID: name, Incarnation: simIncarnation, Logger: quiet(), Workers: workers, Codec: s.codec})
		if err != nil {
			t.Fatal(err)
		}
		var m cluster.Membership = s.cluster.Join(name, "host")
		if delay > 0 {
			m = delayedView{m, delay}
		}
		sh, ct := s.start(sys, sharding.Config{Membership: m, CoordinatorStore: s.store})
		log := newJournal()
		r, err := sharding.Init(sh, sharding.Entity[msg]{Key: key, Create: log.create(name), StopMessage: stop{}, Role: "host"})
		if err != nil {
			t.Fatal(err)
		}
		return &node{name: name, sys: sys, sh: sh, region: r, transport: ct}
	}
	a = start("a", workers, 30*time.Second)
	b = start("b", 0, 0)
	c := start("c", 0, 30*time.Second)
	t.Cleanup(c.sh.Terminate)
	time.Sleep(time.Minute)
	synctest.Wait()
	s.cluster.SetStatus("a", cluster.Leaving) // b is the oldest Up member now
	return a, b, tr, s
}

// A region that has seen the new coordinator's epoch but still addresses
// the old one (its membership is late) registers at the pace of its retry
// tick: the old coordinator's stale ShardHomes must not make it register
// again at once, in a loop that stops time.
func TestStaleShardHomesDoNotLoopRegistration(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b, tr, _ := coordinatorMove(t, 0)
		before := tr.n.Load()
		time.Sleep(10 * time.Second) // before a hears of the move
		if n := tr.n.Load() - before; n > 20 {
			t.Fatalf("%d Register messages in 10 s", n)
		}
		time.Sleep(time.Minute) // a's delayed notifications run
		synctest.Wait()
		b.sh.Terminate()
		a.sh.Terminate()
	})
}

// A region's retry tick that finds its node no longer the oldest must not
// wait for the coordinator to stop on the region's own worker: with one
// worker (GOMAXPROCS=1) the coordinator never runs again, and the region
// and node hang.
func TestRetryTickDoesNotBlockOnCoordinatorWithOneWorker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b, _, _ := coordinatorMove(t, 1)
		time.Sleep(10 * time.Second) // a's retry ticks see the move before a hears of it
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		stats := b.region.ClusterStats(ctx)
		cancel()
		if len(stats.Failed) > 0 {
			t.Fatalf("regions %v do not answer", stats.Failed)
		}
		time.Sleep(time.Minute) // a's delayed notifications run
		synctest.Wait()
		b.sh.Terminate()
		a.sh.Terminate()
	})
}

// failingCoordinatorStore never grants the coordinator role.
type failingCoordinatorStore struct {
	*sharding.MemoryCoordinatorStore
}

func (failingCoordinatorStore) Acquire(context.Context, string, cluster.UniqueAddress, time.Duration) (uint64, map[string]sharding.Allocation, error) {
	return 0, nil, errors.New("store unavailable")
}

// The region's retry tick reaps and restarts a failed coordinator while
// membership changes tell it the members: both touch Region.coord. Real
// time: the race needs the tick and the change to run at once.
func TestCoordinatorRestartRacesMembershipChange(t *testing.T) {
	s := newSim(t, sharding.Settings{})
	store := failingCoordinatorStore{sharding.NewMemoryCoordinatorStore()}
	sys, err := entity.NewSystem(entity.Config{NodeID: "a", Incarnation: simIncarnation, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	sh, _ := s.start(sys, sharding.Config{Membership: s.cluster.Join("a", "host"), CoordinatorStore: store})
	settings := sharding.Settings{RetryInterval: time.Millisecond}
	if _, err := sharding.Init(sh, sharding.Entity[msg]{Key: key, Create: s.log.create("a"), StopMessage: stop{}, Role: "host", Settings: settings}); err != nil {
		t.Fatal(err)
	}
	// A fixed count, not a time budget: a busy machine must not run fewer
	// changes against the 1 ms tick (300 ms ran 450–725 here under load).
	for i := range 500 {
		s.cluster.Join(fmt.Sprint("p", i)) // members without the role: a stays the oldest
	}
	sh.Terminate()
}
