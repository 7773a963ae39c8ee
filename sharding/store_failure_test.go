package sharding_test

import (
	"context"
	"errors"
	"github.com/shoal-dev/shoal/cluster"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/sharding"
)

// faultyCoordinatorStore fails its first failAllocates Allocate and
// failDeallocates Deallocate calls (an Update counts as each kind of
// change it holds, and fails if either fails), and makes its first hangAcquires
// Acquire calls wait for their context.
type faultyCoordinatorStore struct {
	*sharding.MemoryCoordinatorStore
	mu                             sync.Mutex
	failAllocates, failDeallocates int
	hangAcquires                   int
	acquires                       int
}

func (f *faultyCoordinatorStore) Acquire(ctx context.Context, typeName string, owner cluster.UniqueAddress, ttl time.Duration) (uint64, map[string]sharding.Allocation, error) {
	f.mu.Lock()
	f.acquires++
	hang := f.acquires <= f.hangAcquires
	f.mu.Unlock()
	if hang {
		<-ctx.Done()
		return 0, nil, ctx.Err()
	}
	return f.MemoryCoordinatorStore.Acquire(ctx, typeName, owner, ttl)
}

// fail fails the call while *left is positive, counting it down.
func (f *faultyCoordinatorStore) fail(left *int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if *left > 0 {
		*left--
		return errors.New("store unavailable")
	}
	return nil
}

func (f *faultyCoordinatorStore) Update(ctx context.Context, typeName string, epoch uint64, changes []sharding.AllocationChange) error {
	var allocates, deallocates bool
	for _, c := range changes {
		allocates = allocates || !c.Region.IsZero()
		deallocates = deallocates || c.Region.IsZero()
	}
	if deallocates {
		if err := f.fail(&f.failDeallocates); err != nil {
			return err
		}
	}
	if allocates {
		if err := f.fail(&f.failAllocates); err != nil {
			return err
		}
	}
	return f.MemoryCoordinatorStore.Update(ctx, typeName, epoch, changes)
}

func (f *faultyCoordinatorStore) Deallocate(ctx context.Context, typeName string, epoch uint64, shard string) error {
	if err := f.fail(&f.failDeallocates); err != nil {
		return err
	}
	return f.MemoryCoordinatorStore.Deallocate(ctx, typeName, epoch, shard)
}

func (f *faultyCoordinatorStore) Allocate(ctx context.Context, typeName string, epoch uint64, shard string, region cluster.UniqueAddress) error {
	if err := f.fail(&f.failAllocates); err != nil {
		return err
	}
	return f.MemoryCoordinatorStore.Allocate(ctx, typeName, epoch, shard, region)
}

func singleNode(t *testing.T, cfg sharding.Config, settings sharding.Settings) (*sharding.Sharding, *node) {
	return namedNode(t, "a", newJournal(), cfg, settings)
}

// namedNode starts a one-member cluster whose entities write to log.
func namedNode(t *testing.T, name string, log *journal, cfg sharding.Config, settings sharding.Settings) (*sharding.Sharding, *node) {
	t.Helper()
	sys, err := entity.NewSystem(entity.Config{NodeID: name, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	sh, err := sharding.New(sys, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sh.Terminate)
	r, err := sharding.Init(sh, sharding.Entity[msg]{Key: key, Create: log.create(name), StopMessage: stop{}, Settings: settings})
	if err != nil {
		t.Fatal(err)
	}
	return sh, &node{name: name, sys: sys, sh: sh, region: r}
}

// A coordinator whose store write fails does not announce what it could
// not record: it retries the write after a back-off, holding what comes
// meanwhile, then allocates, and the buffered message is delivered. (It
// used to stop and be restarted, losing what its decisions carried.)
func TestCoordinatorRetriesAFailedStoreWrite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &faultyCoordinatorStore{MemoryCoordinatorStore: sharding.NewMemoryCoordinatorStore(), failAllocates: 2}
		_, n := singleNode(t, sharding.Config{CoordinatorStore: store}, sharding.Settings{})
		n.tell(t, "e", note{Text: "1"})
		time.Sleep(time.Minute) // two back-offs
		synctest.Wait()
		if got := n.ask(t, "e"); !slices.Equal(got, []string{"1"}) {
			t.Fatalf("entity got %v", got)
		}
		if store.acquires != 1 {
			t.Fatalf("%d coordinators acquired the store, want 1 (it retries, it does not restart)", store.acquires)
		}
	})
}

