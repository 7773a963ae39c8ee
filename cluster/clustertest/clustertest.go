// Package clustertest holds the conformance suite every cluster.Transport
// passes: the in-process transport now, the network transport later.
//
//	func TestTransportConformance(t *testing.T) {
//		clustertest.RunTransport(t, func(t *testing.T, reg *codec.Registry) clustertest.Harness {
//			return newHarness(t, reg) // a network of transports using reg
//		})
//	}
//
// The suite registers its own message type in the registry it hands the
// constructor, which is called once per subtest.
package clustertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/entity/codec"
)

// Harness drives one network of transports for the suite.
type Harness interface {
	// Start starts the incarnation addr, delivering its messages to h, and
	// returns its transport. The suite closes transports it is done with;
	// the harness cleans up the rest with t.Cleanup.
	Start(t *testing.T, addr cluster.UniqueAddress, h cluster.Handler) cluster.Transport
	// Settle returns once every message sent so far on a link that is not
	// held has been handed to its handler or lost.
	Settle(t *testing.T)
	// Hold stalls the link from → to without losing anything: its
	// messages stay queued, counting against its bound, until Release.
	Hold(from, to cluster.UniqueAddress)
	// Release ends a Hold.
	Release(from, to cluster.UniqueAddress)
	// Break breaks the links between node ids a and b: what is queued or
	// in flight on them may be lost; later sends go through.
	Break(a, b string)
	// QueueCapacity is the per-link bound the harness configured; the
	// suite sends that many messages on one link, so keep it small.
	QueueCapacity() int
	// MaxFrameSize is the frame size limit the harness configured.
	MaxFrameSize() int
}

// Ping is the suite's message.
type Ping struct {
	Sender string
	Seq    int
	Data   []byte
}

// PingManifest is the manifest Ping is registered under.
const PingManifest = "shoal.clustertest.Ping"

// unregistered is a message type the suite never registers.
type unregistered struct{ X int }

type received struct {
	from cluster.UniqueAddress
	ping Ping
}

// inbox records what one transport received; handlers may run on any goroutine.
type inbox struct {
	mu      sync.Mutex
	got     []received
	active  int
	overlap bool
	foreign []any
}

func (b *inbox) handle(from cluster.UniqueAddress, msg any) {
	b.mu.Lock()
	b.active++
	if b.active > 1 {
		b.overlap = true
	}
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		b.active--
		b.mu.Unlock()
	}()
	p, ok := msg.(Ping)
	b.mu.Lock()
	defer b.mu.Unlock()
	if !ok {
		b.foreign = append(b.foreign, msg)
		return
	}
	b.got = append(b.got, received{from, p})
}

func (b *inbox) received() []received {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.got)
}

// seqs lists the sequence numbers received from sender, in arrival order.
func (b *inbox) seqs(sender string) []int {
	var out []int
	for _, r := range b.received() {
		if r.ping.Sender == sender {
			out = append(out, r.ping.Seq)
		}
	}
	return out
}

func (b *inbox) check(t *testing.T) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.overlap {
		t.Error("two messages were handled at once by one transport")
	}
	if len(b.foreign) > 0 {
		t.Errorf("received messages that are not Pings: %v", b.foreign)
	}
}

func addr(node string, inc uint64) cluster.UniqueAddress {
	return cluster.UniqueAddress{Node: node, Incarnation: inc}
}

// RunTransport runs the Transport suite as subtests of t.
func RunTransport(t *testing.T, newHarness func(t *testing.T, reg *codec.Registry) Harness) {
	tests := []struct {
		name string
		fn   func(t *testing.T, h Harness)
	}{
		{"DeliversADecodedCopy", testDecodedCopy},
		{"UnregisteredTypeFailsOnSend", testUnregistered},
		{"OversizedFrameFailsOnSend", testOversized},
		{"OrderPerLink", testOrderPerLink},
		{"ConcurrentSendersKeepTheirOrder", testConcurrentSenders},
		{"HandlerMaySend", testHandlerMaySend},
		{"FullQueueIsATypedErrorPerLink", testQueueFull},
		{"BreakLosesButKeepsOrder", testBreak},
		{"StaleIncarnationNeverReachesSuccessor", testStaleIncarnation},
		{"UnknownNodeUnreachable", testUnknownNode},
		{"ClosedTransport", testClosed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			reg := codec.NewRegistry()
			codec.MustRegister[Ping](reg, PingManifest)
			tc.fn(t, newHarness(t, reg))
		})
	}
}

