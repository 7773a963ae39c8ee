package node

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/sharding"
	"github.com/shoal-dev/shoal/sharding/allocation"
	"github.com/shoal-dev/shoal/sharding/remote"
)

// staticView is a gossip view that never changes.
type staticView struct{ members []sharding.Member }

func (s staticView) Self() sharding.Member { return s.members[0] }
func (s staticView) Members() []sharding.Member {
	return slices.Clone(s.members)
}
func (s staticView) Subscribe(func()) func() { return func() {} }

func member(a cluster.UniqueAddress, joined int64) sharding.Member {
	return sharding.Member{Node: remote.NodeName(a), Status: allocation.Up, Reachable: true, JoinedAt: joined}
}

// A member the gossip view still shows healthy but whose lease expired in
// the store is shown unreachable, and the subscribers are told: the
// coordinator's place moves to the next oldest without waiting for the
// failure detector. Self is never asked about, nor a member already
// unreachable.
func TestLeaseViewShowsExpiredMembersUnreachable(t *testing.T) {
	self := cluster.UniqueAddress{Node: "b", Incarnation: 2}
	oldest := cluster.UniqueAddress{Node: "a", Incarnation: 1}
	other := cluster.UniqueAddress{Node: "c", Incarnation: 3}
	cut := cluster.UniqueAddress{Node: "d", Incarnation: 4}
	unreachable := member(cut, 4)
	unreachable.Reachable = false
	inner := staticView{members: []sharding.Member{member(self, 2), member(oldest, 1), member(other, 3), unreachable}}
	var asked [][]cluster.UniqueAddress
	expired := map[cluster.UniqueAddress]bool{}
	storeDown := false
	v := newLeaseView(inner, func(_ context.Context, nodes []cluster.UniqueAddress) ([]cluster.UniqueAddress, error) {
		asked = append(asked, nodes)
		if storeDown {
			return nil, errors.New("store down")
		}
		var out []cluster.UniqueAddress
		for _, n := range nodes {
			if expired[n] {
				out = append(out, n)
			}
		}
		return out, nil
	})
	var told atomic.Int32
	v.Subscribe(func() { told.Add(1) })
	oldestNode := func() string {
		m, _ := sharding.Oldest(v.Members(), "")
		return m.Node
	}

	if err := v.refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if want := []cluster.UniqueAddress{oldest, other}; len(asked) != 1 || !slices.Equal(asked[0], want) {
		t.Fatalf("asked %v, want %v: every reachable member but self", asked, want)
	}
	if told.Load() != 0 || oldestNode() != remote.NodeName(oldest) {
		t.Fatalf("nothing expired: told %d times, oldest %s", told.Load(), oldestNode())
	}
	storeDown = true
	if err := v.refresh(context.Background()); err == nil || told.Load() != 0 {
		t.Fatalf("a failed refresh: err %v, told %d times", err, told.Load())
	}
	storeDown = false
	expired[oldest] = true
	if err := v.refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if told.Load() != 1 {
		t.Fatalf("told %d times that the oldest's lease expired, want 1", told.Load())
	}
	if got := oldestNode(); got != remote.NodeName(self) {
		t.Fatalf("the coordinator's place is %s after the oldest's lease expired, want %s", got, remote.NodeName(self))
	}
	asked = nil
	if err := v.refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if want := []cluster.UniqueAddress{other}; len(asked) != 1 || !slices.Equal(asked[0], want) {
		t.Fatalf("asked %v, want %v: an expired lease is final, not asked again", asked, want)
	}
}

type recordingTransport struct{ sent []any }

func (r *recordingTransport) Self() cluster.UniqueAddress {
	return cluster.UniqueAddress{Node: "a", Incarnation: 1}
}
func (r *recordingTransport) Send(_ cluster.UniqueAddress, msg any) error {
	r.sent = append(r.sent, msg)
	return nil
}
func (r *recordingTransport) Close(context.Context) error { return nil }

// A node resumed past its lease, before its holder fenced it, neither
// sends nor handles a message: a region would forward stale messages, an
// entity answer from a stale state.
func TestLeasedTransportStopsWithTheLease(t *testing.T) {
	var held atomic.Bool
	held.Store(true)
	inner := &recordingTransport{}
	lt := leasedTransport{Transport: inner, holds: held.Load}
	var handled []any
	h := lt.handler(func(_ cluster.UniqueAddress, msg any) { handled = append(handled, msg) })
	to := cluster.UniqueAddress{Node: "b", Incarnation: 1}
	if err := lt.Send(to, "held"); err != nil {
		t.Fatal(err)
	}
	h(to, "held")
	held.Store(false)
	if err := lt.Send(to, "fenced"); !errors.Is(err, cluster.ErrUnreachable) || !errors.Is(err, ErrFenced) {
		t.Fatalf("Send without the lease: %v, want ErrUnreachable and ErrFenced", err)
	}
	h(to, "fenced")
	if !slices.Equal(inner.sent, []any{"held"}) || !slices.Equal(handled, []any{"held"}) {
		t.Fatalf("sent %v, handled %v; want only the message sent and received while held", inner.sent, handled)
	}
}
