package sharding

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/cluster/inproc"
	"github.com/shoal-dev/shoal/cluster/lease"
	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/sharding/internal/protocol"
)

// The coordinator's store calls run off the entity worker: with one worker
// for the whole node, an entity answers while the coordinator's Acquire,
// remembered read or Release hangs.

// gate holds calls while it is closed.
type gate struct {
	mu sync.Mutex
	ch chan struct{}
}

func (g *gate) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ch == nil {
		g.ch = make(chan struct{})
	}
}

func (g *gate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ch != nil {
		close(g.ch)
		g.ch = nil
	}
}

// wait returns once the gate is open, or ctx ended (a nil ctx: never).
func (g *gate) wait(ctx context.Context) error {
	g.mu.Lock()
	ch := g.ch
	g.mu.Unlock()
	if ch == nil {
		return nil
	}
	var done <-chan struct{}
	if ctx != nil {
		done = ctx.Done()
	}
	select {
	case <-ch:
		return nil
	case <-done:
		return ctx.Err()
	}
}

// slowStores holds the coordinator's Acquire and Renew (until their
// context ends), its Release (ignoring its context, as a store stuck in a
// call may) and the read of remembered shards (until its context ends) at
// their gates.
type slowStores struct {
	*MemoryCoordinatorStore
	*MemoryRememberStore
	acquire, renew, release, shards gate
	acquires, releases              atomic.Int32
}

func newSlowStores() *slowStores {
	return &slowStores{MemoryCoordinatorStore: NewMemoryCoordinatorStore(), MemoryRememberStore: NewMemoryRememberStore()}
}

// slowNode is pipelineNodeWith on store; at the end of the test the gates
// open, then the node terminates.
func slowNode(t *testing.T, store *slowStores, settings Settings) (*Sharding, *Region[string], *fakeRegion, *fakeRegion, chan string) {
	t.Helper()
	s, r, b, c, seen := pipelineNodeWith(t, Config{CoordinatorStore: store, RememberStore: store}, settings)
	t.Cleanup(s.Terminate)
	t.Cleanup(store.openAll)
	return s, r, b, c, seen
}

func (s *slowStores) openAll() {
	s.acquire.open()
	s.renew.open()
	s.release.open()
	s.shards.open()
}

func (s *slowStores) Acquire(ctx context.Context, typeName string, owner cluster.UniqueAddress, ttl time.Duration) (uint64, map[string]Allocation, error) {
	s.acquires.Add(1)
	if err := s.acquire.wait(ctx); err != nil {
		return 0, nil, err
	}
	return s.MemoryCoordinatorStore.Acquire(ctx, typeName, owner, ttl)
}

func (s *slowStores) Renew(ctx context.Context, typeName string, epoch uint64, ttl time.Duration) error {
	if err := s.renew.wait(ctx); err != nil {
		return err
	}
	return s.MemoryCoordinatorStore.Renew(ctx, typeName, epoch, ttl)
}

func (s *slowStores) Release(ctx context.Context, typeName string, epoch uint64) error {
	s.releases.Add(1)
	_ = s.release.wait(nil)
	return s.MemoryCoordinatorStore.Release(ctx, typeName, epoch)
}

func (s *slowStores) Shards(ctx context.Context, typeName string) ([]string, error) {
	if err := s.shards.wait(ctx); err != nil {
		return nil, err
	}
	return s.MemoryRememberStore.Shards(ctx, typeName)
}

// echo spawns an entity on sys (which shares the node's workers with the
// coordinator) that passes on what it gets.
func echo(sys *entity.System) (*entity.Cell[string], chan string) {
	got := make(chan string, 10)
	cell := entity.Spawn(sys, &entity.Props[string]{
		Key: entity.NewTypeKey[string]("Echo"),
		Create: func(entity.Context[string]) entity.Behavior[string] {
			return entity.Receive(func(_ entity.Context[string], m string) entity.Behavior[string] {
				got <- m
				return entity.Same[string]()
			})
		},
	}, "echo")
	return cell, got
}

// answers reports whether the echo entity takes a message now, with no
// time passing.
func answers(t *testing.T, cell *entity.Cell[string], got chan string) bool {
	t.Helper()
	if err := cell.Tell("ping"); err != nil {
		t.Fatal(err)
	}
	synctest.Wait()
	select {
	case <-got:
		return true
	default:
		return false
	}
}

// leaseFree reports whether another node could take the coordinator lease.
func leaseFree(t *testing.T, store *MemoryCoordinatorStore) bool {
	t.Helper()
	_, _, err := store.Acquire(context.Background(), "Pipe", addr("z"), time.Minute)
	return err == nil
}

