package node

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shoal-dev/shoal/cluster"
)

// staticView is a gossip view that never changes: self first.
func staticView(t *testing.T, members ...cluster.Member) *cluster.LocalMembership {
	t.Helper()
	v, err := cluster.NewView(members...)
	if err != nil {
		t.Fatal(err)
	}
	return cluster.NewLocalMembership(members[0].Address, v)
}

func member(a cluster.UniqueAddress, joined uint64) cluster.Member {
	return cluster.Member{Address: a, Status: cluster.Up, JoinOrder: joined}
}

// A member the gossip view still shows healthy but whose lease expired in
// the store is shown unreachable, and the subscribers are told: the
// coordinator's place moves to the next oldest without waiting for the
// failure detector. Self is never asked about; a member already
// unreachable is, so that it can be dropped (see
// TestLeaseViewDropsLongExpiredMembers).
func TestLeaseViewShowsExpiredMembersUnreachable(t *testing.T) {
	self := cluster.UniqueAddress{Node: "b", Incarnation: 2}
	oldest := cluster.UniqueAddress{Node: "a", Incarnation: 1}
	other := cluster.UniqueAddress{Node: "c", Incarnation: 3}
	cut := cluster.UniqueAddress{Node: "d", Incarnation: 4}
	unreachable := member(cut, 4)
	unreachable.Unreachable = true
	inner := staticView(t, member(self, 2), member(oldest, 1), member(other, 3), unreachable)
	var asked [][]cluster.UniqueAddress
	expired := map[cluster.UniqueAddress]bool{}
	storeDown := false
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	v := newLeaseView(inner, func(_ context.Context, nodes []cluster.UniqueAddress) ([]cluster.UniqueAddress, time.Duration, error) {
		asked = append(asked, nodes)
		if storeDown {
			return nil, 0, errors.New("store down")
		}
		var out []cluster.UniqueAddress
		for _, n := range nodes {
			if expired[n] {
				out = append(out, n)
			}
		}
		return out, 0, nil
	}, time.Hour, func() time.Time { return now })
	defer v.Close()
	var told atomic.Int32
	v.Subscribe(func(cluster.Change) { told.Add(1) })
	oldestNode := func() cluster.UniqueAddress {
		m, _ := v.View().Oldest("")
		return m.Address
	}

	if _, err := v.refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if want := []cluster.UniqueAddress{oldest, other, cut}; len(asked) != 1 || !slices.Equal(asked[0], want) {
		t.Fatalf("asked %v, want %v: every member but self", asked, want)
	}
	if told.Load() != 0 || oldestNode() != oldest {
		t.Fatalf("nothing expired: told %d times, oldest %s", told.Load(), oldestNode())
	}
	storeDown = true
	if _, err := v.refresh(context.Background()); err == nil || told.Load() != 0 {
		t.Fatalf("a failed refresh: err %v, told %d times", err, told.Load())
	}
	storeDown = false
	expired[oldest] = true
	if _, err := v.refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if told.Load() != 1 {
		t.Fatalf("told %d times that the oldest's lease expired, want 1", told.Load())
	}
	if got := oldestNode(); got != self {
		t.Fatalf("the coordinator's place is %s after the oldest's lease expired, want %s", got, self)
	}
	asked = nil
	if _, err := v.refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if want := []cluster.UniqueAddress{other, cut}; len(asked) != 1 || !slices.Equal(asked[0], want) {
		t.Fatalf("asked %v, want %v: an expired lease is final, not asked again", asked, want)
	}
}

