package inproc_test

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/cluster/clustertest"
	"github.com/shoal-dev/shoal/cluster/inproc"
	"github.com/shoal-dev/shoal/entity/codec"
)

// fakeClock is a clock only the test moves.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *fakeClock { return &fakeClock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.After(c.now) {
		c.now = t
	}
}

func (c *fakeClock) Advance(d time.Duration) { c.Set(c.Now().Add(d)) }

// settle drives a network to quiescence: step the clock to each next due
// message and deliver, as a simulator would.
func settle(net *inproc.Network, clock *fakeClock) {
	for {
		net.DeliverDue()
		due, ok := net.NextDue()
		if !ok {
			return
		}
		clock.Set(due)
	}
}

type harness struct {
	net   *inproc.Network
	clock *fakeClock
	cap   int
}

func (h *harness) Start(t *testing.T, a cluster.UniqueAddress, handle cluster.Handler) cluster.Transport {
	t.Helper()
	tr, err := h.net.Join(a, handle)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}
func (h *harness) Settle(*testing.T)                      { settle(h.net, h.clock) }
func (h *harness) Hold(from, to cluster.UniqueAddress)    { h.net.Hold(from, to) }
func (h *harness) Release(from, to cluster.UniqueAddress) { h.net.Release(from, to) }
func (h *harness) Break(a, b string)                      { h.net.Break(a, b) }
func (h *harness) QueueCapacity() int                     { return h.cap }
func (h *harness) MaxFrameSize() int                      { return 4096 }

// TestTransportConformance runs the suite with no delay and with random
// per-link delays (which reorder across links, never within one).
func TestTransportConformance(t *testing.T) {
	for _, delayed := range []bool{false, true} {
		t.Run(fmt.Sprint("delayed=", delayed), func(t *testing.T) {
			clustertest.RunTransport(t, func(t *testing.T, reg *codec.Registry) clustertest.Harness {
				clock := newClock()
				net, err := inproc.NewNetwork(inproc.Config{Codec: reg, Clock: clock, QueueCapacity: 64, MaxFrameSize: 4096, Seed: 7})
				if err != nil {
					t.Fatal(err)
				}
				if delayed {
					for _, a := range []string{"a", "b", "c", "d"} {
						for _, b := range []string{"a", "b", "c", "d"} {
							net.SetDelay(a, b, 0, 300*time.Millisecond)
						}
					}
				}
				return &harness{net: net, clock: clock, cap: 64}
			})
		})
	}
}

type msg struct{ From, Seq int }

type recorder struct {
	got []string
}

func (r *recorder) handle(from cluster.UniqueAddress, m any) {
	r.got = append(r.got, fmt.Sprintf("%s:%v", from.Node, m.(msg).Seq))
}

