package sharding_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/sharding"
	"github.com/shoal-dev/shoal/sharding/internal/protocol"
)

// The protocol cases the simulator found, each a deterministic test that
// failed before its fix.

// gate is a channel that a test closes once, on any path out of it, so
// that an entity held in its handler never outlives the synctest bubble.
func gate(t *testing.T) (ch chan struct{}, open func()) {
	ch = make(chan struct{})
	var once sync.Once
	open = func() { once.Do(func() { close(ch) }) }
	t.Cleanup(open)
	return ch, open
}

// regionStopped reports whether node sent RegionStopped.
func regionStopped(l *sentLog, node string) bool {
	return slices.ContainsFunc(l.all(), func(m sentMsg) bool {
		rs, ok := m.msg.(protocol.RegionStopped)
		return ok && rs.Region == addr(node)
	})
}

// byPrefix puts each entity in the shard named by its id's first letter.
func byPrefix(id string) string { return id[:1] }

// stuckOnB starts nodes a and b, with entities in shards named by their
// first letter, and holds entity e (of shard e, on b) in its handler until
// unstick. With record the sim records the protocol messages sent.
func stuckOnB(t *testing.T, settings sharding.Settings, record bool) (s *sim, a, b *node, unstick func()) {
	t.Helper()
	settings.ShardID = byPrefix
	s = newSim(t, settings)
	if record {
		s.sent = &sentLog{}
	}
	a = s.join("a", "host")
	b = s.join("b", "host")
	a.tell(t, "w", note{Text: "0"}) // shard w goes to a, so shard e goes to b
	synctest.Wait()
	stuck, unstick := gate(t)
	b.tell(t, "e", hold{until: stuck})
	synctest.Wait()
	if _, ok := b.region.State().Shards["e"]; !ok {
		t.Fatalf("b hosts %v, want shard e", b.region.State().Shards)
	}
	return s, a, b, unstick
}

// A Shutdown whose deadline passes while an entity is stuck in its handler
// returns at its deadline; the region reports RegionStopped, and the node
// leaves, only once that entity has stopped: until then the coordinator
// must not start its shard elsewhere.
func TestShutdownWithAStuckEntityHonoursItsDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, a, b, unstick := stuckOnB(t, sharding.Settings{}, true)

		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- b.sh.Shutdown(ctx) }()
		time.Sleep(2 * time.Second)
		synctest.Wait()
		select {
		case err := <-done:
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Shutdown: %v, want DeadlineExceeded", err)
			}
		default:
			t.Fatal("Shutdown still running 1 s past its deadline")
		}
		if regionStopped(s.sent, "b") {
			t.Fatal("b reported RegionStopped while its entity still ran")
		}
		if _, ok := a.region.State().Shards["e"]; ok {
			t.Fatal("a hosts shard e while b's entity still runs")
		}

		unstick()
		synctest.Wait()
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if !regionStopped(s.sent, "b") {
			t.Fatal("b never reported RegionStopped after its entity stopped")
		}
		a.tell(t, "e", note{Text: "1"})
		if got := a.ask(t, "e"); !slices.Equal(got, []string{"1"}) {
			t.Fatalf("e on a got %v", got)
		}
	})
}

// Terminate stops entities at once; one stuck in its handler cannot be
// stopped, and Terminate returns after StopTimeout rather than hang.
func TestTerminateWithAStuckEntityReturns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, sharding.Settings{StopTimeout: 10 * time.Second})
		a := s.join("a", "host")
		stuck, _ := gate(t)
		a.tell(t, "e", hold{until: stuck})
		a.tell(t, "f", note{Text: "1"})
		synctest.Wait()
		done := make(chan struct{})
		go func() { a.sh.Terminate(); close(done) }()
		time.Sleep(11 * time.Second)
		synctest.Wait()
		select {
		case <-done:
		default:
			t.Fatal("Terminate still waiting for an entity stuck in its handler")
		}
		for shard, ids := range a.region.State().Shards {
			if len(ids) > 0 {
				t.Fatalf("shard %s still lists %v after Terminate", shard, ids)
			}
		}
	})
}

