package lease_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/cluster/lease"
)

var node = cluster.UniqueAddress{Node: "a", Incarnation: 1}

// fenceRecorder records when, and why, a Holder fenced.
type fenceRecorder struct {
	mu    sync.Mutex
	at    time.Time
	err   error
	count int
}

func (f *fenceRecorder) fence(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.at, f.err = time.Now(), err
	f.count++
}

func (f *fenceRecorder) get() (time.Time, error, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.at, f.err, f.count
}

// flakyStore fails renewals while down is set, and counts them.
type flakyStore struct {
	lease.Store
	down    atomic.Bool
	hang    atomic.Bool
	renewed atomic.Int32
}

var errOutage = errors.New("connection refused")

func (s *flakyStore) RenewNode(ctx context.Context, n cluster.UniqueAddress, ttl time.Duration) error {
	s.renewed.Add(1)
	if s.hang.Load() {
		<-ctx.Done()
		return ctx.Err()
	}
	if s.down.Load() {
		return errOutage
	}
	return s.Store.RenewNode(ctx, n, ttl)
}

// holdNode acquires node's lease in s and holds it, fencing into f.
func holdNode(t *testing.T, s lease.Store, f *fenceRecorder) *lease.Holder {
	t.Helper()
	h, err := lease.HoldNode(context.Background(), s, node, timing, f.fence)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// Hold refuses a timing that could not work: a zero RenewEvery would retry
// a failing store in a busy loop.
func TestHoldRefusesInvalidTiming(t *testing.T) {
	store := lease.NewMemoryStore(nil)
	renew := func(context.Context) error { return nil }
	for name, tm := range map[string]lease.Timing{
		"zero":          {},
		"no RenewEvery": {Length: 15 * time.Second, Margin: 3 * time.Second},
		"no Margin":     {Length: 15 * time.Second, RenewEvery: 5 * time.Second},
	} {
		if h, err := lease.Hold(tm, time.Now(), renew, func(error) {}); !errors.Is(err, cluster.ErrInvalidConfig) {
			if h != nil {
				h.Stop()
			}
			t.Errorf("Hold with %s timing: %v, want ErrInvalidConfig", name, err)
		}
		if _, err := lease.HoldNode(context.Background(), store, node, tm, func(error) {}); !errors.Is(err, cluster.ErrInvalidConfig) {
			t.Errorf("HoldNode with %s timing: %v, want ErrInvalidConfig", name, err)
		}
		if _, _, err := lease.HoldCoordinator(context.Background(), store, "T", "a#1", tm, func(error) {}); !errors.Is(err, cluster.ErrInvalidConfig) {
			t.Errorf("HoldCoordinator with %s timing: %v, want ErrInvalidConfig", name, err)
		}
	}
	// Refused before the store was asked: nothing was acquired.
	if _, err := store.NodeLeaseExpired(context.Background(), node); !errors.Is(err, lease.ErrNoLease) {
		t.Errorf("a refused HoldNode acquired the lease: %v", err)
	}
	if err := store.RenewCoordinator(context.Background(), "T", 1, time.Second); !errors.Is(err, lease.ErrNoLease) {
		t.Errorf("a refused HoldCoordinator acquired the lease: %v", err)
	}
	if _, err := lease.Hold(timing, time.Now(), renew, nil); !errors.Is(err, cluster.ErrInvalidConfig) {
		t.Errorf("Hold without a fence function: %v, want ErrInvalidConfig", err)
	}
}

func TestHolderRenewsEveryRenewEvery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &flakyStore{Store: lease.NewMemoryStore(nil)}
		var f fenceRecorder
		h := holdNode(t, store, &f)
		time.Sleep(time.Minute) // fake time: 12 renewals at 5 s
		synctest.Wait()
		if n := store.renewed.Load(); n != 12 {
			t.Errorf("%d renewals in a minute, want 12", n)
		}
		if !h.Holds() {
			t.Error("a renewed lease is not held")
		}
		h.Stop()
		if _, _, n := f.get(); n != 0 {
			t.Errorf("fenced %d times while renewing", n)
		}
		exp, err := store.NodeLeaseExpired(context.Background(), node)
		if err != nil || exp {
			t.Errorf("store says expired %v, %v after a minute of renewals", exp, err)
		}
	})
}

