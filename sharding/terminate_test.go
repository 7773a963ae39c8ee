package sharding_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shoal-dev/shoal/internal/logtest"
	"github.com/shoal-dev/shoal/sharding"
)

// Terminate is a crash: entities stop without their stop message, nothing
// restarts them on the dead node, and remembered entities come back on the
// node that takes the shards over once the membership drops the dead one.
func TestTerminateStopsEverythingAtOnceLikeACrash(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, sharding.Settings{RememberEntities: true})
		a := s.join("a", "host")
		a.tell(t, "busy", slowStop{}) // would stash a stop message
		a.tell(t, "idle", note{Text: "1"})
		a.tell(t, "failing", crash{}) // backing off when the crash comes
		synctest.Wait()

		a.sh.Terminate()
		if got := s.log.stopsByNode["a"]; got != 0 {
			t.Fatalf("%d entities handled a stop message, want 0", got)
		}
		if err := a.region.EntityRefFor("idle").Tell(note{Text: "2"}); !errors.Is(err, sharding.ErrRegionStopped) {
			t.Fatalf("tell after Terminate: %v, want ErrRegionStopped", err)
		}
		time.Sleep(time.Minute) // past every back-off and recovery tick
		synctest.Wait()
		for _, id := range []string{"busy", "idle", "failing"} {
			if n := s.log.startCount(id); n != 1 {
				t.Fatalf("%s started %d times on the dead node, want 1", id, n)
			}
		}

		s.cluster.Remove("a") // the failure detector's verdict
		b := s.join("b", "host")
		b.tell(t, "idle", note{Text: "2"})
		synctest.Wait()
		if got := b.ask(t, "idle"); len(got) != 2 || got[1] != "2" {
			t.Fatalf("idle on b has %v, want [1 2]", got)
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		if n := s.log.startCount("busy"); n != 2 {
			t.Fatalf("remembered busy started %d times, want 2 (again on b)", n)
		}
		b.sh.Terminate()
	})
}

// A graceful shutdown that runs out of time stops what still runs, rather
// than leave entities running without a region.
func TestShutdownPastItsDeadlineStopsTheRest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, sharding.Settings{})
		a := s.join("a", "host")
		a.tell(t, "busy", slowStop{}) // stashes its stop message
		a.tell(t, "quick", note{Text: "1"})
		synctest.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := a.sh.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Shutdown: %v, want DeadlineExceeded", err)
		}
		synctest.Wait() // past the deadline the forced stops end after Shutdown returns
		for shard, ids := range a.region.State().Shards {
			if len(ids) > 0 {
				t.Fatalf("shard %s still runs %v after Shutdown returned", shard, ids)
			}
		}
		if got := s.log.stopsByNode["a"]; got != 1 {
			t.Fatalf("%d entities honoured the stop message, want 1 (quick)", got)
		}
	})
}

// A stop message the shard queued for an entity busy in its handler,
// left in its mailbox when Terminate stops the entity at once, is no
// dead letter: the entity stopped, as it was asked. A message another
// sent it and it never read still is one.
func TestTerminateLeavesNoStopMessageAsADeadLetter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, sharding.Settings{NumberOfShards: 1})
		a := s.join("a", "host")
		gate := make(chan struct{})
		a.tell(t, "e", hold{until: gate})
		a.tell(t, "e", note{Text: "1"})
		synctest.Wait()
		a.region.StopShards("0") // e's stop message waits behind the hold and the note
		synctest.Wait()
		terminated := make(chan struct{})
		go func() { a.sh.Terminate(); close(terminated) }()
		synctest.Wait()
		close(gate)
		<-terminated
		if d := a.sys.Stats().DeadLetters; d != 1 {
			t.Fatalf("%d dead letters, want 1: the note, not the stop message", d)
		}
	})
}

// What a shard holds for an entity that was stopping when Terminate
// stopped everything is lost, and said so: one warning with the count.
func TestTerminateWarnsOfTheMailItsShardsHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &logtest.Recorder{}
		s := newSim(t, sharding.Settings{NumberOfShards: 1})
		s.logger = slog.New(rec)
		a := s.join("a", "host")
		a.tell(t, "e", passivateGated{}) // e holds its stop message behind the gate
		synctest.Wait()
		a.tell(t, "e", note{Text: "1"}) // held by the shard for the next incarnation
		a.tell(t, "e", note{Text: "2"})
		terminated := make(chan struct{})
		go func() { a.sh.Terminate(); close(terminated) }()
		synctest.Wait()
		close(s.log.gate)
		<-terminated
		warns := rec.Containing("shard stopped with undelivered messages held for its entities")
		if len(warns) != 1 || !strings.Contains(warns[0], "count=2") {
			t.Fatalf("warnings %q, want one with count=2", warns)
		}
	})
}
