package sharding_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shoal-dev/shoal/sharding"
)

// Randomized churn: nodes join, leave gracefully (the coordinator's too)
// and rebalance while traffic flows through every live node. Whatever the
// schedule, every message reaches its entity exactly once and, per sender,
// in send order. Each seed is one reproducible schedule.
func TestRandomChurnLosesNoMessage(t *testing.T) {
	base := sharding.Settings{NumberOfShards: 16, RebalanceInterval: 5 * time.Second}
	idle, remember := base, base
	idle.PassivateIdleAfter = 3 * time.Second // entities come and go between rounds
	remember.RememberEntities = true
	for name, settings := range map[string]sharding.Settings{"plain": base, "idle-passivation": idle, "remember-entities": remember} {
		for seed := range uint64(12) {
			t.Run(fmt.Sprint(name, "/seed=", seed), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) { churn(t, seed, settings) })
			})
		}
	}
}

// With crashes as well, messages that were on a crashed node, or sent to
// it before the membership dropped it, are lost (delivery is at most
// once), but what arrives still arrives once and in per-sender order.
func TestRandomChurnWithCrashesKeepsOrder(t *testing.T) {
	for seed := range uint64(24) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				churnWithCrashes(t, seed, sharding.Settings{NumberOfShards: 16, RebalanceInterval: 5 * time.Second})
			})
		})
	}
}

// schedule runs one random schedule of joins, removals (by remove, which
// also sends traffic through the remaining nodes) and traffic rounds, ends
// with a round through every live node and a quiet minute, and returns the
// live nodes, oldest first.
func schedule(t *testing.T, s *sim, rng *rand.Rand, round func(via *node), remove func(gone *node, live []*node)) []*node {
	var live []*node
	joined := 0
	join := func() {
		live = append(live, s.join(fmt.Sprint("n", joined), "host"))
		joined++
	}
	join()
	join()
	for range 12 {
		switch op := rng.IntN(4); {
		case op == 0 && len(live) < 5:
			join()
		case op == 1 && len(live) > 1:
			i := rng.IntN(len(live))
			gone := live[i]
			live = slices.Delete(live, i, i+1)
			remove(gone, live)
			delete(s.nodes, gone.name)
		default:
			for _, n := range live {
				round(n)
			}
		}
		time.Sleep(time.Duration(rng.IntN(8)) * time.Second) // sometimes past a rebalance
		synctest.Wait()
	}
	// The coordinator lease of a crashed coordinator runs out (15 s by
	// default) before its successor acts.
	time.Sleep(20 * time.Second)
	synctest.Wait()
	for _, n := range live {
		round(n)
	}
	time.Sleep(time.Minute)
	synctest.Wait()
	t.Cleanup(func() {
		for i := len(live) - 1; i >= 0; i-- {
			_ = live[i].sh.Shutdown(context.Background())
		}
	})
	return live
}

func churnWithCrashes(t *testing.T, seed uint64, settings sharding.Settings) {
	s := newSim(t, settings)
	ids := entityIDs(40)
	sent := map[[2]string]int{}
	round := func(via *node) {
		for _, id := range ids {
			k := [2]string{id, via.name}
			sent[k]++
			// The home may have just crashed: the sender gets a typed error.
			if err := via.region.EntityRefFor(id).Tell(note{Text: fmt.Sprintf("%s:%d", via.name, sent[k])}); err != nil && !errors.Is(err, sharding.ErrUnreachable) {
				t.Fatalf("tell %s via %s: %v", id, via.name, err)
			}
		}
	}
	live := schedule(t, s, rand.New(rand.NewPCG(seed, 0xc4a5)), round, func(crashed *node, live []*node) {
		crashed.sh.Terminate()
		for _, n := range live { // traffic before the failure detector's verdict
			round(n)
		}
		s.cluster.Remove(crashed.name)
	})
	for _, id := range ids {
		last := map[string]int{}
		for _, text := range s.log.notes(id) {
			via, seqText, _ := strings.Cut(text, ":")
			seq, _ := strconv.Atoi(seqText)
			if seq <= last[via] {
				t.Fatalf("%s got %s after %s:%d: out of order or twice", id, text, via, last[via])
			}
			last[via] = seq
		}
		// The last round, after the crashes, reached every entity: the
		// crashed nodes' shards found new homes.
		for _, n := range live {
			if want := sent[[2]string{id, n.name}]; last[n.name] != want {
				t.Fatalf("%s: the last note from %s was %d, want %d", id, n.name, last[n.name], want)
			}
		}
	}
}

func churn(t *testing.T, seed uint64, settings sharding.Settings) {
	s := newSim(t, settings)
	ids := entityIDs(40)
	tr := newTraffic()
	round := func(via *node) { tr.round(t, via, ids) }
	schedule(t, s, rand.New(rand.NewPCG(seed, 0x5ea1)), round, func(leaving *node, live []*node) {
		done := make(chan error, 1)
		go func() { done <- leaving.sh.Shutdown(context.Background()) }()
		for _, n := range live { // traffic during the hand-off
			round(n)
		}
		if err := <-done; err != nil {
			t.Fatalf("%s left: %v", leaving.name, err)
		}
	})
	tr.check(t, s)
	for _, id := range ids {
		if got := len(s.log.notes(id)); got != tr.total(id) {
			t.Fatalf("%s handled %d notes, %d sent: a message was delivered twice", id, got, tr.total(id))
		}
	}
}

// total is how many notes were sent to entity id, through any node.
func (tr *traffic) total(id string) int {
	n := 0
	for k, c := range tr.sent {
		if k[0] == id {
			n += c
		}
	}
	return n
}
