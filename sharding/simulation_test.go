package sharding_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shoal-dev/shoal/sharding"
	"github.com/shoal-dev/shoal/sharding/internal/protocol"
)

// These scenarios run several regions in one process over the in-process
// transport, in a synctest bubble: time advances only when every goroutine
// waits, so rebalance rounds and hand-off timeouts are deterministic.

// traffic sends numbered notes to entities through given nodes and
// remembers what it sent, to check later that each entity got every note
// and, per sender, in send order (the guarantee: one sender, one region).
type traffic struct {
	sent map[[2]string]int // (entity, via) → notes sent
}

func newTraffic() *traffic { return &traffic{sent: map[[2]string]int{}} }

func (tr *traffic) round(t *testing.T, via *node, ids []string) {
	t.Helper()
	for _, id := range ids {
		k := [2]string{id, via.name}
		tr.sent[k]++
		via.tell(t, id, note{Text: fmt.Sprintf("%s:%d", via.name, tr.sent[k])})
	}
}

func (tr *traffic) check(t *testing.T, s *sim) {
	t.Helper()
	for k, n := range tr.sent {
		id, via := k[0], k[1]
		var got []string
		for _, text := range s.log.notes(id) {
			if v, seq, _ := strings.Cut(text, ":"); v == via {
				got = append(got, seq)
			}
		}
		if !slices.Equal(got, notes(1, n)) {
			t.Fatalf("%s received from %s %v, want 1..%d in order", id, via, got, n)
		}
	}
}

func entityIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("entity-%03d", i)
	}
	return ids
}

func shardCounts(s *sim) map[string]int {
	out := map[string]int{}
	for name, n := range s.nodes {
		out[name] = len(n.region.State().Shards)
	}
	return out
}

func TestRebalanceWhenARegionJoins(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, sharding.Settings{NumberOfShards: 10, RebalanceInterval: 10 * time.Second})
		a := s.join("a", "host")
		ids := entityIDs(50)
		tr := newTraffic()
		tr.round(t, a, ids)
		synctest.Wait()
		if c := shardCounts(s); c["a"] != 10 {
			t.Fatalf("before join: %v", c)
		}
		b := s.join("b", "host")
		for range 12 { // two minutes of rebalance rounds with traffic through both nodes
			time.Sleep(10 * time.Second)
			tr.round(t, a, ids)
			tr.round(t, b, ids)
			synctest.Wait()
		}
		if c := shardCounts(s); c["a"] != 5 || c["b"] != 5 {
			t.Fatalf("after rebalance: %v, want 5 and 5", c)
		}
		tr.check(t, s)
		// Every region knows every home (pushed on allocation).
		if ha, hb := sharding.HomesOf(a.region), sharding.HomesOf(b.region); !maps.Equal(ha, hb) || len(ha) != 10 {
			t.Fatalf("homes differ: a %v, b %v", ha, hb)
		}
		_ = b.sh.Shutdown(context.Background())
		_ = a.sh.Shutdown(context.Background())
	})
}

func TestGracefulLeaveOfARegion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, sharding.Settings{NumberOfShards: 12})
		a := s.join("a", "host")
		b := s.join("b", "host")
		c := s.join("c", "host")
		synctest.Wait() // all three registered
		ids := entityIDs(60)
		tr := newTraffic()
		// Send through each node so that allocations spread over all three.
		for _, n := range []*node{c, b, a} {
			tr.round(t, n, ids)
		}
		synctest.Wait()
		if cs := shardCounts(s); cs["c"] == 0 {
			t.Fatalf("c hosts nothing to hand off: %v", cs)
		}
		done := make(chan error, 1)
		go func() { done <- c.sh.Shutdown(context.Background()) }()
		tr.round(t, a, ids) // traffic during the hand-off
		tr.round(t, b, ids)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		delete(s.nodes, "c")
		synctest.Wait()
		tr.round(t, a, ids)
		synctest.Wait()
		cs := shardCounts(s)
		if cs["a"]+cs["b"] != 12 {
			t.Fatalf("after c left: %v", cs)
		}
		if s.log.stopsByNode["c"] == 0 {
			t.Fatal("entities on c never received their stop message")
		}
		tr.check(t, s)
		_ = b.sh.Shutdown(context.Background())
		_ = a.sh.Shutdown(context.Background())
	})
}