func start(t *testing.T, h Harness, a cluster.UniqueAddress) (cluster.Transport, *inbox) {
	t.Helper()
	b := &inbox{}
	tr := h.Start(t, a, b.handle)
	if tr.Self() != a {
		t.Fatalf("Self() = %s, want %s", tr.Self(), a)
	}
	return tr, b
}

func send(t *testing.T, tr cluster.Transport, to cluster.UniqueAddress, p Ping) {
	t.Helper()
	if err := tr.Send(to, p); err != nil {
		t.Fatalf("Send %s → %s #%d: %v", tr.Self(), to, p.Seq, err)
	}
}

func upTo(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i + 1
	}
	return out
}

func testDecodedCopy(t *testing.T, h Harness) {
	a, _ := start(t, h, addr("a", 1))
	_, inB := start(t, h, addr("b", 1))
	data := []byte("original")
	send(t, a, addr("b", 1), Ping{Sender: "a", Seq: 1, Data: data})
	copy(data, "mutated!") // after Send: the message must already be encoded
	h.Settle(t)
	got := inB.received()
	if len(got) != 1 {
		t.Fatalf("b received %d messages, want 1", len(got))
	}
	if got[0].from != addr("a", 1) {
		t.Errorf("from = %s, want a#1", got[0].from)
	}
	if string(got[0].ping.Data) != "original" {
		t.Errorf("b received %q: the sender's later write reached it (shared memory)", got[0].ping.Data)
	}
	if len(got[0].ping.Data) > 0 && &got[0].ping.Data[0] == &data[0] {
		t.Error("b received the sender's own slice")
	}
	inB.check(t)
}

func testUnregistered(t *testing.T, h Harness) {
	a, _ := start(t, h, addr("a", 1))
	_, inB := start(t, h, addr("b", 1))
	err := a.Send(addr("b", 1), unregistered{X: 1})
	if !errors.Is(err, codec.ErrUnregisteredType) {
		t.Fatalf("Send of an unregistered type: %v, want codec.ErrUnregisteredType", err)
	}
	h.Settle(t)
	if n := len(inB.received()); n != 0 {
		t.Fatalf("b received %d messages", n)
	}
	inB.check(t)
}

func testOversized(t *testing.T, h Harness) {
	a, _ := start(t, h, addr("a", 1))
	_, inB := start(t, h, addr("b", 1))
	big := Ping{Sender: "a", Seq: 1, Data: make([]byte, h.MaxFrameSize())}
	if err := a.Send(addr("b", 1), big); !errors.Is(err, cluster.ErrFrameTooLarge) {
		t.Fatalf("Send of a message over the frame limit: %v, want cluster.ErrFrameTooLarge", err)
	}
	send(t, a, addr("b", 1), Ping{Sender: "a", Seq: 2, Data: make([]byte, h.MaxFrameSize()/4)})
	h.Settle(t)
	if got := inB.seqs("a"); !slices.Equal(got, []int{2}) {
		t.Fatalf("b received %v, want [2]: the oversized one refused, the link still working", got)
	}
	inB.check(t)
}

func testOrderPerLink(t *testing.T, h Harness) {
	const n = 100
	a, _ := start(t, h, addr("a", 1))
	c, _ := start(t, h, addr("c", 1))
	b, inB := start(t, h, addr("b", 1))
	_, inD := start(t, h, addr("d", 1))
	for i := 1; i <= n; i++ {
		send(t, a, addr("b", 1), Ping{Sender: "a", Seq: i})
		send(t, c, addr("b", 1), Ping{Sender: "c", Seq: i})
		send(t, a, addr("d", 1), Ping{Sender: "a", Seq: i})
		send(t, b, addr("d", 1), Ping{Sender: "b", Seq: i})
		if i%10 == 0 {
			h.Settle(t)
		}
	}
	h.Settle(t)
	for _, tc := range []struct {
		in     *inbox
		sender string
	}{{inB, "a"}, {inB, "c"}, {inD, "a"}, {inD, "b"}} {
		if got := tc.in.seqs(tc.sender); !slices.Equal(got, upTo(n)) {
			t.Errorf("from %s: %v, want 1..%d in order", tc.sender, got, n)
		}
	}
	inB.check(t)
	inD.check(t)
}