// A message forwarded to another node whose entity's mailbox is full is
// refused there; the sender's Tell had returned nil, so the refusal is a
// dead letter, counted and logged, never a silent loss. The same Tell on
// the entity's own node fails with ErrMailboxFull.
func TestForwardedMessageRefusedByAFullMailboxIsADeadLetter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, a, b, unstick := stuckOnB(t, sharding.Settings{MailboxCapacity: 1}, false)
		a.tell(t, "e", note{Text: "1"}) // fills e's mailbox
		a.tell(t, "e", note{Text: "2"}) // refused by it, on b
		synctest.Wait()
		if err := b.region.EntityRefFor("e").Tell(note{Text: "3"}); !errors.Is(err, entity.ErrMailboxFull) {
			t.Fatalf("local tell to a full mailbox: %v, want ErrMailboxFull", err)
		}
		unstick()
		synctest.Wait()
		dead := b.sys.Stats().DeadLetters
		if got := s.log.notes("e"); !slices.Equal(got, []string{"1"}) || dead != 1 {
			t.Fatalf("e got %v with %d dead letters on b; want [1] and 1 dead letter (note 2)", got, dead)
		}
	})
}

// A store write that fails at the end of a hand-off is retried: the
// coordinator neither stops nor loses the messages the region held for
// the shard during the hand-off.
func TestStoreFailureAtTheEndOfAHandOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &faultyCoordinatorStore{MemoryCoordinatorStore: sharding.NewMemoryCoordinatorStore(), failDeallocates: 2}
		_, n := singleNode(t, sharding.Config{CoordinatorStore: store},
			sharding.Settings{ShardID: byPrefix, HandOffTimeout: 5 * time.Second})
		n.tell(t, "e", note{Text: "1"})
		n.tell(t, "e", slowStop{}) // e holds its stop message: the hand-off waits for its timeout
		synctest.Wait()
		n.region.StopShards("e")
		synctest.Wait()
		n.tell(t, "e", note{Text: "2"}) // held by the region during the hand-off
		time.Sleep(time.Minute)
		synctest.Wait()
		if got := n.ask(t, "e"); !slices.Equal(got, []string{"1", "2"}) {
			t.Fatalf("e got %v, want [1 2]", got)
		}
		if store.acquires != 1 {
			t.Fatalf("%d coordinators acquired the store, want 1: a failed write stopped it", store.acquires)
		}
	})
}

// A home that cannot be reached is unlearned: the Tell that found it out
// fails with ErrUnreachable, later ones wait while the region asks the
// coordinator again, and they reach the shard's next home once the
// membership drops the dead node. (Tell used to fail for good.)
func TestUnreachableHomeIsUnlearned(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, sharding.Settings{ShardID: byPrefix})
		a := s.join("a", "host")
		b := s.join("b", "host")
		a.tell(t, "x1", note{Text: "0"}) // shard x: a, so shard y: b
		synctest.Wait()
		a.tell(t, "y1", note{Text: "0"})
		synctest.Wait()
		if sharding.HomesOf(a.region)["y"] != addr("b") {
			t.Fatalf("homes %v", sharding.HomesOf(a.region))
		}
		b.crash()
		if err := a.region.EntityRefFor("y1").Tell(note{Text: "lost"}); !errors.Is(err, sharding.ErrUnreachable) {
			t.Fatalf("first tell to the crashed node: %v, want ErrUnreachable", err)
		}
		time.Sleep(5 * time.Second) // retry ticks ask again, and are answered b
		synctest.Wait()
		for i := 1; i <= 3; i++ {
			a.tell(t, "y1", note{Text: fmt.Sprint(i)})
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		s.cluster.Remove("b") // the failure detector's verdict
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if got := a.ask(t, "y1"); !slices.Equal(got, []string{"0", "1", "2", "3"}) {
			t.Fatalf("y1 got %v, want [0 1 2 3]: 0 from b's log, then what waited for the new home", got)
		}
	})
}
