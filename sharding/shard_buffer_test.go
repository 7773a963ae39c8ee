package sharding_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/sharding"
)

// The shard holds a passivating entity's mail only up to what the next
// incarnation's mailbox is sure to take (here MailboxCapacity); past it the
// sender's Tell fails with ErrBufferFull, and every message it accepted
// reaches the next incarnation, in order.
func TestStoppingEntityBufferIsBoundedAndHandedOverWhole(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, sharding.Settings{MailboxCapacity: 2})
		n := s.join("a", "host")
		n.tell(t, "e", note{Text: "0"})
		n.tell(t, "e", passivateGated{}) // e holds its stop message behind the gate
		synctest.Wait()
		n.tell(t, "e", note{Text: "1"})
		n.tell(t, "e", note{Text: "2"})
		err := n.region.EntityRefFor("e").Tell(note{Text: "3"})
		if !errors.Is(err, sharding.ErrBufferFull) {
			t.Errorf("3rd message for a passivating entity with MailboxCapacity 2: %v, want ErrBufferFull", err)
		}
		close(s.log.gate)
		synctest.Wait()
		if got := s.log.notes("e"); !slices.Equal(got, notes(0, 2)) {
			t.Fatalf("notes %v, want 0..2", got)
		}
		if c := s.log.startCount("e"); c != 2 {
			t.Fatalf("%d incarnations, want 2", c)
		}
		if d := n.sys.Stats().DeadLetters; d != 0 {
			t.Fatalf("%d dead letters, want none", d)
		}
		_ = n.sh.Shutdown(context.Background())
	})
}

// A held message the new incarnation refuses all the same (here: it does
// not serialize, which only the incarnation's Tell checks) is a counted
// dead letter, not a silent loss, and the messages after it still arrive.
func TestHeldMessageRefusedByTheNewIncarnationIsADeadLetter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := codec.NewRegistry()
		codec.MustRegister[note](reg, "note")
		codec.MustRegister[get](reg, "get")
		codec.MustRegister[stop](reg, "stop")
		codec.MustRegister[passivateGated](reg, "passivateGated")
		sys, err := entity.NewSystem(entity.Config{NodeID: "a", Codec: reg, ForceSerialization: true, Logger: quiet()})
		if err != nil {
			t.Fatal(err)
		}
		sh, err := sharding.New(sys, sharding.Config{})
		if err != nil {
			t.Fatal(err)
		}
		defer sh.Terminate()
		log := newJournal()
		r, err := sharding.Init(sh, sharding.Entity[msg]{Key: key, Create: log.create("a"), StopMessage: stop{}})
		if err != nil {
			t.Fatal(err)
		}
		n := &node{name: "a", sys: sys, sh: sh, region: r}
		n.tell(t, "e", note{Text: "0"})
		n.tell(t, "e", passivateGated{})
		synctest.Wait()
		n.tell(t, "e", passivate{}) // unregistered: held, then refused by the new incarnation
		n.tell(t, "e", note{Text: "1"})
		before := sys.Stats().DeadLetters
		close(log.gate)
		synctest.Wait()
		if d := sys.Stats().DeadLetters - before; d != 1 {
			t.Fatalf("%d dead letters, want 1 for the refused held message", d)
		}
		if got := n.ask(t, "e"); !slices.Equal(got, []string{"0", "1"}) {
			t.Fatalf("e got %v, want 0, 1", got)
		}
	})
}

// At the hand-off timeout an entity that has not stopped is stopped by
// force once, with one warning: its own stop timeout does not fire too.
func TestHandOffTimeoutStopsAnEntityByForceOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		logs := &logBuffer{}
		s := newSim(t, sharding.Settings{NumberOfShards: 1, HandOffTimeout: 10 * time.Second})
		s.logger = slog.New(slog.NewTextHandler(logs, nil))
		a := s.join("a", "host")
		a.tell(t, "e", slowStop{}) // e stashes its stop message
		synctest.Wait()
		b := s.join("b", "host")
		synctest.Wait()
		done := make(chan error, 1)
		go func() { done <- a.sh.Shutdown(context.Background()) }()
		time.Sleep(11 * time.Second)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		var forced []string
		for _, line := range strings.Split(logs.String(), "\n") {
			if strings.Contains(line, "by force") && strings.Contains(line, "entity_id=e") {
				forced = append(forced, line)
			}
		}
		if len(forced) != 1 {
			t.Fatalf("%d force-stop warnings for e, want 1:\n%s", len(forced), strings.Join(forced, "\n"))
		}
		b.sh.Terminate()
	})
}