func testConcurrentSenders(t *testing.T, h Harness) {
	const goroutines, n = 4, 50
	a, _ := start(t, h, addr("a", 1))
	_, inB := start(t, h, addr("b", 1))
	// Rounds small enough for the queue bound, settled in between.
	round := max(1, min(n, h.QueueCapacity()/goroutines))
	for lo := 1; lo <= n; lo += round {
		var wg sync.WaitGroup
		errs := make(chan error, goroutines)
		for g := range goroutines {
			wg.Go(func() {
				for i := lo; i < lo+round && i <= n; i++ {
					if err := a.Send(addr("b", 1), Ping{Sender: fmt.Sprint("g", g), Seq: i}); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("Send: %v", err)
		}
		h.Settle(t)
	}
	for g := range goroutines {
		if got := inB.seqs(fmt.Sprint("g", g)); !slices.Equal(got, upTo(n)) {
			t.Errorf("goroutine %d: %v, want 1..%d in order", g, got, n)
		}
	}
	inB.check(t)
}

// A handler may Send (a reply, a forward): a transport must not hold a
// lock of its own, or its delivery slot, in a way that Send waits for.
func testHandlerMaySend(t *testing.T, h Harness) {
	const n = 10
	a, inA := start(t, h, addr("a", 1))
	inB := &inbox{}
	var (
		b    cluster.Transport
		mu   sync.Mutex
		errs []error
	)
	b = h.Start(t, addr("b", 1), func(from cluster.UniqueAddress, msg any) {
		inB.handle(from, msg)
		p, ok := msg.(Ping)
		if !ok {
			return
		}
		if err := b.Send(from, Ping{Sender: "b", Seq: p.Seq}); err != nil {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}
	})
	for i := 1; i <= n; i++ {
		send(t, a, addr("b", 1), Ping{Sender: "a", Seq: i})
	}
	h.Settle(t) // the pings, and the replies they cause
	h.Settle(t)
	mu.Lock()
	defer mu.Unlock()
	if len(errs) > 0 {
		t.Fatalf("Send from a handler: %v", errs)
	}
	if got := inA.seqs("b"); !slices.Equal(got, upTo(n)) {
		t.Fatalf("a received replies %v, want 1..%d in order", got, n)
	}
	inA.check(t)
	inB.check(t)
}

func testQueueFull(t *testing.T, h Harness) {
	capacity := h.QueueCapacity()
	a, _ := start(t, h, addr("a", 1))
	_, inB := start(t, h, addr("b", 1))
	_, inC := start(t, h, addr("c", 1))
	h.Hold(addr("a", 1), addr("b", 1))
	for i := 1; i <= capacity; i++ {
		send(t, a, addr("b", 1), Ping{Sender: "a", Seq: i})
	}
	err := a.Send(addr("b", 1), Ping{Sender: "a", Seq: capacity + 1})
	if !errors.Is(err, cluster.ErrQueueFull) {
		t.Fatalf("Send on a full link: %v, want cluster.ErrQueueFull", err)
	}
	// The bound is per link: a → c still works.
	send(t, a, addr("c", 1), Ping{Sender: "a", Seq: 1})
	h.Settle(t)
	if got := inC.seqs("a"); !slices.Equal(got, []int{1}) {
		t.Fatalf("c received %v while a → b was full, want [1]", got)
	}
	h.Release(addr("a", 1), addr("b", 1))
	h.Settle(t)
	if got := inB.seqs("a"); !slices.Equal(got, upTo(capacity)) {
		t.Fatalf("b received %v, want 1..%d: what the full queue accepted, and not the refused one", got, capacity)
	}
	// Once drained, the link takes messages again.
	send(t, a, addr("b", 1), Ping{Sender: "a", Seq: capacity + 2})
	h.Settle(t)
	if got := inB.seqs("a"); len(got) != capacity+1 || got[capacity] != capacity+2 {
		t.Fatalf("after draining: %v", got)
	}
	inB.check(t)
}

func testBreak(t *testing.T, h Harness) {
	n := min(50, h.QueueCapacity())
	a, _ := start(t, h, addr("a", 1))
	_, inB := start(t, h, addr("b", 1))
	h.Hold(addr("a", 1), addr("b", 1))
	for i := 1; i <= n; i++ {
		send(t, a, addr("b", 1), Ping{Sender: "a", Seq: i})
	}
	h.Break("a", "b")
	h.Release(addr("a", 1), addr("b", 1))
	for i := n + 1; i <= 2*n; i++ {
		send(t, a, addr("b", 1), Ping{Sender: "a", Seq: i})
	}
	h.Settle(t)
	got := inB.seqs("a")
	if !slices.IsSorted(got) || len(slices.Compact(slices.Clone(got))) != len(got) {
		t.Fatalf("b received %v: not strictly increasing (reordered or duplicated)", got)
	}
	// What was sent after the break arrives: the link works again.
	var after []int
	for _, s := range got {
		if s > n {
			after = append(after, s)
		}
	}
	want := make([]int, 0, n)
	for i := n + 1; i <= 2*n; i++ {
		want = append(want, i)
	}
	if !slices.Equal(after, want) {
		t.Fatalf("after the break b received %v, want %d..%d", after, n+1, 2*n)
	}
	inB.check(t)
}

func testStaleIncarnation(t *testing.T, h Harness) {
	a, _ := start(t, h, addr("a", 1))
	b1, inB1 := start(t, h, addr("b", 1))
	h.Hold(addr("a", 1), addr("b", 1))
	for i := 1; i <= 3; i++ {
		send(t, a, addr("b", 1), Ping{Sender: "a", Seq: i})
	}
	if err := b1.Close(context.Background()); err != nil {
		t.Fatalf("Close b#1: %v", err)
	}
	_, inB2 := start(t, h, addr("b", 2))
	h.Release(addr("a", 1), addr("b", 1))
	h.Settle(t)
	if err := a.Send(addr("b", 1), Ping{Sender: "a", Seq: 4}); err != nil && !errors.Is(err, cluster.ErrStaleIncarnation) {
		t.Fatalf("Send to a dead incarnation: %v, want nil or cluster.ErrStaleIncarnation", err)
	}
	h.Settle(t)
	if got := inB2.received(); len(got) != 0 {
		t.Fatalf("b#2 received %v, which was addressed to b#1", got)
	}
	if got := inB1.received(); len(got) != 0 {
		t.Fatalf("b#1 received %v after it closed", got)
	}
	send(t, a, addr("b", 2), Ping{Sender: "a", Seq: 5})
	h.Settle(t)
	if got := inB2.seqs("a"); !slices.Equal(got, []int{5}) {
		t.Fatalf("b#2 received %v, want [5]", got)
	}
	inB2.check(t)
}

func testUnknownNode(t *testing.T, h Harness) {
	a, _ := start(t, h, addr("a", 1))
	err := a.Send(addr("nobody", 1), Ping{Sender: "a", Seq: 1})
	if !errors.Is(err, cluster.ErrUnreachable) {
		t.Fatalf("Send to a node never started: %v, want cluster.ErrUnreachable", err)
	}
}

func testClosed(t *testing.T, h Harness) {
	a, inA := start(t, h, addr("a", 1))
	b, inB := start(t, h, addr("b", 1))
	if err := a.Close(context.Background()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := a.Close(context.Background()); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := a.Send(addr("b", 1), Ping{Sender: "a", Seq: 1}); !errors.Is(err, cluster.ErrClosed) {
		t.Fatalf("Send on a closed transport: %v, want cluster.ErrClosed", err)
	}
	if err := b.Send(addr("a", 1), Ping{Sender: "b", Seq: 1}); err != nil && !errors.Is(err, cluster.ErrStaleIncarnation) && !errors.Is(err, cluster.ErrUnreachable) {
		t.Fatalf("Send to a closed incarnation: %v", err)
	}
	h.Settle(t)
	if got := inB.received(); len(got) != 0 {
		t.Fatalf("b received %v from a closed transport", got)
	}
	if got := inA.received(); len(got) != 0 {
		t.Fatalf("a received %v after it closed", got)
	}
}
