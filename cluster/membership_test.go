package cluster_test

import (
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/shoal-dev/shoal/cluster"
)

func TestLocalMembershipPublishesChanges(t *testing.T) {
	a := member("a", 1, 1, cluster.Up)
	m := cluster.NewLocalMembership(a.Address, mustView(t, a))
	var got [][]string
	start, cancel := m.Subscribe(func(c cluster.Change) {
		if c.From.Len() == c.To.Len() && len(c.Events) == 0 {
			t.Error("empty change published")
		}
		got = append(got, kinds(c.Events))
	})
	if start.Len() != 1 {
		t.Fatalf("Subscribe returned a view of %d members, want 1", start.Len())
	}
	b := member("b", 1, 2, cluster.Joining)
	if err := m.Update(b); err != nil {
		t.Fatal(err)
	}
	b.Status = cluster.Up
	if err := m.Update(b); err != nil {
		t.Fatal(err)
	}
	m.Set(m.View()) // no change, no event
	b.Status = cluster.Joining
	if err := m.Update(member("c", 1, 3, cluster.Up), b); !errors.Is(err, cluster.ErrStatusRegression) {
		t.Fatalf("regression: %v, want ErrStatusRegression", err)
	}
	if m.View().Len() != 2 {
		t.Fatalf("a refused update changed the view: %d members", m.View().Len())
	}
	m.Remove(a.Address)
	cancel()
	m.Remove(b.Address)
	want := [][]string{{"b#1 MemberAdded"}, {"b#1 MemberUp"}, {"a#1 MemberRemoved"}}
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("changes %q, want %q", got, want)
	}
	if m.Self() != a.Address || m.View().Len() != 0 {
		t.Fatalf("Self %v, view %d", m.Self(), m.View().Len())
	}
}

// Subscribers see every change after their starting view, in order, even
// when updates race with the subscription.
func TestLocalMembershipSubscribeRacesUpdates(t *testing.T) {
	m := cluster.NewLocalMembership(addr("a", 1), cluster.View{})
	const n = 200
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 1; i <= n; i++ {
			if err := m.Update(member("n", uint64(i), uint64(i), cluster.Up)); err != nil {
				t.Error(err)
			}
		}
	})
	var (
		mu      sync.Mutex
		changes []cluster.Change
	)
	start, cancel := m.Subscribe(func(c cluster.Change) {
		mu.Lock()
		defer mu.Unlock()
		changes = append(changes, c)
	})
	wg.Wait()
	cancel()
	mu.Lock()
	defer mu.Unlock()
	prev := start
	for _, c := range changes {
		if c.From.Len() != prev.Len() {
			t.Fatalf("change from a view of %d members after one of %d: a change was skipped or reordered", c.From.Len(), prev.Len())
		}
		prev = c.To
	}
	if prev.Len() != n {
		t.Fatalf("start view %d members + %d changes end at %d members, want %d", start.Len(), len(changes), prev.Len(), n)
	}
}

// A subscriber cancelled while a change is being published (here by the
// subscriber before it, on the publishing goroutine) is not called for it:
// cancel stops further calls.
func TestLocalMembershipCancelDuringPublish(t *testing.T) {
	m := cluster.NewLocalMembership(addr("a", 1), cluster.View{})
	var cancelSecond func()
	secondCalls := 0
	_, cancelFirst := m.Subscribe(func(cluster.Change) { cancelSecond() })
	defer cancelFirst()
	_, cancelSecond = m.Subscribe(func(cluster.Change) { secondCalls++ })
	if err := m.Update(member("b", 1, 1, cluster.Up)); err != nil {
		t.Fatal(err)
	}
	if secondCalls != 0 {
		t.Fatalf("a subscriber was called %d times after its cancel returned", secondCalls)
	}
}
