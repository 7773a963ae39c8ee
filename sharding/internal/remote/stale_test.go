package remote_test

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/sharding/internal/remote"
)

// A sender's staleness follows the latest view: a verdict kept for one
// view is not the answer under the next, and each sender has its own.
func TestStaleSenderFollowsTheLatestView(t *testing.T) {
	self := cluster.UniqueAddress{Node: "self", Incarnation: 1}
	a1 := cluster.UniqueAddress{Node: "a", Incarnation: 1}
	a2 := cluster.UniqueAddress{Node: "a", Incarnation: 2}
	var latest atomic.Pointer[cluster.View]
	tr, err := remote.New(self, remote.Config{Codec: newCodec(), Logger: quiet(), View: latest.Load})
	if err != nil {
		t.Fatal(err)
	}
	member := func(a cluster.UniqueAddress, s cluster.Status) cluster.Member {
		return cluster.Member{Address: a, Endpoint: "x", Status: s, JoinOrder: a.Incarnation}
	}
	setView := func(ms ...cluster.Member) {
		v, err := cluster.NewView(ms...)
		if err != nil {
			t.Fatal(err)
		}
		latest.Store(&v)
	}
	// A message that is no envelope is refused as stale when its sender
	// is, and as no protocol message otherwise.
	stale := func(from cluster.UniqueAddress) bool {
		err := tr.Receive(from, "not an envelope")
		if !errors.Is(err, cluster.ErrStaleIncarnation) && !errors.Is(err, remote.ErrNotProtocol) {
			t.Fatalf("from %s: %v", from, err)
		}
		return errors.Is(err, cluster.ErrStaleIncarnation)
	}
	check := func(step string, from cluster.UniqueAddress, want bool) {
		t.Helper()
		for range 3 { // the first judges, the others find the verdict
			if got := stale(from); got != want {
				t.Fatalf("%s: %s stale = %v, want %v", step, from, got, want)
			}
		}
	}
	check("no view yet", a1, false)
	setView(member(a1, cluster.Up))
	check("up", a1, false)
	check("not in the view yet", a2, false)
	setView(member(a1, cluster.Down))
	check("down", a1, true)
	setView(member(a1, cluster.Down), member(a2, cluster.Up))
	check("replaced", a1, true)
	check("its successor", a2, false)
	// More senders than are remembered per view: each still judged right.
	var ms []cluster.Member
	for i := range 40 {
		ms = append(ms, member(cluster.UniqueAddress{Node: fmt.Sprint("n", i), Incarnation: 1}, cluster.Status(1+i%int(cluster.Down))))
	}
	setView(ms...)
	for round := range 2 {
		for _, m := range ms {
			if got := stale(m.Address); got != (m.Status == cluster.Down) {
				t.Fatalf("round %d: %s (%s) stale = %v", round, m.Address, m.Status, got)
			}
		}
	}
}
