package sharding_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/sharding"
)

// Tell to a started entity skips the region's and the shard's locks (the
// fast path); everything that is not that steady state must fall back to
// the locked path. These tests stream numbered messages from several
// senders while entities passivate, shards stop and hand off, and shards
// start with no home yet, and check that every entity got every sender's
// messages, each sender's in order, with no dead letter. Run with -race.

const (
	streamSenders  = 4
	streamEntities = 40
)

// stream sends perSender numbered notes from each of streamSenders
// goroutines, spread over the entities, through n; disturb runs meanwhile,
// on its own goroutine, until the senders are done.
func stream(t *testing.T, n *node, perSender int, disturb func(stop <-chan struct{})) {
	t.Helper()
	done := make(chan struct{})
	disturbed := make(chan struct{})
	go func() {
		defer close(disturbed)
		disturb(done)
	}()
	var wg sync.WaitGroup
	errs := make(chan error, streamSenders)
	for s := range streamSenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perSender {
				id := "e" + strconv.Itoa((i+s)%streamEntities)
				text := fmt.Sprintf("%d:%d", s, i)
				if err := n.region.EntityRefFor(id).Tell(note{Text: text}); err != nil {
					errs <- fmt.Errorf("sender %d: tell %s %s: %w", s, id, text, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(done)
	<-disturbed
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// checkStreams waits until every entity has handled all that stream sent
// it (a lost message keeps it waiting until the deadline) and checks each
// sender's notes arrived in the order sent.
func checkStreams(t *testing.T, s *sim, n *node, perSender int) {
	t.Helper()
	want := make(map[string]int) // entity → notes sent to it
	for s := range streamSenders {
		for i := range perSender {
			want["e"+strconv.Itoa((i+s)%streamEntities)]++
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for id, count := range want {
		var got []string
		for {
			got = nil
			for _, text := range n.ask(t, id) {
				if strings.Contains(text, ":") {
					got = append(got, text)
				}
			}
			if len(got) >= count || time.Now().After(deadline) {
				break
			}
			time.Sleep(time.Millisecond) // polls for a condition; the deadline only bounds a failure
		}
		if len(got) != count {
			t.Fatalf("entity %s handled %d notes, want %d", id, len(got), count)
		}
		next := make(map[string]int) // sender → the index expected next
		for _, text := range got {
			sender, index, _ := strings.Cut(text, ":")
			i, _ := strconv.Atoi(index)
			if i < next[sender] {
				t.Fatalf("entity %s: sender %s's note %d after a later one (notes %v)", id, sender, i, got)
			}
			next[sender] = i + 1
		}
	}
	if d := n.sys.Stats().DeadLetters; d != 0 {
		t.Fatalf("%d dead letters, want none", d)
	}
}

// Entities passivate on their own request while the senders stream: the
// fast path finds the stopping incarnation sealed and the shard holds the
// messages for the next one.
func TestFastPathFallsBackWhileEntitiesPassivate(t *testing.T) {
	s := newSim(t, sharding.Settings{NumberOfShards: 8})
	n := s.join("a", "host")
	defer n.sh.Terminate()
	const perSender = 3000
	stream(t, n, perSender, func(stop <-chan struct{}) {
		untilStopped(stop, func(i int) {
			_ = n.region.EntityRefFor("e" + strconv.Itoa(i%streamEntities)).Tell(passivate{})
		})
	})
	checkStreams(t, s, n, perSender)
	if starts := s.log.startCount("e0"); starts < 2 {
		t.Logf("e0 started %d times: no passivation overlapped the stream", starts)
	}
}

// Entities stop by idle passivation between bursts, and start again on
// the next message: the region's tick makes new write epochs meanwhile.
func TestFastPathFallsBackWhileIdleEntitiesPassivate(t *testing.T) {
	s := newSim(t, sharding.Settings{NumberOfShards: 8, PassivateIdleAfter: 2 * time.Millisecond})
	n := s.join("a", "host")
	defer n.sh.Terminate()
	const perSender = 3000
	stream(t, n, perSender, func(<-chan struct{}) {})
	checkStreams(t, s, n, perSender)
}

// Shards hand off (StopShards) while the senders stream: the region
// buffers their messages from the write lock that begins the hand-off, the
// shard holds those it got for stopping entities, and both reach the
// shard's next start in order.
func TestFastPathFallsBackWhileShardsHandOff(t *testing.T) {
	s := newSim(t, sharding.Settings{NumberOfShards: 8})
	n := s.join("a", "host")
	defer n.sh.Terminate()
	const perSender = 3000
	stream(t, n, perSender, func(stop <-chan struct{}) {
		untilStopped(stop, func(i int) { n.region.StopShards(strconv.Itoa(i % 8)) })
	})
	checkStreams(t, s, n, perSender)
}

// The senders start before any shard has a home, and the shards move to
// the sending node when the other one leaves: messages wait in the region
// for a home, are forwarded, are handed over, and the fast path takes over
// only once a shard is hosted here and routable.
func TestFastPathFallsBackWhileShardsHaveNoHomeOrMove(t *testing.T) {
	s := newSim(t, sharding.Settings{NumberOfShards: 8})
	b := s.join("b", "host") // the oldest: the coordinator
	a := s.join("a", "host")
	defer b.sh.Terminate()
	leaver := s.join("c", "host")
	defer leaver.sh.Terminate()
	const perSender = 3000
	stream(t, a, perSender, func(stop <-chan struct{}) {
		select {
		case <-stop:
		case <-time.After(20 * time.Millisecond): // mid-stream, most likely; correct either way
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := leaver.sh.Shutdown(ctx); err != nil {
			t.Errorf("shutdown c: %v", err)
		}
	})
	checkStreams(t, s, a, perSender)
	for _, n := range []*node{b, leaver} {
		if d := n.sys.Stats().DeadLetters; d != 0 {
			t.Fatalf("%d dead letters on %s, want none", d, n.name)
		}
	}
	a.sh.Terminate()
}

// untilStopped calls disturb with 0, 1, 2, … until stop closes, yielding
// between calls so that the disturbance overlaps the stream.
func untilStopped(stop <-chan struct{}, disturb func(i int)) {
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		disturb(i)
		runtime.Gosched()
	}
}

// A node without the entities' role streams to the two nodes that host
// them, and one of those leaves mid-stream: the sender forwards each
// message on the route it last used only while that route holds (see
// routeCache), so every entity gets every sender's messages, in order,
// with no dead letter anywhere, before and after its shard moved.
func TestRemoteRoutesFollowShardsThatMove(t *testing.T) {
	s := newSim(t, sharding.Settings{NumberOfShards: 8})
	b := s.join("b", "host") // the oldest: the coordinator
	c := s.join("c", "host")
	p := s.join("p") // a proxy: it forwards every message
	defer b.sh.Terminate()
	defer c.sh.Terminate()
	defer p.sh.Terminate()
	const perSender = 3000
	homes := map[string]map[string]bool{} // shard → the nodes p saw it on
	seen := func() {
		for shard, home := range sharding.HomesOf(p.region) {
			if homes[shard] == nil {
				homes[shard] = map[string]bool{}
			}
			homes[shard][home.Node] = true
		}
	}
	onC := func() bool {
		for _, on := range homes {
			if on["c"] {
				return true
			}
		}
		return false
	}
	// p learns every shard's home, and remembers its route to each entity:
	// the first message of each waits for its home, the second is
	// forwarded on the read lock. Shards allocated before c registered
	// are all on b: they are rebalanced until some are on c.
	for deadline := time.Now().Add(10 * time.Second); ; {
		for range 2 {
			for i := range streamEntities {
				p.tell(t, "e"+strconv.Itoa(i), note{Text: "warm"})
			}
			for len(sharding.HomesOf(p.region)) < 8 && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
		}
		if seen(); onC() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no shard on c: %v", homes)
		}
		for shard := range homes {
			_ = p.sh.RebalanceShard(key.Name(), shard)
		}
		time.Sleep(10 * time.Millisecond) // lets the hand-offs start; the loop checks the outcome
		clear(homes)
	}
	stream(t, p, perSender, func(<-chan struct{}) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := c.sh.Shutdown(ctx); err != nil {
			t.Errorf("shutdown c: %v", err)
		}
	})
	checkStreams(t, s, p, perSender)
	seen()
	moved := 0
	for _, on := range homes {
		if on["b"] && on["c"] {
			moved++
		}
	}
	if moved == 0 {
		t.Fatalf("no shard moved from c to b (homes seen: %v)", homes)
	}
	for _, n := range []*node{b, c} {
		if d := n.sys.Stats().DeadLetters; d != 0 {
			t.Fatalf("%d dead letters on %s, want none", d, n.name)
		}
	}
}
