package sharding_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/shoal-dev/shoal/cluster"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shoal-dev/shoal/sharding"
)

// fakeLeases are node leases the test expires by hand.
type fakeLeases struct {
	mu      sync.Mutex
	downs   []string
	expired map[string]bool
	failing bool // every call fails
}

var errLeaseStoreDown = errors.New("lease store down")

func (f *fakeLeases) setFailing(failing bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failing = failing
}

func (f *fakeLeases) DownNode(_ context.Context, a cluster.UniqueAddress) error {
	node := addrName(a)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failing {
		return errLeaseStoreDown
	}
	f.downs = append(f.downs, node)
	return nil
}

func (f *fakeLeases) NodeLeaseExpired(_ context.Context, a cluster.UniqueAddress) (bool, error) {
	node := addrName(a)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failing {
		return false, errLeaseStoreDown
	}
	return f.expired[node], nil
}

func (f *fakeLeases) expire(node string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.expired[node] = true
}

func (f *fakeLeases) downed() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.downs)
}

// With node leases, the coordinator downs a member that fails and moves
// its shards only once the member's lease has expired: never while the
// failed node may still run them. (Without leases a Down member's shards
// move at once, which is how this fails on code that ignores the leases.)
func TestFailedNodeShardsMoveOnlyAfterItsLeaseExpired(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, sharding.Settings{})
		leases := &fakeLeases{expired: map[string]bool{}}
		s.nodeLeases = leases
		a := s.join("a", "host")
		b := s.join("b", "host")
		synctest.Wait()
		var id, shard string
		for i := range 200 {
			id = fmt.Sprint("e", i)
			a.tell(t, id, note{Text: "1"})
			synctest.Wait()
			shard = a.region.ShardID(id)
			if _, onB := b.region.State().Shards[shard]; onB {
				break
			}
		}
		if _, onB := b.region.State().Shards[shard]; !onB {
			t.Fatal("no entity landed on b")
		}
		b.sh.Terminate()
		s.cluster.SetStatus("b", cluster.Down)
		time.Sleep(time.Minute)
		synctest.Wait()
		if !slices.Contains(leases.downed(), "b") {
			t.Fatalf("downed %v, want b", leases.downed())
		}
		_ = a.region.EntityRefFor(id).Tell(note{Text: "2"}) // b is gone: may fail
		time.Sleep(time.Minute)
		synctest.Wait()
		if _, onA := a.region.State().Shards[shard]; onA {
			t.Fatalf("shard %s of the failed node started on a before its lease expired", shard)
		}
		leases.expire("b")
		time.Sleep(5 * time.Second)
		synctest.Wait()
		a.tell(t, id, note{Text: "3"})
		synctest.Wait()
		if _, onA := a.region.State().Shards[shard]; !onA {
			t.Fatalf("shard %s not on a after the failed node's lease expired: a hosts %v", shard, a.region.State().Shards)
		}
		if got := s.log.notes(id); !slices.Contains(got, "3") || slices.Contains(got, "2") {
			t.Fatalf("%s got %v, want 1 and 3 (2 went to the failed node)", id, got)
		}
		_ = a.sh.Shutdown(context.Background())
	})
}

// While the node-lease store is down the coordinator retries its downing
// calls every RetryInterval/4: the first failure is a warning, the rest of
// the run are not (they flooded the log, one line per member and retry),
// and the member is downed once the store answers again.
func TestDowningStoreOutageWarnsOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		logs := &logBuffer{}
		s := newSim(t, sharding.Settings{})
		s.logger = slog.New(slog.NewTextHandler(logs, nil)) // Info and up
		leases := &fakeLeases{expired: map[string]bool{}}
		s.nodeLeases = leases
		a := s.join("a", "host")
		b := s.join("b", "host")
		synctest.Wait()
		leases.setFailing(true)
		b.sh.Terminate()
		s.cluster.SetStatus("b", cluster.Down)
		time.Sleep(time.Minute)
		synctest.Wait()
		if n := strings.Count(logs.String(), "downing store call failed"); n != 1 {
			t.Errorf("%d warnings for a minute of failing downing calls, want 1", n)
		}
		leases.setFailing(false)
		time.Sleep(time.Minute)
		synctest.Wait()
		if !slices.Contains(leases.downed(), "b") {
			t.Fatalf("downed %v after the store came back, want b", leases.downed())
		}
		if !strings.Contains(logs.String(), "downing store calls succeed again") {
			t.Errorf("no line says the downing calls succeed again")
		}
		_ = a.sh.Shutdown(context.Background())
	})
}