// A store that hangs fails the call at StoreTimeout instead of holding the
// coordinator forever.
func TestHungCoordinatorStoreTimesOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &faultyCoordinatorStore{MemoryCoordinatorStore: sharding.NewMemoryCoordinatorStore(), hangAcquires: 1}
		_, n := singleNode(t, sharding.Config{CoordinatorStore: store}, sharding.Settings{StoreTimeout: time.Second})
		n.tell(t, "e", note{Text: "1"})
		if got := n.ask(t, "e"); !slices.Equal(got, []string{"1"}) {
			t.Fatalf("entity got %v", got)
		}
	})
}

// flakyRememberStore fails its first failAdds Add calls and its first
// failReads Entities calls.
type flakyRememberStore struct {
	*sharding.MemoryRememberStore
	mu                  sync.Mutex
	failAdds, failReads int
	adds                int
}

func (f *flakyRememberStore) Add(ctx context.Context, typeName, shard, entityID string) error {
	f.mu.Lock()
	f.adds++
	fail := f.adds <= f.failAdds
	f.mu.Unlock()
	if fail {
		return errors.New("store unavailable")
	}
	return f.MemoryRememberStore.Add(ctx, typeName, shard, entityID)
}

func (f *flakyRememberStore) Entities(ctx context.Context, typeName, shard string) ([]string, error) {
	f.mu.Lock()
	fail := f.failReads > 0
	f.failReads--
	f.mu.Unlock()
	if fail {
		return nil, errors.New("store unavailable")
	}
	return f.MemoryRememberStore.Entities(ctx, typeName, shard)
}

// A remember-entities write the store refuses is retried with back-off
// until it lands, so a brief store outage loses no remembered entity.
func TestRememberStoreWritesAreRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &flakyRememberStore{MemoryRememberStore: sharding.NewMemoryRememberStore(), failAdds: 3}
		_, n := singleNode(t, sharding.Config{RememberStore: store}, sharding.Settings{RememberEntities: true})
		n.tell(t, "e", note{Text: "1"})
		time.Sleep(30 * time.Second)
		synctest.Wait()
		ids, err := store.MemoryRememberStore.Entities(context.Background(), key.Name(), n.region.ShardID("e"))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(ids, []string{"e"}) || store.adds != 4 {
			t.Fatalf("remembered %v after %d Add calls; want [e] after 4", ids, store.adds)
		}
	})
}

// A shard that cannot read its remembered entities keeps trying: giving up
// would leave them stopped for good.
func TestRememberedEntitiesRestartAfterTheStoreRecovers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &flakyRememberStore{MemoryRememberStore: sharding.NewMemoryRememberStore()}
		settings := sharding.Settings{RememberEntities: true, NumberOfShards: 1}
		first, n := singleNode(t, sharding.Config{RememberStore: store}, settings)
		n.tell(t, "e", note{Text: "1"})
		synctest.Wait()
		if err := first.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}

		store.failReads = 3
		_, n = singleNode(t, sharding.Config{RememberStore: store}, settings)
		if err := n.region.StartEntity("other"); err != nil { // starts the one shard, which restarts e
			t.Fatal(err)
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		var ids []string
		for _, es := range n.region.State().Shards {
			ids = append(ids, es...)
		}
		slices.Sort(ids)
		if !slices.Contains(ids, "e") {
			t.Fatalf("running %v; remembered e did not restart", ids)
		}
	})
}

// Remembered entities come back after the whole cluster restarts, without
// a message: the new coordinator starts every shard the remember store
// names — after a graceful shutdown and after a crash alike.
func TestRememberedEntitiesComeBackAfterTheClusterRestarts(t *testing.T) {
	for _, crash := range []bool{false, true} {
		name := map[bool]string{false: "shutdown", true: "crash"}[crash]
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := sharding.Config{CoordinatorStore: sharding.NewMemoryCoordinatorStore(), RememberStore: sharding.NewMemoryRememberStore()}
				settings := sharding.Settings{RememberEntities: true}
				log := newJournal()
				before, a := namedNode(t, "a", log, cfg, settings)
				for _, id := range []string{"e1", "e2", "e3"} {
					a.tell(t, id, note{Text: "hi"})
				}
				synctest.Wait()
				if crash {
					before.Terminate()
				} else if err := before.Shutdown(context.Background()); err != nil {
					t.Fatal(err)
				}

				_, b := namedNode(t, "b", log, cfg, settings)
				time.Sleep(time.Minute)
				synctest.Wait()
				var ids []string
				for _, es := range b.region.State().Shards {
					ids = append(ids, es...)
				}
				slices.Sort(ids)
				if !slices.Equal(ids, []string{"e1", "e2", "e3"}) {
					t.Fatalf("running after the restart: %v, want [e1 e2 e3]", ids)
				}
			})
		})
	}
}