// While the coordinator's Acquire hangs, the node's only entity worker
// runs other entities; what the coordinator is sent meanwhile waits for
// the answer, and is taken once it holds the lease. (The Acquire used to
// run on the worker: no entity ran until the store answered.)
func TestEntitiesRunWhileTheCoordinatorAcquires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newSlowStores()
		store.acquire.close()
		s, r, b, _, seen := slowNode(t, store, Settings{StoreTimeout: time.Hour})
		cell, got := echo(s.System())
		if !answers(t, cell, got) {
			t.Fatal("an entity did not run while the coordinator's Acquire hung")
		}
		if err := r.EntityRefFor("s1").Tell("1"); err != nil { // the region asks the coordinator
			t.Fatal(err)
		}
		synctest.Wait()
		if got := b.received(); len(got) != 0 {
			t.Fatalf("b got %v before the coordinator held its lease", got)
		}

		store.acquire.open()
		synctest.Wait() // no time passes: nothing waits for a retry
		if got := drain(seen); !slices.Equal(got, []string{"1"}) {
			t.Fatalf("once the lease was acquired the entity got %v, want [1]", got)
		}
		if !slices.Contains(b.received(), "b: RegisterAck") {
			t.Fatalf("b got %v: its registration during the Acquire was dropped", b.received())
		}
	})
}

// A coordinator stopped while its Acquire is in flight never acts: once
// the answer comes, it gives the lease back and stops, sending nothing;
// terminated, it neither waits for the answer nor acts on it.
func TestCoordinatorStoppedWhileAcquiringDoesNotAct(t *testing.T) {
	t.Run("stop", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			store := newSlowStores()
			store.acquire.close()
			_, r, b, c, _ := slowNode(t, store, Settings{StoreTimeout: time.Hour})
			stopped := make(chan struct{})
			go func() { hostOf(r).stopCoordinator(); close(stopped) }()
			synctest.Wait()
			select {
			case <-stopped:
				t.Fatal("stopped before the Acquire answered")
			default:
			}
			store.acquire.open()
			<-stopped
			if got := append(b.received(), c.received()...); len(got) != 0 {
				t.Fatalf("the stopped coordinator sent %v", got)
			}
			if store.releases.Load() != 1 || !leaseFree(t, store.MemoryCoordinatorStore) {
				t.Fatalf("%d releases; the lease acquired after the stop was not given back", store.releases.Load())
			}
		})
	})
	t.Run("terminate", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			store := newSlowStores()
			store.acquire.close()
			s, _, b, c, _ := slowNode(t, store, Settings{StoreTimeout: time.Hour})
			start := time.Now()
			s.Terminate()
			if took := time.Since(start); took != 0 {
				t.Fatalf("Terminate waited %v for the Acquire", took)
			}
			store.acquire.open()
			synctest.Wait()
			if got := append(b.received(), c.received()...); len(got) != 0 {
				t.Fatalf("the terminated coordinator sent %v", got)
			}
		})
	})
}

// An Acquire that fails stops the coordinator, which the region starts
// again after a back-off; one that finds the lease held elsewhere waits,
// asking every RetryInterval, and drops what it is sent (regions retry).
func TestCoordinatorAcquireFailsOrFindsTheLeaseHeld(t *testing.T) {
	t.Run("fails", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			store := newSlowStores()
			store.acquire.close()
			_, r, _, _, seen := slowNode(t, store, Settings{StoreTimeout: 10 * time.Second, RetryInterval: time.Second})
			if err := r.EntityRefFor("s1").Tell("1"); err != nil {
				t.Fatal(err)
			}
			time.Sleep(10 * time.Second) // the Acquire times out
			synctest.Wait()
			store.acquire.open()
			if got := drain(seen); len(got) != 0 || store.acquires.Load() != 1 {
				t.Fatalf("after a failed Acquire: entity got %v, %d Acquires", got, store.acquires.Load())
			}
			time.Sleep(10 * time.Second) // the restart's back-off, and the region's retry
			synctest.Wait()
			if got := drain(seen); !slices.Equal(got, []string{"1"}) || store.acquires.Load() != 2 {
				t.Fatalf("after the restart: entity got %v, %d Acquires; want [1], 2", got, store.acquires.Load())
			}
		})
	})
	t.Run("held", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			store := newSlowStores()
			epoch, _, err := store.MemoryCoordinatorStore.Acquire(context.Background(), "Pipe", addr("z"), time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			_, r, b, _, seen := slowNode(t, store, Settings{RetryInterval: time.Second})
			if err := r.EntityRefFor("s1").Tell("1"); err != nil {
				t.Fatal(err)
			}
			time.Sleep(10*time.Second + time.Second/2)
			synctest.Wait()
			if got := drain(seen); len(got) != 0 || len(b.received()) != 0 {
				t.Fatalf("while z holds the lease: entity got %v, b got %v", got, b.received())
			}
			// Every 500 ms: RetryInterval, but four times per lease (2 s).
			if n := store.acquires.Load(); n != 22 {
				t.Fatalf("%d Acquires in 10.5s, want 22 (two a second)", n)
			}
			if err := store.MemoryCoordinatorStore.Release(context.Background(), "Pipe", epoch); err != nil {
				t.Fatal(err)
			}
			time.Sleep(2 * time.Second) // the next Acquire, and the region's retry
			synctest.Wait()
			if got := drain(seen); !slices.Equal(got, []string{"1"}) {
				t.Fatalf("once z released the lease the entity got %v, want [1]", got)
			}
		})
	})
}

