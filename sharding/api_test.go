package sharding_test

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shoal-dev/shoal/sharding"
)

func TestAskThroughShardingAcrossNodes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, sharding.Settings{NumberOfShards: 4})
		a := s.join("a", "host")
		b := s.join("b", "host")
		synctest.Wait()
		ids := entityIDs(20)
		for _, id := range ids {
			a.tell(t, id, note{Text: "x"})
		}
		synctest.Wait()
		// Ask every entity through b: some live on a, and their replies
		// cross from a's runtime to b's.
		for _, id := range ids {
			if got := b.ask(t, id); !slices.Equal(got, []string{"x"}) {
				t.Fatalf("%s: %v", id, got)
			}
		}
		if ca, cb := len(a.region.State().Shards), len(b.region.State().Shards); ca == 0 || cb == 0 {
			t.Fatalf("not spread over both nodes: a %d, b %d", ca, cb)
		}
		_ = b.sh.Shutdown(context.Background())
		_ = a.sh.Shutdown(context.Background())
	})
}

func TestEnvelopeAndStartEntity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, sharding.Settings{})
		n := s.join("a", "host")
		if err := n.region.Tell(sharding.Envelope[msg]{EntityID: "env", Message: note{Text: "by envelope"}}); err != nil {
			t.Fatal(err)
		}
		if err := n.region.StartEntity("started"); err != nil {
			t.Fatal(err)
		}
		if err := n.region.StartEntity("started"); err != nil { // already running: no second start
			t.Fatal(err)
		}
		synctest.Wait()
		if got := s.log.notes("env"); !slices.Equal(got, []string{"by envelope"}) {
			t.Fatalf("env: %v", got)
		}
		if c := s.log.startCount("started"); c != 1 {
			t.Fatalf("started %d times", c)
		}
		_ = n.sh.Shutdown(context.Background())
	})
}

func TestStopShardsStopsEntitiesAndRestartsOnNextMessage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, sharding.Settings{})
		n := s.join("a", "host")
		n.tell(t, "e", note{Text: "1"})
		synctest.Wait()
		shard := n.region.ShardID("e")
		n.region.StopShards(shard)
		synctest.Wait()
		if _, ok := n.region.State().Shards[shard]; ok {
			t.Fatalf("shard %s still hosted after StopShards", shard)
		}
		if s.log.stopsByNode["a"] != 1 {
			t.Fatalf("entity did not get its stop message: %v", s.log.stopsByNode)
		}
		n.tell(t, "e", note{Text: "2"})
		synctest.Wait()
		if got := s.log.notes("e"); !slices.Equal(got, []string{"1", "2"}) || s.log.startCount("e") != 2 {
			t.Fatalf("notes %v, starts %d", got, s.log.startCount("e"))
		}
		_ = n.sh.Shutdown(context.Background())
	})
}

func TestEntityThatStopsItself(t *testing.T) {
	for _, remember := range []bool{false, true} {
		t.Run(map[bool]string{false: "forgotten", true: "remembered"}[remember], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newSim(t, sharding.Settings{RememberEntities: remember})
				n := s.join("a", "host")
				n.tell(t, "e", note{Text: "1"})
				n.tell(t, "e", stop{}) // stops without passivating
				synctest.Wait()
				time.Sleep(time.Minute) // past any restart back-off
				synctest.Wait()
				starts := s.log.startCount("e")
				if remember && starts != 2 {
					t.Fatalf("remembered entity started %d times, want 2 (restarted after back-off)", starts)
				}
				if !remember && (starts != 1 || len(n.region.State().Shards[n.region.ShardID("e")]) != 0) {
					t.Fatalf("forgotten entity: %d starts, state %v", starts, n.region.State())
				}
				_ = n.sh.Shutdown(context.Background())
			})
		})
	}
}

func TestProxyRegionRoutesButHostsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, sharding.Settings{NumberOfShards: 8})
		host := s.join("host", "host")
		proxy := s.join("proxy") // no "host" role
		synctest.Wait()
		for _, id := range entityIDs(16) {
			proxy.tell(t, id, note{Text: "via proxy"})
		}
		synctest.Wait()
		if got := len(proxy.region.State().Shards); got != 0 {
			t.Fatalf("proxy hosts %d shards", got)
		}
		for _, id := range entityIDs(16) {
			if got := s.log.notes(id); !slices.Equal(got, []string{"via proxy"}) {
				t.Fatalf("%s: %v", id, got)
			}
		}
		_ = proxy.sh.Shutdown(context.Background())
		_ = host.sh.Shutdown(context.Background())
	})
}

// Akka's StartEntitySpec: StartEntity for an entity that is passivating
// starts it again once it has stopped; for one waiting out a restart
// back-off it starts it at once.
func TestStartEntityBringsBackAnEntityOnItsWayOut(t *testing.T) {
	t.Run("passivating", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := newSim(t, sharding.Settings{})
			n := s.join("a", "host")
			n.tell(t, "e", passivateGated{})
			synctest.Wait()
			if err := n.region.StartEntity("e"); err != nil {
				t.Fatal(err)
			}
			close(s.log.gate)
			synctest.Wait()
			if c := s.log.startCount("e"); c != 2 || !resident(n, "e") {
				t.Fatalf("%d starts, resident %v; want started again", c, resident(n, "e"))
			}
			_ = n.sh.Shutdown(context.Background())
		})
	})
	t.Run("backing off", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := newSim(t, sharding.Settings{RestartBackoffMin: time.Minute, RestartBackoffMax: time.Hour, PassivateIdleAfter: -1})
			n := s.join("a", "host")
			n.tell(t, "e", crash{})
			synctest.Wait()
			if err := n.region.StartEntity("e"); err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
			if c := s.log.startCount("e"); c != 2 {
				t.Fatalf("%d starts right after StartEntity, want 2", c)
			}
			time.Sleep(2 * time.Hour) // the cancelled back-off starts nothing more
			synctest.Wait()
			if c := s.log.startCount("e"); c != 2 || !resident(n, "e") {
				t.Fatalf("%d starts, resident %v", c, resident(n, "e"))
			}
			_ = n.sh.Shutdown(context.Background())
		})
	})
}
