package sharding_test

import (
	"bytes"
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shoal-dev/shoal/sharding"
)

// logBuffer collects log lines from every goroutine.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func resident(n *node, id string) bool {
	return slices.Contains(n.region.State().Shards[n.region.ShardID(id)], id)
}

// Akka's passivation spec: messages that arrive while an entity passivates
// wait in its shard and go, in order, to the next incarnation.
func TestExplicitPassivationDeliversBufferedMessagesToTheNextIncarnation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, sharding.Settings{})
		n := s.join("a", "host")
		n.tell(t, "e", note{Text: "0"})
		n.tell(t, "e", passivateGated{}) // the stop message is queued behind the gate
		synctest.Wait()
		for _, text := range notes(1, 3) {
			n.tell(t, "e", note{Text: text})
		}
		close(s.log.gate) // the old incarnation takes its stop message and stops
		synctest.Wait()
		if got := s.log.notes("e"); !slices.Equal(got, notes(0, 3)) {
			t.Fatalf("notes %v, want 0..3", got)
		}
		if c := s.log.startCount("e"); c != 2 {
			t.Fatalf("%d incarnations, want 2", c)
		}
		if s.log.stopsByNode["a"] != 1 {
			t.Fatalf("the old incarnation did not get its stop message")
		}
		_ = n.sh.Shutdown(context.Background())
	})
}

func TestPassivatingEntityIsStoppedByForceAfterTheStopTimeoutWithAWarning(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		logs := &logBuffer{}
		s := newSim(t, sharding.Settings{StopTimeout: 5 * time.Second})
		s.logger = slog.New(slog.NewTextHandler(logs, nil))
		n := s.join("a", "host")
		n.tell(t, "e", slowStop{}) // e stashes its stop message
		n.tell(t, "e", passivate{})
		time.Sleep(4 * time.Second)
		synctest.Wait()
		if !resident(n, "e") {
			t.Fatal("e stopped before the stop timeout")
		}
		if strings.Contains(logs.String(), "did not stop in time") {
			t.Fatal("warned before the stop timeout")
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if resident(n, "e") {
			t.Fatal("e still runs after the stop timeout")
		}
		if out := logs.String(); !strings.Contains(out, "level=WARN") || !strings.Contains(out, "did not stop in time") || !strings.Contains(out, "entity_id=e") {
			t.Fatalf("no warning for the forced stop:\n%s", out)
		}
		if s.log.stopsByNode["a"] != 0 || s.log.startCount("e") != 1 {
			t.Fatalf("stops %v, starts %d", s.log.stopsByNode, s.log.startCount("e"))
		}
		_ = n.sh.Shutdown(context.Background())
	})
}

// An entity is passivated only after the whole idle time, wherever its
// last message fell between two of the region's passivation checks.
func TestIdlePassivationNeverComesEarly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, sharding.Settings{PassivateIdleAfter: time.Minute})
		n := s.join("a", "host")
		time.Sleep(1900 * time.Millisecond) // just before the region's first check (every 2 s)
		n.tell(t, "e", note{Text: "x"})
		time.Sleep(59 * time.Second)
		synctest.Wait()
		if !resident(n, "e") {
			t.Fatal("passivated after 59 s idle; the idle time is 60 s")
		}
		time.Sleep(4 * time.Second)
		synctest.Wait()
		if resident(n, "e") {
			t.Fatal("not passivated after 63 s idle")
		}
		_ = n.sh.Shutdown(context.Background())
	})
}

// Only messages through sharding keep an entity from passivating: its own
// timer messages do not.
func TestIdlePassivationCountsOnlyMessagesThroughSharding(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, sharding.Settings{PassivateIdleAfter: time.Minute})
		n := s.join("a", "host")
		n.tell(t, "e", tickSelf{}) // a note to itself every 10 s
		time.Sleep(90 * time.Second)
		synctest.Wait()
		if got := s.log.notes("e"); len(got) < 5 {
			t.Fatalf("timer notes %v: the timer did not run", got)
		}
		if resident(n, "e") || s.log.stopsByNode["a"] != 1 {
			t.Fatalf("entity busy only with itself not passivated: resident %v, stops %v", resident(n, "e"), s.log.stopsByNode)
		}
		_ = n.sh.Shutdown(context.Background())
	})
}