// A coordinator that finds the lease held asks again just after the
// store said it ends, when that is before its next retry: a crashed
// holder's lease is taken over as it expires.
func TestCoordinatorAcquiresAsTheHeldLeaseEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newSlowStores()
		if _, _, err := store.MemoryCoordinatorStore.Acquire(context.Background(), "Pipe", addr("z"), 300*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		slowNode(t, store, Settings{RetryInterval: time.Second})
		synctest.Wait()
		time.Sleep(250 * time.Millisecond)
		synctest.Wait()
		if n := store.acquires.Load(); n != 1 {
			t.Fatalf("%d Acquires in the first 250 ms, want 1: z's lease has 50 ms left", n)
		}
		time.Sleep(100 * time.Millisecond) // not the next retry (500 ms): the lease's end
		synctest.Wait()
		if n := store.acquires.Load(); n != 2 {
			t.Fatalf("%d Acquires 50 ms after z's lease ended, want 2", n)
		}
		_, _, err := store.MemoryCoordinatorStore.Acquire(context.Background(), "Pipe", addr("y"), time.Second)
		if !errors.Is(err, ErrLeaseHeld) {
			t.Fatalf("another's Acquire 50 ms after z's lease ended: %v, want ErrLeaseHeld: the coordinator took it", err)
		}
	})
}

// A coordinator stops once its lease's Release answered, or at
// StoreTimeout when the store does not answer; meanwhile entities run on
// the node's only worker, and the coordinator takes nothing. (The Release
// used to run on the worker.)
func TestCoordinatorReleasesItsLeaseOffTheWorker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newSlowStores()
		s, r, b, _, _ := slowNode(t, store, Settings{StoreTimeout: 10 * time.Second})
		cell, got := echo(s.System())
		store.release.close()
		hostOf(r).mu.Lock()
		co := hostOf(r).coord
		hostOf(r).mu.Unlock()
		start := time.Now()
		stopped := make(chan struct{})
		go func() { hostOf(r).stopCoordinator(); close(stopped) }()
		synctest.Wait()
		if !answers(t, cell, got) {
			t.Fatal("an entity did not run while the coordinator's Release hung")
		}
		before := len(b.received())
		// Unlistened, as before: only its own node could still tell it.
		if err := co.Tell(protocol.GetShardHome{Shard: "s1", Region: addr("b")}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if got := b.received()[before:]; len(got) != 0 {
			t.Fatalf("the stopping coordinator answered %v", got)
		}
		<-stopped
		if took := time.Since(start); took != 10*time.Second || store.releases.Load() != 1 {
			t.Fatalf("stopped after %v with %d Releases; want 10s (StoreTimeout), 1", took, store.releases.Load())
		}
	})
}

// The read of remembered shards after the acquisition runs off the
// worker; the coordinator starts the shards it names once it answered,
// and a stop meanwhile gives the lease back at once.
func TestCoordinatorReadsRememberedShardsOffTheWorker(t *testing.T) {
	for _, stop := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			store := newSlowStores()
			if err := store.MemoryRememberStore.Add(context.Background(), "Pipe", "s5", "s5"); err != nil {
				t.Fatal(err)
			}
			store.shards.close()
			s, r, _, _, _ := slowNode(t, store, Settings{StoreTimeout: time.Hour, RememberEntities: true})
			cell, got := echo(s.System())
			if !answers(t, cell, got) {
				t.Fatal("an entity did not run while the read of remembered shards hung")
			}
			if stop {
				hostOf(r).stopCoordinator()
				if store.releases.Load() != 1 || !leaseFree(t, store.MemoryCoordinatorStore) {
					t.Fatalf("stopped during the read: %d Releases, lease not free", store.releases.Load())
				}
				return
			}
			store.shards.open()
			synctest.Wait()
			if ids := r.State().Shards["s5"]; !slices.Equal(ids, []string{"s5"}) {
				t.Fatalf("running %v, want the remembered s5 started", r.State().Shards)
			}
		})
	}
}

