package tcp_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/cluster/clustertest"
	"github.com/shoal-dev/shoal/cluster/frame"
	"github.com/shoal-dev/shoal/cluster/tcp"
	"github.com/shoal-dev/shoal/entity/codec"
)

// The frames of a manifest with an EncodedHandler reach it undecoded, in
// the link's order whether they were sent as values or encoded; other
// manifests still reach the Handler decoded, and a payload the
// EncodedHandler cannot decode is a bad frame.
func TestEncodedFramesBypassTheCodec(t *testing.T) {
	reg := codec.NewRegistry()
	codec.MustRegister[clustertest.Ping](reg, clustertest.PingManifest)
	codec.MustRegister[string](reg, "text")
	rec := &received{}
	a, b := recordedPair(t, reg, rec)
	record := rec.add
	b.HandleEncoded(clustertest.PingManifest, func(from cluster.UniqueAddress, payload []byte) error {
		v, err := reg.Decode(clustertest.PingManifest, payload)
		if err != nil {
			return err
		}
		record(from.Node + " " + v.(clustertest.Ping).Sender)
		return nil
	})
	encoded := func(p clustertest.Ping) []byte {
		_, payload, err := reg.Encode(p)
		if err != nil {
			t.Fatal(err)
		}
		return payload
	}
	to := addr("b", 1)
	for _, err := range []error{
		a.Send(to, clustertest.Ping{Sender: "sent"}),
		a.SendEncoded(to, clustertest.PingManifest, encoded(clustertest.Ping{Sender: "encoded"})),
		a.SendEncoded(to, clustertest.PingManifest, []byte("not json")),
		a.Send(to, "value"),
		a.Send(to, clustertest.Ping{Sender: "last"}),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"a sent", "a encoded", "handler value", "a last"}
	eventually(t, "all delivered", func() bool { return len(rec.all()) == len(want) })
	if got := rec.all(); !slices.Equal(got, want) {
		t.Fatalf("received %q, want %q", got, want)
	}
	if s := b.Stats(); s.BadFrames != 1 || s.Delivered != 4 {
		t.Fatalf("receiver's stats %+v, want 1 bad frame and 4 delivered", s)
	}
	if err := a.SendEncoded(to, "big", make([]byte, 5000)); !errors.Is(err, cluster.ErrFrameTooLarge) || !errors.Is(err, frame.ErrTooLarge) {
		t.Fatalf("SendEncoded over the frame limit: %v", err)
	}
	// Measured without the last link's head too (a node never sent to),
	// and refused for its size before the node is looked up.
	if err := a.SendEncoded(addr("nowhere", 1), "big", make([]byte, 5000)); !errors.Is(err, cluster.ErrFrameTooLarge) || errors.Is(err, cluster.ErrUnreachable) {
		t.Fatalf("SendEncoded over the frame limit to an unknown node: %v", err)
	}
}

// A connection's reader remembers the handler of the last manifest it
// looked up; a handler registered, replaced or removed while it reads
// still takes the frames that arrive after the change.
func TestEncodedHandlerChangesApplyToTheNextFrame(t *testing.T) {
	reg := codec.NewRegistry()
	codec.MustRegister[string](reg, "text")
	rec := &received{}
	a, b := recordedPair(t, reg, rec)
	record := rec.add
	named := func(name string) cluster.EncodedHandler {
		return func(_ cluster.UniqueAddress, payload []byte) error {
			record(name + " " + string(payload))
			return nil
		}
	}
	to := addr("b", 1)
	send := func(text string) {
		t.Helper()
		_, payload, err := reg.Encode(text)
		if err != nil {
			t.Fatal(err)
		}
		if err := a.SendEncoded(to, "text", payload); err != nil {
			t.Fatal(err)
		}
		if err := a.Flush(t.Context(), to); err != nil {
			t.Fatal(err)
		}
	}
	send("1")
	b.HandleEncoded("text", named("first"))
	send("2")
	b.HandleEncoded("text", named("second"))
	send("3")
	b.HandleEncoded("other", named("other")) // another manifest's change
	send("4")
	b.HandleEncoded("text", nil)
	send("5")
	b.HandleEncoded("text", named("first"))
	send("6")
	want := []string{`handler 1`, `first "2"`, `second "3"`, `second "4"`, `handler 5`, `first "6"`}
	if got := rec.all(); !slices.Equal(got, want) {
		t.Fatalf("received %q, want %q", got, want)
	}
}