// With the store unreachable, the holder fences exactly at the start of
// its last successful renewal + Length − Margin, before the store's expiry.
func TestHolderFencesWhenStoreUnreachable(t *testing.T) {
	for _, mode := range []string{"failing", "hanging"} {
		t.Run(mode, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				mem := lease.NewMemoryStore(nil)
				store := &flakyStore{Store: mem}
				var f fenceRecorder
				h := holdNode(t, store, &f)
				defer h.Stop()
				time.Sleep(5*time.Second + time.Millisecond) // one renewal succeeds at 5 s
				synctest.Wait()
				lastGood := time.Now().Add(-time.Millisecond)
				if mode == "failing" {
					store.down.Store(true)
				} else {
					store.hang.Store(true)
				}
				time.Sleep(30 * time.Second)
				synctest.Wait()
				at, err, n := f.get()
				if n != 1 || !errors.Is(err, lease.ErrFenced) {
					t.Fatalf("fenced %d times (%v), want once with ErrFenced", n, err)
				}
				if want := lastGood.Add(timing.Length - timing.Margin); !at.Equal(want) {
					t.Fatalf("fenced at +%v, want +%v (last good renewal + 12 s)", at.Sub(lastGood), want.Sub(lastGood))
				}
				if h.Holds() {
					t.Fatal("holds after fencing")
				}
			})
		})
	}
}

func TestHolderFencesOnceDowned(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := lease.NewMemoryStore(nil)
		var f fenceRecorder
		h := holdNode(t, store, &f)
		defer h.Stop()
		time.Sleep(7 * time.Second)
		if err := store.DownNode(context.Background(), node); err != nil {
			t.Fatal(err)
		}
		downedAt := time.Now()
		time.Sleep(time.Minute)
		synctest.Wait()
		at, err, n := f.get()
		if n != 1 || !errors.Is(err, lease.ErrNodeDown) || !errors.Is(err, lease.ErrFenced) {
			t.Fatalf("fenced %d times with %v, want once with ErrFenced and ErrNodeDown", n, err)
		}
		if want := downedAt.Add(3 * time.Second); !at.Equal(want) {
			t.Fatalf("fenced %v after the down, want at the next renewal (3 s)", at.Sub(downedAt))
		}
	})
}

func TestHolderStopStopsRenewing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &flakyStore{Store: lease.NewMemoryStore(nil)}
		var f fenceRecorder
		h := holdNode(t, store, &f)
		time.Sleep(6 * time.Second)
		h.Stop()
		before := store.renewed.Load()
		time.Sleep(time.Minute)
		synctest.Wait()
		if n := store.renewed.Load(); n != before {
			t.Fatalf("%d renewals after Stop", n-before)
		}
		if _, _, n := f.get(); n != 0 {
			t.Fatalf("Stop fenced %d times", n)
		}
	})
}

func TestHoldCoordinatorFencesOnTakeover(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := lease.NewMemoryStore(nil)
		ctx := context.Background()
		var f fenceRecorder
		h, epoch, err := lease.HoldCoordinator(ctx, store, "T", "a#1", timing, f.fence)
		if err != nil || epoch == 0 {
			t.Fatalf("HoldCoordinator: epoch %d, %v", epoch, err)
		}
		defer h.Stop()
		time.Sleep(time.Second)
		// The same owner re-acquires (a restarted coordinator on the same
		// incarnation): the old holder's epoch is stale at its next renewal.
		if _, err := store.AcquireCoordinator(ctx, "T", "a#1", timing.Length); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		if _, err, n := f.get(); n != 1 || !errors.Is(err, lease.ErrStaleEpoch) {
			t.Fatalf("fenced %d times with %v, want once with ErrStaleEpoch", n, err)
		}
	})
}