// A member whose lease the view has seen expired for dropAfter, reachable
// or not in the gossip view (memberlist keeps a crashed member for
// minutes), is left out of the view, and the subscribers are told; until
// then it shows unreachable (which changes nothing, and tells nothing,
// for one the gossip view holds unreachable already). One whose lease is
// live stays.
func TestLeaseViewDropsLongExpiredMembers(t *testing.T) {
	self := cluster.UniqueAddress{Node: "a", Incarnation: 1}
	crashed := cluster.UniqueAddress{Node: "b", Incarnation: 2}
	live := cluster.UniqueAddress{Node: "c", Incarnation: 3}
	unreachable := member(crashed, 2)
	unreachable.Unreachable = true
	inner := staticView(t, member(self, 1), unreachable, member(live, 3))
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	v := newLeaseView(inner, func(_ context.Context, nodes []cluster.UniqueAddress) ([]cluster.UniqueAddress, time.Duration, error) {
		var out []cluster.UniqueAddress
		for _, n := range nodes {
			if n == crashed {
				out = append(out, n)
			}
		}
		return out, 0, nil
	}, 8*time.Second, func() time.Time { return now })
	defer v.Close()
	var told atomic.Int32
	v.Subscribe(func(cluster.Change) { told.Add(1) })
	members := func() []cluster.UniqueAddress {
		var out []cluster.UniqueAddress
		for _, m := range v.View().Members() {
			out = append(out, m.Address)
		}
		return out
	}
	all := []cluster.UniqueAddress{self, crashed, live}

	if _, err := v.refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := members(); !slices.Equal(got, all) || told.Load() != 0 {
		t.Fatalf("just expired: members %v, told %d times; want %v, not told", got, told.Load(), all)
	}
	now = now.Add(7 * time.Second)
	if _, err := v.refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := members(); !slices.Equal(got, all) || told.Load() != 0 {
		t.Fatalf("expired 7 s ago: members %v, told %d times; want %v, not told", got, told.Load(), all)
	}
	now = now.Add(time.Second)
	if _, err := v.refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := []cluster.UniqueAddress{self, live}
	if got := members(); !slices.Equal(got, want) || told.Load() != 1 {
		t.Fatalf("expired 8 s ago: members %v, told %d times; want %v, told once", got, told.Load(), want)
	}
	if _, err := v.refresh(context.Background()); err != nil || told.Load() != 1 {
		t.Fatalf("a refresh that changes nothing: %v, told %d times; want 1", err, told.Load())
	}
}

