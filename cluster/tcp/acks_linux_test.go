//go:build linux

package tcp_test

import (
	"slices"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/cluster"
)

// The socket of an accepted connection delays its ACKs: a link carries
// data one way, and Linux would otherwise answer each small frame with an
// ACK of its own, one more loopback packet per message for both ends. The
// kernel leaves the delaying mode when its delayed-ACK timer fires (after
// a quiet spell), so the reader puts the socket back into it.
func TestInboundConnectionDelaysItsAcks(t *testing.T) {
	got := make(chan int, 16)
	nw := newNetwork(t, benchRegistry(), nil)
	a := nw.start(t, addr("a", 1), func(cluster.UniqueAddress, any) {}, "")
	b := nw.start(t, addr("b", 1), func(_ cluster.UniqueAddress, msg any) { got <- msg.(benchMsg).Seq }, "")
	send := func(i int) {
		t.Helper()
		if err := a.Send(addr("b", 1), benchMsg{EntityID: "e", Seq: i}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-got:
		case <-time.After(deadline):
			t.Fatalf("message %d did not arrive", i)
		}
	}
	send(0)
	// The handshake's answer made the connection look interactive; a quiet
	// spell longer than the kernel's delayed-ACK timeout (40 ms and up)
	// ends that, as it does on a link that has been idle. The kernel's
	// timer is real time: the test watches the socket until it fires.
	quiet := time.Now().Add(2 * time.Second)
	for q := b.InboundQuickAck("a"); !slices.Equal(q, []int{1}); q = b.InboundQuickAck("a") {
		if time.Now().After(quiet) {
			t.Skipf("TCP_QUICKACK after a quiet spell of 2 s: %v; this kernel keeps delaying ACKs anyway", q)
		}
		time.Sleep(5 * time.Millisecond)
	}
	// The read that takes the next frame may still answer it at once; the
	// reads after it delay. Each check runs within the 40 ms before the
	// kernel's timer could end the delaying mode again.
	var seen [][]int
	for i := 1; i <= 5; i++ {
		send(i)
		q := b.InboundQuickAck("a")
		if slices.Equal(q, []int{0}) {
			return
		}
		seen = append(seen, q)
	}
	t.Fatalf("TCP_QUICKACK of the connection from a after each message: %v, want [0] (ACKs delayed)", seen)
}
