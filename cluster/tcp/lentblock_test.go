package tcp_test

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/cluster/frame"
	"github.com/shoal-dev/shoal/cluster/tcp"
	"github.com/shoal-dev/shoal/entity/codec"
)

// pattern is the n-th payload of a stream: its sizes cross
// frame.BlockMax, and its bytes say which payload it is.
func pattern(n int) []byte {
	size := 8 + n*37%(frame.BlockMax+300)
	p := make([]byte, size)
	for i := range p {
		p[i] = byte(n + i)
	}
	return p
}

// sendAll sends count frames of manifest from a to b as fast as a's link
// takes them, payload(i) the i-th, with send.
func sendAll(t *testing.T, count int, send func(i int) error) {
	t.Helper()
	for i := 0; i < count; {
		err := send(i)
		switch {
		case errors.Is(err, cluster.ErrQueueFull):
			runtime.Gosched() // back-pressure: the link writes on
		case err != nil:
			t.Fatal(err)
		default:
			i++
		}
	}
}

// A stream of frames faster than one goroutine reads and hands them over
// goes through the connection's deliverer, a batch at a time, each batch's
// bodies in a block the reader uses again for a later batch: a payload is
// whole while its EncodedHandler runs, whatever the reader reads
// meanwhile. Under the race detector, the reader writing a block that the
// deliverer still reads is also a race.
func TestEncodedPayloadsAreWholeWhileHandled(t *testing.T) {
	reg := codec.NewRegistry()
	nw := newNetwork(t, reg, func(c *tcp.Config) { c.QueueCapacity = 4096 })
	a := nw.start(t, addr("a", 1), func(cluster.UniqueAddress, any) {}, "")
	b := nw.start(t, addr("b", 1), func(cluster.UniqueAddress, any) {}, "")
	const count = 30_000
	var handled atomic.Int64
	var mu sync.Mutex
	var torn []string
	b.HandleEncoded("p", func(_ cluster.UniqueAddress, payload []byte) error {
		n := int(handled.Add(1)) - 1
		if want := pattern(n); !bytes.Equal(payload, want) {
			mu.Lock()
			torn = append(torn, fmt.Sprintf("payload %d: %d bytes, want %d", n, len(payload), len(want)))
			mu.Unlock()
		}
		return nil
	})
	to := addr("b", 1)
	sendAll(t, count, func(i int) error { return a.SendEncoded(to, "p", pattern(i)) })
	eventually(t, "all handled", func() bool { return handled.Load() == count })
	mu.Lock()
	defer mu.Unlock()
	if len(torn) > 0 {
		t.Fatalf("%d of %d payloads changed while handled; first: %s", len(torn), count, torn[0])
	}
}

// kept is a message whose serializer keeps its input, as a zero-copy
// binary serializer would: the decoded value shares the frame's bytes.
type kept []byte

type keeping struct{}

func (keeping) Marshal(v any) ([]byte, error) { return v.(kept), nil }
func (keeping) Unmarshal(data []byte, ptr any) error {
	*ptr.(*kept) = data
	return nil
}

// A message the transport decodes for the Handler may share its frame's
// bytes: its batch's block is left to it, not used again, so what the
// Handler keeps stays as it arrived while the stream goes on.
func TestDecodedMessagesKeepTheirBytes(t *testing.T) {
	reg := codec.NewRegistry()
	codec.MustRegister[kept](reg, "kept", codec.WithSerializer(keeping{}))
	nw := newNetwork(t, reg, func(c *tcp.Config) { c.QueueCapacity = 4096 })
	var mu sync.Mutex
	var got []kept
	a := nw.start(t, addr("a", 1), func(cluster.UniqueAddress, any) {}, "")
	nw.start(t, addr("b", 1), func(_ cluster.UniqueAddress, msg any) {
		mu.Lock()
		got = append(got, msg.(kept))
		mu.Unlock()
	}, "")
	const count = 20_000
	to := addr("b", 1)
	sendAll(t, count, func(i int) error { return a.Send(to, kept(pattern(i))) })
	eventually(t, "all handled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == count
	})
	mu.Lock()
	defer mu.Unlock()
	for i, v := range got {
		if !bytes.Equal(v, pattern(i)) {
			t.Fatalf("message %d of %d changed after it was handled: %d bytes, want %d", i, count, len(v), len(pattern(i)))
		}
	}
}

// A stream of small frames to an EncodedHandler reuses its blocks: it
// allocates far less than its bodies' bytes, where a block per few hundred
// frames left to the collector allocated all of them.
func TestAStreamOfEncodedFramesReusesItsBlocks(t *testing.T) {
	reg := codec.NewRegistry()
	// The default queue: its frames, once grown, stay the link's own.
	nw := newNetwork(t, reg, func(c *tcp.Config) { c.QueueCapacity = tcp.DefaultQueueCapacity })
	a := nw.start(t, addr("a", 1), func(cluster.UniqueAddress, any) {}, "")
	b := nw.start(t, addr("b", 1), func(cluster.UniqueAddress, any) {}, "")
	var handled atomic.Int64
	b.HandleEncoded("p", func(cluster.UniqueAddress, []byte) error { handled.Add(1); return nil })
	to := addr("b", 1)
	payload := bytes.Repeat([]byte{7}, 200)
	// Bursts the queue takes whole: a send refused as ErrQueueFull
	// allocates its error, which is not what is measured.
	const burst = tcp.DefaultQueueCapacity / 2
	stream := func(count int) {
		for range count / burst {
			base := handled.Load()
			for range burst {
				if err := a.SendEncoded(to, "p", payload); err != nil {
					t.Fatal(err)
				}
			}
			eventually(t, "a burst handled", func() bool { return handled.Load() == base+burst })
		}
	}
	// Warm up: the connection, its batches and the link's buffers.
	stream(20 * burst)
	const count = 100 * burst
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	stream(count)
	runtime.ReadMemStats(&after)
	perFrame := float64(after.TotalAlloc-before.TotalAlloc) / count
	if perFrame > float64(len(payload))/4 {
		t.Fatalf("%.0f bytes allocated per %d-byte frame, want its block reused", perFrame, len(payload))
	}
}