// hold keeps the entity in its handler until the channel closes.
type hold struct{ until chan struct{} }

func (hold) isMsg() {}

// A Tell the entity's full mailbox refuses does not count as activity:
// the entity passivates after the idle time from its last accepted message.
func TestRefusedTellDoesNotDelayIdlePassivation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, sharding.Settings{PassivateIdleAfter: 10 * time.Second, MailboxCapacity: 2})
		n := s.join("a", "host")
		gate := make(chan struct{})
		n.tell(t, "e", note{Text: "0"})
		synctest.Wait()
		n.tell(t, "e", hold{until: gate})
		synctest.Wait() // e waits in hold's handler
		n.tell(t, "e", note{Text: "1"})
		n.tell(t, "e", note{Text: "2"}) // the mailbox is full now
		for range 8 {
			time.Sleep(time.Second)
			if err := n.region.EntityRefFor("e").Tell(note{Text: "refused"}); !errors.Is(err, entity.ErrMailboxFull) {
				t.Errorf("tell to a full mailbox: %v, want ErrMailboxFull", err)
			}
		}
		close(gate)
		synctest.Wait()
		// Last accepted message at 0 s: passivated by 10 s + one check
		// interval (2 s). Counting the refused tells would keep it to ~18 s.
		time.Sleep(6 * time.Second)
		synctest.Wait()
		if resident(n, "e") {
			t.Fatalf("e still resident 14 s after its last accepted message; idle time is 10 s")
		}
		if got := s.log.notes("e"); !slices.Equal(got, notes(0, 2)) {
			t.Fatalf("e got %v, want 0..2", got)
		}
		_ = n.sh.Shutdown(context.Background())
	})
}

// Messages the region accepted while the shard had no home, and that the
// entity then refuses when they are drained into it (its mailbox is full),
// are counted dead letters: each is either delivered or counted.
func TestDrainedMessageRefusedByTheEntityIsADeadLetter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, sharding.Settings{MailboxCapacity: 1})
		store := &heldUpdates{MemoryCoordinatorStore: s.store, release: make(chan struct{})}
		s.coordinatorStore = store
		n := s.join("a", "host")
		gate := make(chan struct{})
		// The shard gets no home before its allocation is stored, which
		// waits for store.release: the region buffers all three.
		n.tell(t, "e", hold{until: gate})
		n.tell(t, "e", note{Text: "1"})
		n.tell(t, "e", note{Text: "2"})
		close(store.release)
		synctest.Wait() // drained into e, which holds one message at most while in hold
		close(gate)
		synctest.Wait()
		dead := n.sys.Stats().DeadLetters
		if dead == 0 {
			t.Errorf("no dead letter: a drained message refused by the full mailbox was lost uncounted")
		}
		if got := uint64(len(s.log.notes("e"))) + dead; got != 2 {
			t.Errorf("%d notes delivered + %d dead letters, want the 2 accepted", len(s.log.notes("e")), dead)
		}
		_ = n.sh.Shutdown(context.Background())
	})
}

// heldUpdates is a coordinator store whose writes wait until release
// closes (or their context ends).
type heldUpdates struct {
	*sharding.MemoryCoordinatorStore
	release chan struct{}
}

func (s *heldUpdates) Update(ctx context.Context, typeName string, epoch uint64, changes []sharding.AllocationChange) error {
	select {
	case <-s.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return s.MemoryCoordinatorStore.Update(ctx, typeName, epoch, changes)
}