// A change of the gossip view reaches the subscribers with the lease's
// verdicts applied.
func TestLeaseViewFollowsTheGossipView(t *testing.T) {
	self := cluster.UniqueAddress{Node: "a", Incarnation: 1}
	expiredNode := cluster.UniqueAddress{Node: "b", Incarnation: 2}
	joiner := cluster.UniqueAddress{Node: "c", Incarnation: 3}
	inner := staticView(t, member(self, 1), member(expiredNode, 2))
	v := newLeaseView(inner, func(context.Context, []cluster.UniqueAddress) ([]cluster.UniqueAddress, time.Duration, error) {
		return []cluster.UniqueAddress{expiredNode}, 0, nil
	}, time.Hour, time.Now)
	defer v.Close()
	if _, err := v.refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	var changes []cluster.Change
	start, _ := v.Subscribe(func(c cluster.Change) { changes = append(changes, c) })
	if m, _ := start.Member(expiredNode); !m.Unreachable {
		t.Fatalf("subscribed at %v: want b unreachable", start.Members())
	}
	if err := inner.Update(member(joiner, 3)); err != nil {
		t.Fatal(err)
	}
	if len(changes) != 1 || len(changes[0].Events) != 1 || changes[0].Events[0].Kind != cluster.MemberAdded {
		t.Fatalf("changes %+v, want c added", changes)
	}
	if m, _ := changes[0].To.Member(expiredNode); !m.Unreachable {
		t.Fatalf("view after c joined: %v, want b still unreachable", changes[0].To.Members())
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

// encodedRecordingTransport records encoded messages too.
type encodedRecordingTransport struct {
	recordingTransport
	handle cluster.EncodedHandler
}

func (r *encodedRecordingTransport) SendEncoded(_ cluster.UniqueAddress, _ string, payload []byte) error {
	r.sent = append(r.sent, string(payload))
	return nil
}

func (r *encodedRecordingTransport) HandleEncoded(_ string, h cluster.EncodedHandler) { r.handle = h }

// replyRecordingTransport has a way of its own for replies.
type replyRecordingTransport struct{ encodedRecordingTransport }

func (r *replyRecordingTransport) SendReply(_ cluster.UniqueAddress, _ string, payload []byte) error {
	r.sent = append(r.sent, "reply "+string(payload))
	return nil
}

// The leased transport sends replies under the lease too: on the inner
// transport's way for replies when it has one, else as encoded messages.
func TestLeasedTransportOfReplies(t *testing.T) {
	var held atomic.Bool
	held.Store(true)
	to := cluster.UniqueAddress{Node: "b", Incarnation: 1}
	withWay, without := &replyRecordingTransport{}, &encodedRecordingTransport{}
	for _, inner := range []interface {
		cluster.Transport
		sentSoFar() []any
	}{withWay, without} {
		send := leased(inner, held.Load).(cluster.ReplySender).SendReply
		held.Store(true)
		if err := send(to, "m", []byte("held")); err != nil {
			t.Fatal(err)
		}
		held.Store(false)
		if err := send(to, "m", []byte("fenced")); !errors.Is(err, cluster.ErrUnreachable) || !errors.Is(err, ErrFenced) {
			t.Fatalf("SendReply without the lease: %v, want ErrUnreachable and ErrFenced", err)
		}
	}
	if !slices.Equal(withWay.sent, []any{"reply held"}) || !slices.Equal(without.sent, []any{"held"}) {
		t.Fatalf("sent %v and %v; want the held reply only, on the way for replies where there is one", withWay.sent, without.sent)
	}
}

func (r *encodedRecordingTransport) sentSoFar() []any { return r.sent }

// Over a transport that takes and hands over encoded messages, the leased
// transport does too, under the same lease; over one that does not, it
// does not either, so that sharding sends values.
func TestLeasedTransportOfEncodedMessages(t *testing.T) {
	if _, ok := leased(&recordingTransport{}, func() bool { return true }).(cluster.EncodedSender); ok {
		t.Fatal("the leased transport of a transport of values takes encoded messages")
	}
	var held atomic.Bool
	held.Store(true)
	inner := &encodedRecordingTransport{}
	lt := leased(inner, held.Load)
	var handled []string
	lt.(cluster.EncodedReceiver).HandleEncoded("m", func(_ cluster.UniqueAddress, payload []byte) error {
		handled = append(handled, string(payload))
		return nil
	})
	to := cluster.UniqueAddress{Node: "b", Incarnation: 1}
	send := lt.(cluster.EncodedSender).SendEncoded
	if err := send(to, "m", []byte("held")); err != nil {
		t.Fatal(err)
	}
	inner.handle(to, []byte("held"))
	held.Store(false)
	if err := send(to, "m", []byte("fenced")); !errors.Is(err, cluster.ErrUnreachable) || !errors.Is(err, ErrFenced) {
		t.Fatalf("SendEncoded without the lease: %v, want ErrUnreachable and ErrFenced", err)
	}
	inner.handle(to, []byte("fenced"))
	if !slices.Equal(inner.sent, []any{"held"}) || !slices.Equal(handled, []string{"held"}) {
		t.Fatalf("sent %v, handled %v; want only the message sent and received while held", inner.sent, handled)
	}
}

// The view asks the store again just after the first live lease ends,
// when that comes before the next interval: a crashed member is seen
// expired as the store's clock passes its lease, not up to an interval
// later. With no live lease, or one that ends later, it asks every
// interval; one about to end is asked about no more often than
// interval/50.
func TestLeaseViewRefreshesAsTheFirstLeaseEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		self := cluster.UniqueAddress{Node: "a", Incarnation: 1}
		other := cluster.UniqueAddress{Node: "b", Incarnation: 2}
		inner := staticView(t, member(self, 1), member(other, 2))
		start := time.Now()
		var at []time.Duration
		// The store's answers, one per refresh: time left on b's lease.
		answers := []time.Duration{0, 2 * time.Second, 120 * time.Millisecond, 100 * time.Microsecond, -1}
		v := newLeaseView(inner, func(_ context.Context, nodes []cluster.UniqueAddress) ([]cluster.UniqueAddress, time.Duration, error) {
			at = append(at, time.Since(start))
			left := answers[min(len(at), len(answers))-1]
			if left < 0 {
				return nodes, 0, nil
			}
			return nil, left, nil
		}, time.Hour, time.Now)
		defer v.Close()
		done := make(chan struct{})
		go v.run(500*time.Millisecond, done)
		time.Sleep(2 * time.Second)
		close(done)
		synctest.Wait()
		want := []time.Duration{
			500 * time.Millisecond,  // the first interval; next unknown
			1000 * time.Millisecond, // 2 s left: the interval comes first
			1500 * time.Millisecond, // 120 ms left: just after it ends
			1621 * time.Millisecond, // 0.1 ms left: not before interval/50
			1631 * time.Millisecond, // expired
			2000 * time.Millisecond,
		}
		if len(at) < 5 || !slices.Equal(at, want[:len(at)]) {
			t.Fatalf("refreshed at %v, want %v", at, want)
		}
		if m, _ := v.View().Member(other); !m.Unreachable {
			t.Fatalf("b's lease expired at 1.62 s, but the view shows %+v", m)
		}
	})
}