// Frames sent encoded and as values, queued while the link is held and
// written in many batches (each batch leaves frames queued behind it),
// arrive whole and in order.
func TestQueuedFramesWrittenInManyBatchesArriveWhole(t *testing.T) {
	reg := codec.NewRegistry()
	codec.MustRegister[string](reg, "text")
	nw := newNetwork(t, reg, func(c *tcp.Config) { c.MaxBatchBytes = 1000 })
	nw.capacity = 200
	var mu sync.Mutex
	var got []string
	a := nw.start(t, addr("a", 1), func(cluster.UniqueAddress, any) {}, "")
	nw.start(t, addr("b", 1), func(_ cluster.UniqueAddress, msg any) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, msg.(string))
	}, "")
	to := addr("b", 1)
	if err := a.HoldLink(to); err != nil {
		t.Fatal(err)
	}
	var want []string
	for i := range 200 {
		text := fmt.Sprintf("%d %s", i, strings.Repeat("x", i%37*9))
		want = append(want, text)
		var err error
		if i%5 == 0 {
			err = a.Send(to, text)
		} else {
			_, payload, encErr := reg.Encode(text)
			if encErr != nil {
				t.Fatal(encErr)
			}
			err = a.SendEncoded(to, "text", payload)
		}
		if err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	a.ReleaseLink(to)
	if err := a.Flush(t.Context(), to); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(got, want) {
		t.Fatalf("received %d messages, want %d in order: %q", len(got), len(want), got)
	}
	if st := a.Stats(); st.Batches < 20 {
		t.Fatalf("%d batches: the queue went out in too few to leave frames behind", st.Batches)
	}
}

// SendEncoded on a full queue reports ErrQueueFull, and the frame is not
// sent.
func TestSendEncodedToAFullQueue(t *testing.T) {
	reg := codec.NewRegistry()
	codec.MustRegister[string](reg, "text")
	nw := newNetwork(t, reg, nil)
	nw.capacity = 3
	a := nw.start(t, addr("a", 1), func(cluster.UniqueAddress, any) {}, "")
	var got atomic.Int64
	nw.start(t, addr("b", 1), func(cluster.UniqueAddress, any) { got.Add(1) }, "")
	to := addr("b", 1)
	if err := a.HoldLink(to); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		err := a.SendEncoded(to, "text", []byte(`"x"`))
		if full := errors.Is(err, cluster.ErrQueueFull); full != (i == 3) || (err != nil && !full) {
			t.Fatalf("send %d of a queue of 3: %v", i, err)
		}
	}
	a.ReleaseLink(to)
	if err := a.Flush(t.Context(), to); err != nil {
		t.Fatal(err)
	}
	if n := got.Load(); n != 3 {
		t.Fatalf("%d delivered, want the 3 queued", n)
	}
}

// received records what a handler got, in order, for any goroutine.
type received struct {
	mu  sync.Mutex
	got []string
}

func (r *received) add(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, s)
}

func (r *received) all() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

// recordedPair starts a and b on a network of reg's; b's Handler records
// each message, a string, in rec as "handler" and the message.
func recordedPair(t *testing.T, reg *codec.Registry, rec *received) (a, b *tcp.Transport) {
	t.Helper()
	nw := newNetwork(t, reg, nil)
	a = nw.start(t, addr("a", 1), func(cluster.UniqueAddress, any) {}, "")
	b = nw.start(t, addr("b", 1), func(_ cluster.UniqueAddress, msg any) { rec.add("handler " + msg.(string)) }, "")
	return a, b
}