func TestGracefulLeaveOfTheCoordinatorsRegion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, sharding.Settings{NumberOfShards: 12})
		s.sent = &sentLog{}
		a := s.join("a", "host") // oldest: hosts the coordinator
		b := s.join("b", "host")
		c := s.join("c", "host")
		synctest.Wait() // all three registered: the shards spread over all three
		ids := entityIDs(60)
		tr := newTraffic()
		for _, n := range []*node{a, b, c} {
			tr.round(t, n, ids)
		}
		synctest.Wait()
		onA := slices.Collect(maps.Keys(a.region.State().Shards))
		if len(onA) == 0 {
			t.Fatalf("a hosts no shard to hand off: %v", shardCounts(s))
		}
		done := make(chan error, 1)
		go func() { done <- a.sh.Shutdown(context.Background()) }()
		tr.round(t, b, ids) // traffic during the leave
		tr.round(t, c, ids)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		delete(s.nodes, "a")
		synctest.Wait()
		// Shards first: a's coordinator (epoch 1) re-homed every shard of a
		// on b or c and told both, before anyone spoke to the next
		// coordinator (on b); a's regions reported to a's coordinator only.
		oldCo := sharding.Address{Node: addr("a"), Type: "Test", Coordinator: true}
		newCo := sharding.Address{Node: addr("b"), Type: "Test", Coordinator: true}
		firstToNew, pushed := -1, map[[2]string]int{}
		for i, m := range s.sent.all() {
			if m.to == newCo && firstToNew < 0 {
				firstToNew = i
			}
			if h, ok := m.msg.(protocol.ShardHome); ok && h.Epoch == 1 && h.Region != addr("a") && !h.Region.IsZero() {
				pushed[[2]string{h.Shard, addrName(m.to.Node)}] = i
			}
			if st, ok := m.msg.(protocol.ShardStopped); ok && st.Region == addr("a") && m.to != oldCo {
				t.Fatalf("a reported shard %s stopped to %v, not to its own coordinator", st.Shard, m.to)
			}
		}
		if firstToNew < 0 {
			t.Fatal("nobody registered with the new coordinator")
		}
		for _, shard := range onA {
			for _, to := range []string{"b", "c"} {
				i, ok := pushed[[2]string{shard, to}]
				if !ok || i > firstToNew {
					t.Fatalf("shard %s of a: new home pushed to %s by a's coordinator at %d (found %v), first message to the new coordinator at %d",
						shard, to, i, ok, firstToNew)
				}
			}
		}
		// b is now the oldest; its coordinator took over from the store.
		tr.round(t, b, ids)
		tr.round(t, c, ids)
		// New entities in shards never allocated still get a home.
		fresh := []string{"fresh-1", "fresh-2", "fresh-3"}
		tr.round(t, c, fresh)
		synctest.Wait()
		cs := shardCounts(s)
		if cs["b"]+cs["c"] != 12 {
			t.Fatalf("after a left: %v", cs)
		}
		tr.check(t, s)
		if hb, hc := sharding.HomesOf(b.region), sharding.HomesOf(c.region); !maps.Equal(hb, hc) {
			t.Fatalf("homes differ: b %v, c %v", hb, hc)
		}
		_ = c.sh.Shutdown(context.Background())
		_ = b.sh.Shutdown(context.Background())
	})
}