func newNet(t *testing.T, cfg inproc.Config) (*inproc.Network, *fakeClock) {
	t.Helper()
	if cfg.Codec == nil {
		cfg.Codec = codec.NewRegistry()
		codec.MustRegister[msg](cfg.Codec, "msg")
	}
	clock := newClock()
	cfg.Clock = clock
	net, err := inproc.NewNetwork(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return net, clock
}

func join(t *testing.T, net *inproc.Network, node string, inc uint64, h cluster.Handler) *inproc.Transport {
	t.Helper()
	tr, err := net.Join(cluster.UniqueAddress{Node: node, Incarnation: inc}, h)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func TestDelayIsDueOnTheClock(t *testing.T) {
	net, clock := newNet(t, inproc.Config{})
	net.SetDelay("a", "b", 100*time.Millisecond, 100*time.Millisecond)
	a := join(t, net, "a", 1, func(cluster.UniqueAddress, any) {})
	var r recorder
	join(t, net, "b", 1, r.handle)
	if err := a.Send(cluster.UniqueAddress{Node: "b", Incarnation: 1}, msg{Seq: 1}); err != nil {
		t.Fatal(err)
	}
	start := clock.Now()
	if due, ok := net.NextDue(); !ok || !due.Equal(start.Add(100*time.Millisecond)) {
		t.Fatalf("NextDue = %v, %v; want send time + 100ms", due, ok)
	}
	clock.Advance(99 * time.Millisecond)
	if n := net.DeliverDue(); n != 0 || len(r.got) != 0 {
		t.Fatalf("delivered %d before its delay passed", n)
	}
	clock.Advance(time.Millisecond)
	if n := net.DeliverDue(); n != 1 || !slices.Equal(r.got, []string{"a:1"}) {
		t.Fatalf("at its due time: delivered %d, got %v", n, r.got)
	}
}

// A shrinking delay never lets a later message overtake an earlier one on
// its link; another link's message may overtake both.
func TestShrinkingDelayKeepsLinkOrder(t *testing.T) {
	net, clock := newNet(t, inproc.Config{})
	var r recorder
	b := cluster.UniqueAddress{Node: "b", Incarnation: 1}
	a := join(t, net, "a", 1, ignore)
	c := join(t, net, "c", 1, ignore)
	join(t, net, "b", 1, r.handle)
	net.SetDelay("a", "b", time.Second, time.Second)
	must(t, a.Send(b, msg{Seq: 1}))
	net.SetDelay("a", "b", 0, 0)
	must(t, a.Send(b, msg{Seq: 2}))
	must(t, c.Send(b, msg{Seq: 1}))
	settle(net, clock)
	if want := []string{"c:1", "a:1", "a:2"}; !slices.Equal(r.got, want) {
		t.Fatalf("got %v, want %v", r.got, want)
	}
}

// ignore is a handler that drops every message.
func ignore(cluster.UniqueAddress, any) {}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestPartitionLosesUntilHealed(t *testing.T) {
	net, clock := newNet(t, inproc.Config{Delay: 10 * time.Millisecond})
	var r recorder
	b := cluster.UniqueAddress{Node: "b", Incarnation: 1}
	a := join(t, net, "a", 1, ignore)
	join(t, net, "b", 1, r.handle)
	must(t, a.Send(b, msg{Seq: 1})) // in flight when the partition starts: lost
	net.Partition("a", "b")
	must(t, a.Send(b, msg{Seq: 2})) // a network accepts it and loses it
	settle(net, clock)
	net.Heal("a", "b")
	must(t, a.Send(b, msg{Seq: 3}))
	settle(net, clock)
	if want := []string{"a:3"}; !slices.Equal(r.got, want) {
		t.Fatalf("got %v, want %v", r.got, want)
	}
	if s := net.Stats(); s.Sent != 3 || s.Lost != 2 || s.Delivered != 1 {
		t.Fatalf("stats %+v, want 3 sent, 2 lost, 1 delivered", s)
	}
}

// The same seed and the same calls give the same deliveries; another seed
// gives other delays (and so another interleaving across links).
func TestDeterministicBySeed(t *testing.T) {
	run := func(seed uint64) []string {
		net, clock := newNet(t, inproc.Config{Seed: seed})
		var r recorder
		d := cluster.UniqueAddress{Node: "d", Incarnation: 1}
		join(t, net, "d", 1, r.handle)
		var senders []*inproc.Transport
		for _, n := range []string{"a", "b", "c"} {
			net.SetDelay(n, "d", 0, time.Second)
			senders = append(senders, join(t, net, n, 1, ignore))
		}
		for i := range 20 {
			for _, s := range senders {
				must(t, s.Send(d, msg{Seq: i}))
			}
		}
		settle(net, clock)
		return r.got
	}
	first := run(42)
	if len(first) != 60 {
		t.Fatalf("delivered %d, want 60", len(first))
	}
	if again := run(42); !slices.Equal(first, again) {
		t.Fatalf("same seed, different deliveries:\n%v\n%v", first, again)
	}
	if other := run(43); slices.Equal(first, other) {
		t.Fatalf("seeds 42 and 43 interleaved identically")
	}
}

// failingSerializer encodes but cannot decode: a corrupt frame.
type failingSerializer struct{ codec.JSON }

func (failingSerializer) Unmarshal([]byte, any) error { return errors.New("corrupt") }

type corrupt struct{ X int }

func TestUndecodableIsDroppedAndCounted(t *testing.T) {
	reg := codec.NewRegistry()
	codec.MustRegister[msg](reg, "msg")
	codec.MustRegister[corrupt](reg, "corrupt", codec.WithSerializer(failingSerializer{}))
	net, clock := newNet(t, inproc.Config{Codec: reg, Logger: slog.New(slog.DiscardHandler)})
	var r recorder
	b := cluster.UniqueAddress{Node: "b", Incarnation: 1}
	a := join(t, net, "a", 1, ignore)
	join(t, net, "b", 1, r.handle)
	must(t, a.Send(b, corrupt{X: 1}))
	must(t, a.Send(b, msg{Seq: 2}))
	settle(net, clock)
	if want := []string{"a:2"}; !slices.Equal(r.got, want) {
		t.Fatalf("got %v, want %v: the node keeps serving after a bad frame", r.got, want)
	}
	if s := net.Stats(); s.Undecodable != 1 {
		t.Fatalf("stats %+v, want 1 undecodable", s)
	}
}

func TestJoinRefusesOldIncarnation(t *testing.T) {
	net, _ := newNet(t, inproc.Config{})
	join(t, net, "a", 2, ignore)
	for _, inc := range []uint64{1, 2} {
		if _, err := net.Join(cluster.UniqueAddress{Node: "a", Incarnation: inc}, ignore); !errors.Is(err, inproc.ErrDuplicateIncarnation) {
			t.Errorf("Join a#%d after a#2: %v, want ErrDuplicateIncarnation", inc, err)
		}
	}
	if _, err := inproc.NewNetwork(inproc.Config{}); !errors.Is(err, cluster.ErrInvalidConfig) {
		t.Errorf("NewNetwork without codec and clock: %v, want ErrInvalidConfig", err)
	}
	for name, tc := range map[string]struct {
		addr   cluster.UniqueAddress
		handle cluster.Handler
	}{
		"no node id": {cluster.UniqueAddress{Incarnation: 1}, ignore},
		"no handler": {cluster.UniqueAddress{Node: "b", Incarnation: 1}, nil},
	} {
		if _, err := net.Join(tc.addr, tc.handle); !errors.Is(err, cluster.ErrInvalidConfig) {
			t.Errorf("Join with %s: %v, want ErrInvalidConfig", name, err)
		}
	}
}

// A message for a replaced incarnation is refused at Send, and what was
// in flight to it is lost rather than handed to its successor.
func TestRestartRefusesOldIncarnation(t *testing.T) {
	net, clock := newNet(t, inproc.Config{Delay: time.Second})
	var r recorder
	a := join(t, net, "a", 1, ignore)
	join(t, net, "b", 1, r.handle)
	must(t, a.Send(cluster.UniqueAddress{Node: "b", Incarnation: 1}, msg{Seq: 1}))
	join(t, net, "b", 2, r.handle)
	if err := a.Send(cluster.UniqueAddress{Node: "b", Incarnation: 1}, msg{Seq: 2}); !errors.Is(err, cluster.ErrStaleIncarnation) {
		t.Fatalf("Send to b#1 after b#2 joined: %v, want ErrStaleIncarnation", err)
	}
	settle(net, clock)
	if len(r.got) != 0 {
		t.Fatalf("b#2 received %v meant for b#1", r.got)
	}
}
