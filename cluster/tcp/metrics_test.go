package tcp_test

import (
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/shoal-dev/shoal/cluster/clustertest"
	"github.com/shoal-dev/shoal/cluster/tcp"
	"github.com/shoal-dev/shoal/internal/metrics/metricstest"
	"github.com/shoal-dev/shoal/internal/poll"
)

// Frames and bytes are counted per peer on both ends: after a flush the
// receiver has read exactly the bytes the sender wrote.
func TestMetricsFramesAndBytesPerPeer(t *testing.T) {
	regs := map[string]*prometheus.Registry{"a": prometheus.NewRegistry(), "b": prometheus.NewRegistry()}
	nw := newNetwork(t, pingRegistry(), func(c *tcp.Config) { c.Metrics = regs[c.Self.Node] })
	a := nw.start(t, addr("a", 1), newRecorder().handle, "")
	got := newRecorder()
	b := nw.start(t, addr("b", 1), got.handle, "")
	for i := 1; i <= 5; i++ {
		sendOrFlush(t, a, b.Self(), clustertest.Ping{Sender: "a", Seq: i})
	}
	flush(t, a, b.Self())
	if n := got.total(); n != 5 {
		t.Fatalf("b received %d pings, want 5", n)
	}
	toB, fromA := map[string]string{"peer": "b"}, map[string]string{"peer": "a"}
	// The writer counts a batch, frames and bytes, after its Write returns,
	// which may be after the receiver has read it and the flush came back:
	// wait for every count this test checks.
	poll.Within(t, 30*time.Second, "the transport's counts", func() error {
		if n := metricstest.Value(t, regs["a"], "shoal_transport_sent_frames_total", toB); n != 5 {
			return fmt.Errorf("a sent %v frames to b, want 5", n)
		}
		if n := metricstest.Value(t, regs["b"], "shoal_transport_received_frames_total", fromA); n != 5 {
			return fmt.Errorf("b received %v frames from a, want 5", n)
		}
		sent := metricstest.Value(t, regs["a"], "shoal_transport_sent_bytes_total", toB)
		received := metricstest.Value(t, regs["b"], "shoal_transport_received_bytes_total", fromA)
		if sent == 0 || sent != received {
			return fmt.Errorf("a wrote %v bytes to b, b read %v from a; want the same, not 0", sent, received)
		}
		return nil
	})
}

// Messages for a peer that cannot be dialled wait in its queue, which the
// gauge reports per peer.
func TestMetricsQueueDepthPerPeer(t *testing.T) {
	reg := prometheus.NewRegistry()
	nw := newNetwork(t, pingRegistry(), func(c *tcp.Config) {
		if c.Self.Node == "a" {
			c.Metrics = reg
		}
	})
	a := nw.start(t, addr("a", 1), newRecorder().handle, "")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close() // nobody listens there now: every dial fails
	nw.dir.set(addr("c", 1), dead)
	for i := 1; i <= 3; i++ {
		if err := a.Send(addr("c", 1), clustertest.Ping{Sender: "a", Seq: i}); err != nil {
			t.Fatal(err)
		}
	}
	if n := metricstest.Value(t, reg, "shoal_transport_queue_depth", map[string]string{"peer": "c"}); n != 3 {
		t.Fatalf("queue depth for c %v, want 3", n)
	}
}