func TestHandOffWaitsForSlowEntityThenDeliversBufferedInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, sharding.Settings{NumberOfShards: 1, HandOffTimeout: 20 * time.Second})
		a := s.join("a", "host")
		a.tell(t, "slow", note{Text: "1"})
		a.tell(t, "slow", slowStop{}) // it will stash its stop message
		synctest.Wait()
		b := s.join("b", "host")
		synctest.Wait()
		done := make(chan error, 1)
		go func() { done <- a.sh.Shutdown(context.Background()) }()
		synctest.Wait()
		for i := 2; i <= 5; i++ { // buffered while the hand-off runs
			b.tell(t, "slow", note{Text: fmt.Sprint(i)})
		}
		synctest.Wait()
		select {
		case <-done:
			t.Fatal("hand-off finished although the entity holds its stop message")
		default:
		}
		time.Sleep(20 * time.Second) // hand-off timeout: stopped by force
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if got := b.ask(t, "slow"); !slices.Equal(got, notes(1, 5)) {
			t.Fatalf("slow got %v, want 1..5 (buffered messages delivered at the new home, in order)", got)
		}
		_ = b.sh.Shutdown(context.Background())
	})
}

// Messages that the old home holds for a stopping entity when its shard is
// handed off were sent before anything other regions buffer during the
// hand-off; the new home gets them first. Here the sender is on the node
// that takes the shard over after a graceful leave.
func TestHandOffKeepsOrderOfMessagesHeldForAStoppingEntity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, sharding.Settings{NumberOfShards: 1})
		a := s.join("a", "host")
		a.tell(t, "e", slowStop{}) // e will hold its stop message
		synctest.Wait()
		b := s.join("b", "host")
		synctest.Wait()
		b.tell(t, "e", passivate{}) // e is passivating, and slow to stop
		synctest.Wait()
		b.tell(t, "e", note{Text: "1"}) // held by a's shard for e's next incarnation
		b.tell(t, "e", note{Text: "2"})
		synctest.Wait()
		done := make(chan error, 1)
		go func() { done <- a.sh.Shutdown(context.Background()) }()
		synctest.Wait()
		b.tell(t, "e", note{Text: "3"}) // buffered by b during the hand-off
		b.tell(t, "e", note{Text: "4"})
		time.Sleep(time.Minute) // the stop timeout stops e by force
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if got := b.ask(t, "e"); !slices.Equal(got, notes(1, 4)) {
			t.Fatalf("e got %v, want 1..4 in send order", got)
		}
		_ = b.sh.Shutdown(context.Background())
	})
}

// The same on a rebalance: the shard moves to the sender's own node, which
// must not deliver what it buffered before what the old home held.
func TestRebalanceKeepsOrderOfMessagesHeldForAStoppingEntity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, sharding.Settings{NumberOfShards: 2, RebalanceInterval: 10 * time.Second})
		a := s.join("a", "host")
		e, other := "entity-000", ""
		for _, id := range entityIDs(10) {
			if a.region.ShardID(id) != a.region.ShardID(e) {
				other = id
				break
			}
		}
		a.tell(t, e, slowStop{}) // e's shard is allocated first: rebalance moves it
		a.tell(t, e, passivate{})
		synctest.Wait()
		a.tell(t, other, note{Text: "x"})
		b := s.join("b", "host")
		synctest.Wait()
		b.tell(t, e, note{Text: "1"}) // forwarded to a, held for e's next incarnation
		b.tell(t, e, note{Text: "2"})
		time.Sleep(15 * time.Second) // the rebalance round has begun the hand-off
		synctest.Wait()
		if _, ok := b.region.State().Shards[b.region.ShardID(e)]; ok {
			t.Fatal("e's shard moved before the test could send during its hand-off")
		}
		b.tell(t, e, note{Text: "3"}) // buffered by b during the hand-off
		b.tell(t, e, note{Text: "4"})
		time.Sleep(time.Minute) // the stop timeout ends the hand-off
		synctest.Wait()
		if _, ok := b.region.State().Shards[b.region.ShardID(e)]; !ok {
			t.Fatalf("e's shard did not move to b: a %v, b %v", a.region.State(), b.region.State())
		}
		if got := b.ask(t, e); !slices.Equal(got, notes(1, 4)) {
			t.Fatalf("e got %v, want 1..4 in send order", got)
		}
		_ = b.sh.Shutdown(context.Background())
		_ = a.sh.Shutdown(context.Background())
	})
}
