package inproc_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/cluster/inproc"
	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/timers"
)

// unregistered is a message type the network's codec does not know.
type unregistered struct{ N int }

// The Intercept sees every Send as it is called, on the sender's
// goroutine and before encoding: sender, address and the message value,
// whether or not it will be queued, sends to the sender itself included.
func TestInterceptSeesEverySendBeforeEncoding(t *testing.T) {
	net, clock := newNet(t, inproc.Config{})
	type sent struct {
		from, to string
		msg      any
	}
	var seen []sent
	net.Intercept(func(from, to cluster.UniqueAddress, m any) error {
		seen = append(seen, sent{from.String(), to.String(), m})
		return nil
	})
	rb := &recorder{}
	a := join(t, net, "a", 1, rb.handle)
	join(t, net, "b", 1, rb.handle)
	aAddr, bAddr := cluster.UniqueAddress{Node: "a", Incarnation: 1}, cluster.UniqueAddress{Node: "b", Incarnation: 1}
	must(t, a.Send(bAddr, msg{Seq: 1}))
	must(t, a.Send(aAddr, msg{Seq: 2}))
	if err := a.Send(bAddr, unregistered{N: 3}); !errors.Is(err, codec.ErrUnregisteredType) {
		t.Fatalf("send of an unregistered type: %v, want codec.ErrUnregisteredType", err)
	}
	want := []sent{{"a#1", "b#1", msg{Seq: 1}}, {"a#1", "a#1", msg{Seq: 2}}, {"a#1", "b#1", unregistered{N: 3}}}
	if !slices.Equal(seen, want) {
		t.Fatalf("intercepted %v, want %v", seen, want)
	}
	settle(net, clock)
	if !slices.Equal(rb.got, []string{"a:1", "a:2"}) {
		t.Fatalf("delivered %v, want both accepted messages", rb.got)
	}
	net.Intercept(nil)
	must(t, a.Send(bAddr, msg{Seq: 4}))
	if len(seen) != 3 {
		t.Fatalf("intercepted %v after the Intercept was removed", seen[3:])
	}
}

// An Intercept that returns an error refuses the send: Send returns it,
// nothing is queued, and Stats counts it as refused, not sent.
func TestInterceptRefusesASend(t *testing.T) {
	net, clock := newNet(t, inproc.Config{})
	errNo := errors.New("no odd ones")
	net.Intercept(func(_, _ cluster.UniqueAddress, m any) error {
		if m.(msg).Seq%2 == 1 {
			return errNo
		}
		return nil
	})
	rb := &recorder{}
	a := join(t, net, "a", 1, ignore)
	join(t, net, "b", 1, rb.handle)
	b := cluster.UniqueAddress{Node: "b", Incarnation: 1}
	for seq := 1; seq <= 4; seq++ {
		err := a.Send(b, msg{Seq: seq})
		if refused := seq%2 == 1; refused != errors.Is(err, errNo) {
			t.Fatalf("send %d: %v", seq, err)
		}
	}
	settle(net, clock)
	if !slices.Equal(rb.got, []string{"a:2", "a:4"}) {
		t.Fatalf("delivered %v, want the accepted ones only", rb.got)
	}
	if st := net.Stats(); st.Sent != 2 || st.Refused != 2 || st.Delivered != 2 {
		t.Fatalf("stats %+v, want 2 sent, 2 refused, 2 delivered", st)
	}
}

// An Intercept faults a link with the network's own faults: a Hold it
// sets catches the very message it looks at, and what follows on that
// link, in order, until Release; other links go on.
func TestInterceptHoldsALinkAtAChosenMessage(t *testing.T) {
	net, clock := newNet(t, inproc.Config{})
	net.Intercept(func(from, to cluster.UniqueAddress, m any) error {
		if m.(msg).Seq == 2 {
			net.Hold(from, to)
		}
		return nil
	})
	rb, rc := &recorder{}, &recorder{}
	a := join(t, net, "a", 1, ignore)
	join(t, net, "b", 1, rb.handle)
	join(t, net, "c", 1, rc.handle)
	aAddr := cluster.UniqueAddress{Node: "a", Incarnation: 1}
	b, c := cluster.UniqueAddress{Node: "b", Incarnation: 1}, cluster.UniqueAddress{Node: "c", Incarnation: 1}
	must(t, a.Send(b, msg{Seq: 1}))
	settle(net, clock)
	must(t, a.Send(b, msg{Seq: 2}))
	must(t, a.Send(b, msg{Seq: 3}))
	must(t, a.Send(c, msg{Seq: 4}))
	settle(net, clock)
	if !slices.Equal(rb.got, []string{"a:1"}) || !slices.Equal(rc.got, []string{"a:4"}) {
		t.Fatalf("b got %v, c got %v; want b held from its second message on, c not held", rb.got, rc.got)
	}
	net.Release(aAddr, b)
	settle(net, clock)
	if !slices.Equal(rb.got, []string{"a:1", "a:2", "a:3"}) {
		t.Fatalf("after Release b got %v, want all three in order", rb.got)
	}
}

// Inside a testing/synctest bubble, with Run delivering on the bubble's
// clock: an Intercept that delays one pair with SetDelay delays the
// message it looks at, and synctest.Wait sees deliveries through.
func TestInterceptInASynctestBubble(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := codec.NewRegistry()
		codec.MustRegister[msg](reg, "msg")
		net, err := inproc.NewNetwork(inproc.Config{Codec: reg, Clock: timers.Real{}})
		if err != nil {
			t.Fatal(err)
		}
		net.Intercept(func(from, to cluster.UniqueAddress, m any) error {
			if m.(msg).Seq == 2 {
				net.SetDelay(from.Node, to.Node, time.Second, time.Second)
			}
			return nil
		})
		var (
			mu  sync.Mutex
			got []int
		)
		a := join(t, net, "a", 1, ignore)
		join(t, net, "b", 1, func(_ cluster.UniqueAddress, m any) {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, m.(msg).Seq)
		})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- net.Run(ctx) }()
		b := cluster.UniqueAddress{Node: "b", Incarnation: 1}
		check := func(want ...int) {
			t.Helper()
			synctest.Wait()
			mu.Lock()
			defer mu.Unlock()
			if !slices.Equal(got, want) {
				t.Fatalf("delivered %v, want %v", got, want)
			}
		}
		must(t, a.Send(b, msg{Seq: 1}))
		check(1)
		must(t, a.Send(b, msg{Seq: 2}))
		check(1)
		time.Sleep(time.Second)
		check(1, 2)
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("Run returned %v", err)
		}
	})
}
