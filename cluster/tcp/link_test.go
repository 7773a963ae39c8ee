package tcp_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/cluster/clustertest"
	"github.com/shoal-dev/shoal/cluster/tcp"
	"github.com/shoal-dev/shoal/entity/codec"
)

func addr(node string, inc uint64) cluster.UniqueAddress {
	return cluster.UniqueAddress{Node: node, Incarnation: inc}
}

func pingRegistry() *codec.Registry {
	reg := codec.NewRegistry()
	codec.MustRegister[clustertest.Ping](reg, clustertest.PingManifest)
	return reg
}

// recorder records the pings one transport received.
type recorder struct {
	mu   sync.Mutex
	seqs map[string][]int
}

func newRecorder() *recorder { return &recorder{seqs: make(map[string][]int)} }

func (r *recorder) handle(_ cluster.UniqueAddress, msg any) {
	p := msg.(clustertest.Ping)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seqs[p.Sender] = append(r.seqs[p.Sender], p.Seq)
}

func (r *recorder) from(sender string) []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.seqs[sender])
}

func (r *recorder) total() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, s := range r.seqs {
		n += len(s)
	}
	return n
}

func flush(t *testing.T, tr *tcp.Transport, to cluster.UniqueAddress) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	if err := tr.Flush(ctx, to); err != nil {
		t.Fatalf("Flush %s → %s: %v", tr.Self(), to, err)
	}
}

// sendOrFlush sends p, flushing the link while its queue is full.
func sendOrFlush(t *testing.T, tr *tcp.Transport, to cluster.UniqueAddress, p clustertest.Ping) {
	t.Helper()
	for {
		err := tr.Send(to, p)
		if !errors.Is(err, cluster.ErrQueueFull) {
			if err != nil {
				t.Errorf("Send #%d: %v", p.Seq, err)
			}
			return
		}
		flush(t, tr, to)
	}
}

// disorder describes the first place s does not increase, or is "".
func disorder(s []int) string {
	for i := 1; i < len(s); i++ {
		if s[i] <= s[i-1] {
			return fmt.Sprintf("%d after %d (at %d of %d received)", s[i], s[i-1], i, len(s))
		}
	}
	return ""
}

// Closing the TCP connection under a link (at either end) loses at most
// what was in flight: the link redials, what is delivered stays in order,
// and everything sent once the link is back arrives.
func TestReconnectAfterBreakKeepsOrder(t *testing.T) {
	for _, side := range []string{"sender", "receiver"} {
		t.Run("closed by the "+side, func(t *testing.T) {
			nw := newNetwork(t, pingRegistry(), nil)
			a := nw.start(t, addr("a", 1), func(cluster.UniqueAddress, any) {}, "")
			got := newRecorder()
			b := nw.start(t, addr("b", 1), got.handle, "")
			const rounds, perRound = 5, 200
			seq := 0
			for round := range rounds {
				for range perRound {
					seq++
					sendOrFlush(t, a, b.Self(), clustertest.Ping{Sender: "a", Seq: seq})
				}
				if round < rounds-1 {
					if side == "sender" {
						a.BreakConns("b", false)
					} else {
						b.BreakConns("a", false)
					}
					flush(t, a, b.Self()) // redials: the next round goes on a new connection
				}
			}
			flush(t, a, b.Self())
			// The last round was sent after a flush had reconnected the
			// link, and nothing broke it: all of it arrives.
			lastRound := make([]int, 0, perRound)
			for i := seq - perRound + 1; i <= seq; i++ {
				lastRound = append(lastRound, i)
			}
			seqs := got.from("a")
			if d := disorder(seqs); d != "" {
				t.Fatalf("received out of order or twice: %s", d)
			}
			if tail := seqs[max(0, len(seqs)-perRound):]; !slices.Equal(tail, lastRound) {
				t.Fatalf("the last round after the breaks: %v", tail)
			}
			st := a.Stats()
			if st.Dials != rounds {
				t.Errorf("Dials = %d, want %d: one per connection", st.Dials, rounds)
			}
			// Lost counts what the sender knows it lost; bytes in a socket
			// buffer when the connection broke are lost unknown to it.
			if int(st.Sent) != seq || int(st.Lost)+len(seqs) > seq {
				t.Errorf("sent %d, delivered %d, lost %d: more than the %d sent", st.Sent, len(seqs), st.Lost, seq)
			}
		})
	}
}

// A sender racing repeated breaks: whatever arrives is in order.
func TestConcurrentBreaksKeepOrder(t *testing.T) {
	nw := newNetwork(t, pingRegistry(), nil)
	a := nw.start(t, addr("a", 1), func(cluster.UniqueAddress, any) {}, "")
	got := newRecorder()
	b := nw.start(t, addr("b", 1), got.handle, "")
	const n = 3000
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 1; i <= n; i++ {
			sendOrFlush(t, a, b.Self(), clustertest.Ping{Sender: "a", Seq: i})
		}
	}()
	breaks := 0
	for running := true; running; breaks++ {
		select {
		case <-done:
			running = false
		default:
			a.BreakConns("b", false)
			b.BreakConns("a", false)
			flush(t, a, b.Self())
		}
	}
	flush(t, a, b.Self())
	if d := disorder(got.from("a")); d != "" {
		t.Fatalf("after %d breaks, received out of order or twice: %s", breaks, d)
	}
}