// A membership change that stops the coordinator does not wait for it:
// membership callbacks never block, and its stop waits for its lease's
// Release. A node that is the oldest again before the old coordinator is
// done starts a new one on a retry tick once it is. (The callback used to
// wait for the stop, here StoreTimeout.)
func TestMembershipChangeDoesNotWaitForTheCoordinatorToStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newSlowStores()
		_, r, _, _, seen := slowNode(t, store, Settings{StoreTimeout: 10 * time.Second, RetryInterval: time.Second})
		// This node's own opinion of a's status, against the rules of a
		// real membership (a status moving back).
		local := r.s.cfg.Membership.(inproc.Membership).LocalMembership
		setStatus := func(st cluster.Status) {
			v := local.View()
			m, _ := v.Member(addr("a"))
			m.Status = st
			next, err := v.Without(m.Address).With(m)
			if err != nil {
				t.Fatal(err)
			}
			local.Set(next)
		}
		hostOf(r).mu.Lock()
		old := hostOf(r).coord
		hostOf(r).mu.Unlock()
		store.release.close()
		start := time.Now()
		setStatus(cluster.Leaving) // a is no longer the oldest
		if took := time.Since(start); took != 0 {
			t.Fatalf("the membership callback waited %v for the coordinator to stop", took)
		}
		synctest.Wait()
		if store.releases.Load() != 1 {
			t.Fatalf("%d Releases, want the stopping coordinator's", store.releases.Load())
		}
		setStatus(cluster.Up) // the oldest again: the old one is still stopping
		synctest.Wait()
		if n := store.acquires.Load(); n != 1 {
			t.Fatalf("%d Acquires while the old coordinator stops, want 1", n)
		}
		time.Sleep(11 * time.Second) // its Release times out; a retry tick
		synctest.Wait()
		select {
		case <-old.Done():
		default:
			t.Fatal("the old coordinator did not stop at StoreTimeout")
		}
		if n := store.acquires.Load(); n != 2 {
			t.Fatalf("%d Acquires once the old coordinator stopped, want 2", n)
		}
		if err := r.EntityRefFor("s2").Tell("2"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second) // a's retry
		synctest.Wait()
		if got := drain(seen); !slices.Equal(got, []string{"2"}) {
			t.Fatalf("with the new coordinator the entity got %v, want [2]", got)
		}
	})
}

// The coordinator's own messages (here a renewal's answer) left in its
// mailbox when it stops, or coming after it stopped, are dropped, not
// counted as dead letters; a region's message left there still is one.
func TestCoordinatorsOwnResultLeftAtStopIsNoDeadLetter(t *testing.T) {
	// renewing starts a node whose coordinator's renewal hangs.
	renewing := func(t *testing.T) (*Sharding, *Region[string], *fakeRegion, *slowStores) {
		t.Helper()
		store := newSlowStores()
		s, r, b, _, _ := slowNode(t, store, Settings{StoreTimeout: time.Hour})
		store.renew.close()
		time.Sleep(lease.DefaultSettings().Coordinator.RenewEvery) // a renewal is due
		synctest.Wait()
		return s, r, b, store
	}
	t.Run("in the mailbox", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s, r, b, store := renewing(t)
			hostOf(r).mu.Lock()
			co := hostOf(r).coord
			hostOf(r).mu.Unlock()
			// The node's only worker is busy: what comes waits in the mailbox.
			hold := make(chan struct{})
			busy := entity.Spawn(s.System(), &entity.Props[string]{
				Key: entity.NewTypeKey[string]("Busy"),
				Create: func(entity.Context[string]) entity.Behavior[string] {
					return entity.Receive(func(entity.Context[string], string) entity.Behavior[string] {
						<-hold
						return entity.Same[string]()
					})
				},
			}, "busy")
			if err := busy.Tell("hold"); err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
			store.renew.open()
			b.send(t, protocol.GetShardHome{Shard: "s1", Region: addr("b")})
			synctest.Wait()
			dead := s.System().Stats().DeadLetters
			co.StopNow()
			close(hold)
			<-co.Done()
			if got := s.System().Stats().DeadLetters - dead; got != 1 {
				t.Fatalf("%d dead letters, want 1: the region's GetShardHome, not the renewal's answer", got)
			}
		})
	})
	t.Run("after the stop", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s, r, _, _ := renewing(t)
			dead := s.System().Stats().DeadLetters
			hostOf(r).terminate() // the renewal's context ends: its answer comes after the stop
			synctest.Wait()
			if got := s.System().Stats().DeadLetters - dead; got != 0 {
				t.Fatalf("%d dead letters, want none", got)
			}
		})
	})
}
