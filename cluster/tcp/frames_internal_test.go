package tcp

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/cluster/frame"
)

// Frames marshalled into a link's queue (after its head) come out of its
// batches whole, in order and with Marshal's bytes, also when each batch leaves some queued and more are queued
// before the next: the bodies left are moved, not overwritten.
func TestFramesLeftBehindABatchStayWhole(t *testing.T) {
	tr := &Transport{cfg: Config{Self: cluster.UniqueAddress{Node: "a", Incarnation: 1}, MaxFrameSize: 4096, MaxBatchBytes: 1000, QueueCapacity: 1000}}
	to := cluster.UniqueAddress{Node: "b", Incarnation: 1}
	l := newLink(tr, to)
	var want, got [][]byte
	send := func(i int) {
		f := frame.Frame{From: cluster.UniqueAddress{Node: "a", Incarnation: 1}, To: to, Manifest: "text",
			Payload: fmt.Appendf(nil, "%d %s", i, strings.Repeat("x", i%37*9))}
		body, err := frame.Marshal(nil, f, 4096)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, body)
		if i%5 == 0 { // a body of the pool's, between those of l.frames
			buf := tr.bodies.Get()
			*buf = append(*buf, body...)
			err = l.enqueue(buf)
		} else {
			err = l.enqueueFrame(f.Manifest, f.Payload)
		}
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
	}
	sent := 0
	for range 40 {
		for range 7 {
			send(sent)
			sent++
		}
		batch, _, ok := l.take(nil, nil, nil)
		if !ok {
			t.Fatal("take found nothing")
		}
		l.mu.Lock()
		l.writing = false
		l.mu.Unlock()
		for len(batch) > 0 {
			n := binary.BigEndian.Uint32(batch)
			got = append(got, batch[4:4+n])
			batch = batch[4+n:]
		}
	}
	for len(l.queue) > 0 {
		batch, _, _ := l.take(nil, nil, nil)
		l.writing = false
		for len(batch) > 0 {
			n := binary.BigEndian.Uint32(batch)
			got = append(got, batch[4:4+n])
			batch = batch[4+n:]
		}
	}
	if !slices.EqualFunc(got, want, bytes.Equal) {
		t.Fatalf("batches carried %d frames, want the %d queued, whole and in order", len(got), len(want))
	}
	if len(l.frames) != 0 {
		t.Fatalf("l.frames keeps %d bytes with nothing queued", len(l.frames))
	}
}

// Every message appends an item to its link's queue: what only a marker or
// a frame begun inline needs stays out of it.
func TestQueueItemIsFiveWords(t *testing.T) {
	if got, want := unsafe.Sizeof(item{}), 5*unsafe.Sizeof(uintptr(0)); got > want {
		t.Fatalf("item is %d bytes, want at most %d", got, want)
	}
}