// A restarted peer (a new incarnation listening on the same address,
// while the sender's directory still names the old one) gets nothing
// meant for the old one: the handshake refuses the link, its queue is
// lost, and later Sends to the old incarnation fail with
// ErrStaleIncarnation.
func TestRestartedPeerGetsNothingForTheOld(t *testing.T) {
	nw := newNetwork(t, pingRegistry(), nil)
	a := nw.start(t, addr("a", 1), func(cluster.UniqueAddress, any) {}, "")
	gotB1 := newRecorder()
	b1 := nw.start(t, addr("b", 1), gotB1.handle, "")
	endpoint := b1.Addr().String()

	sendOrFlush(t, a, b1.Self(), clustertest.Ping{Sender: "a", Seq: 1})
	flush(t, a, b1.Self())
	if err := b1.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	// b restarts at the same address; the directory is not told (a
	// membership view that lags), so a still resolves b#1 to it.
	gotB2 := newRecorder()
	b2 := nw.start(t, addr("b", 2), gotB2.handle, endpoint)
	nw.dir.set(addr("b", 1), endpoint)

	// Sent while a's link may still believe in b#1: nil or stale.
	for i := 2; i <= 10; i++ {
		if err := a.Send(addr("b", 1), clustertest.Ping{Sender: "a", Seq: i}); err != nil && !errors.Is(err, cluster.ErrStaleIncarnation) {
			t.Fatalf("Send #%d to b#1: %v", i, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	if err := a.Flush(ctx, addr("b", 1)); !errors.Is(err, cluster.ErrStaleIncarnation) {
		t.Fatalf("Flush to b#1 after its restart: %v, want ErrStaleIncarnation", err)
	}
	if err := a.Send(addr("b", 1), clustertest.Ping{Sender: "a", Seq: 11}); !errors.Is(err, cluster.ErrStaleIncarnation) {
		t.Fatalf("Send to b#1 once the restart is known: %v, want ErrStaleIncarnation", err)
	}
	nw.dir.set(addr("b", 2), endpoint)
	sendOrFlush(t, a, b2.Self(), clustertest.Ping{Sender: "a", Seq: 12})
	flush(t, a, b2.Self())
	if got := gotB2.from("a"); !slices.Equal(got, []int{12}) {
		t.Fatalf("b#2 received %v, want [12] (nothing meant for b#1)", got)
	}
	if got := gotB1.from("a"); !slices.Equal(got, []int{1}) {
		t.Fatalf("b#1 received %v, want [1]", got)
	}
	if b2.Stats().RefusedHandshakes == 0 {
		t.Error("b#2 refused no handshake, yet a dialled it for b#1")
	}
}

// A message queued for an incarnation that restarts while the link is
// held never reaches the successor, even though the successor listens at
// the endpoint the directory still gives.
func TestQueuedForOldIncarnationNotDeliveredToNew(t *testing.T) {
	nw := newNetwork(t, pingRegistry(), nil)
	a := nw.start(t, addr("a", 1), func(cluster.UniqueAddress, any) {}, "")
	b1 := nw.start(t, addr("b", 1), func(cluster.UniqueAddress, any) {}, "")
	endpoint := b1.Addr().String()
	if err := a.HoldLink(b1.Self()); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 5; i++ {
		sendOrFlush(t, a, b1.Self(), clustertest.Ping{Sender: "a", Seq: i})
	}
	b1.Close(context.Background())
	gotB2 := newRecorder()
	nw.start(t, addr("b", 2), gotB2.handle, endpoint)
	nw.dir.set(addr("b", 1), endpoint) // the directory lags
	a.ReleaseLink(b1.Self())
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	if err := a.Flush(ctx, b1.Self()); !errors.Is(err, cluster.ErrStaleIncarnation) {
		t.Fatalf("Flush: %v, want ErrStaleIncarnation", err)
	}
	if n := gotB2.total(); n != 0 {
		t.Fatalf("b#2 received %d messages meant for b#1", n)
	}
	if lost := a.Stats().Lost; lost != 5 {
		t.Errorf("Lost = %d, want the 5 queued for b#1", lost)
	}
}

// A new incarnation that dials in, and that the directory confirms, tells
// the listener its predecessor is dead: the listener's idle link to the
// old one dies, and Sends to it fail at once with ErrStaleIncarnation,
// without waiting for that link to dial again.
func TestIncomingSuccessorMakesPredecessorStale(t *testing.T) {
	nw := newNetwork(t, pingRegistry(), nil)
	got := newRecorder()
	a := nw.start(t, addr("a", 1), got.handle, "")
	b1 := nw.start(t, addr("b", 1), func(cluster.UniqueAddress, any) {}, "")
	sendOrFlush(t, a, b1.Self(), clustertest.Ping{Sender: "a", Seq: 1})
	flush(t, a, b1.Self())
	b1.Close(context.Background())
	b2 := nw.start(t, addr("b", 2), func(cluster.UniqueAddress, any) {}, "") // the directory names b#2
	sendOrFlush(t, b2, a.Self(), clustertest.Ping{Sender: "b", Seq: 1})
	flush(t, b2, a.Self())
	if err := a.Send(addr("b", 1), clustertest.Ping{Sender: "a", Seq: 2}); !errors.Is(err, cluster.ErrStaleIncarnation) {
		t.Fatalf("Send to b#1 after b#2 dialled in: %v, want ErrStaleIncarnation", err)
	}
}