// fence may stop its own Holder (an owner shutting everything down) without
// deadlocking: fence runs after the Holder's goroutine is done.
func TestFenceMayStopItsHolder(t *testing.T) {
	for _, downed := range []bool{false, true} {
		t.Run(map[bool]string{false: "timed out", true: "refused"}[downed], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				mem := lease.NewMemoryStore(nil)
				store := &flakyStore{Store: mem}
				var (
					holder  atomic.Pointer[lease.Holder]
					stopped atomic.Bool
				)
				h, err := lease.HoldNode(context.Background(), store, node, timing, func(error) {
					holder.Load().Stop()
					stopped.Store(true)
				})
				if err != nil {
					t.Fatal(err)
				}
				holder.Store(h)
				if downed {
					if err := mem.DownNode(context.Background(), node); err != nil {
						t.Fatal(err)
					}
				} else {
					store.down.Store(true)
				}
				time.Sleep(time.Minute)
				synctest.Wait()
				if !stopped.Load() {
					t.Fatal("fence did not return from Stop")
				}
			})
		})
	}
}

// slowAcquireStore takes two seconds to grant an acquisition.
type slowAcquireStore struct{ flakyStore }

func (s *slowAcquireStore) AcquireNode(ctx context.Context, n cluster.UniqueAddress, ttl time.Duration) error {
	time.Sleep(2 * time.Second)
	return s.Store.AcquireNode(ctx, n, ttl)
}

// HoldNode counts the fence from before its acquisition was sent, not from
// the answer: with a store that answers 2 s late and then fails every
// renewal, the fence comes Length − Margin after the call began.
func TestHoldNodeFencesFromBeforeTheAcquisition(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &slowAcquireStore{flakyStore{Store: lease.NewMemoryStore(nil)}}
		store.down.Store(true)
		var f fenceRecorder
		called := time.Now()
		h, err := lease.HoldNode(context.Background(), store, node, timing, f.fence)
		if err != nil {
			t.Fatal(err)
		}
		defer h.Stop()
		time.Sleep(time.Minute)
		synctest.Wait()
		at, _, n := f.get()
		if want := called.Add(timing.Length - timing.Margin); n != 1 || !at.Equal(want) {
			t.Fatalf("fenced %d times, %v after the call, want once at %v", n, at.Sub(called), want.Sub(called))
		}
	})
}

// An acquisition the store refuses is the store's error, and no Holder.
func TestHoldNodeAcquisitionRefused(t *testing.T) {
	store := lease.NewMemoryStore(nil)
	if err := store.DownNode(context.Background(), node); err != nil {
		t.Fatal(err)
	}
	h, err := lease.HoldNode(context.Background(), store, node, timing, func(error) {})
	if !errors.Is(err, lease.ErrNodeDown) || h != nil {
		t.Fatalf("HoldNode of a downed incarnation: %v, %v; want ErrNodeDown and no Holder", h, err)
	}
}

// A renewal in flight when the lease fences: Stop, documented to wait for
// a renewal in flight, must not return while that store call still runs.
func TestStopAfterFenceWaitsForTheRenewalInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var running atomic.Int32
		renew := func(ctx context.Context) error {
			running.Add(1)
			defer running.Add(-1)
			<-ctx.Done()
			time.Sleep(time.Second) // a store call that returns a while after its context ends
			return ctx.Err()
		}
		fenced := make(chan struct{})
		h, err := lease.Hold(lease.Timing{Length: 9 * time.Second, RenewEvery: 3 * time.Second, Margin: time.Second},
			time.Now(), renew, func(error) { close(fenced) })
		if err != nil {
			t.Fatal(err)
		}
		<-fenced
		h.Stop()
		if n := running.Load(); n != 0 {
			t.Fatalf("%d renewals still running after Stop", n)
		}
	})
}
