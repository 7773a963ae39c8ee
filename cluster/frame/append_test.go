package frame_test

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"unsafe"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/cluster/frame"
	"github.com/shoal-dev/shoal/entity/codec"
)

// AppendEncode writes the bytes Encode writes, whatever the size of the
// payload's length prefix, after what dst holds; a frame over the limit
// or an unregistered type leaves dst as it was.
func TestAppendEncodeWritesEncodesBytes(t *testing.T) {
	reg := codec.NewRegistry()
	codec.MustRegister[string](reg, "s")
	for _, n := range []int{0, 100, 125, 126, 200, 20000} {
		msg := strings.Repeat("x", n)
		want, err := frame.Encode(reg, a1, b2, msg, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		got, err := frame.AppendEncode([]byte("head"), reg, a1, b2, msg, 1<<20)
		if err != nil || !bytes.Equal(got, append([]byte("head"), want...)) {
			t.Fatalf("payload of %d bytes: AppendEncode = %x, %v\nwant head+%x", n+2, got, err, want)
		}
		// A payload encoded by its sender (tcp's SendEncoded) makes the same frame.
		manifest, payload, err := reg.Encode(msg)
		if err != nil {
			t.Fatal(err)
		}
		marshalled, err := frame.Marshal(nil, frame.Frame{From: a1, To: b2, Manifest: manifest, Payload: payload}, 1<<20)
		if err != nil || !bytes.Equal(marshalled, want) {
			t.Fatalf("payload of %d bytes: Marshal = %x, %v\nwant %x", n+2, marshalled, err, want)
		}
	}
	got, err := frame.AppendEncode([]byte("head"), reg, a1, b2, strings.Repeat("x", 100), 50)
	if !errors.Is(err, frame.ErrTooLarge) || string(got) != "head" {
		t.Fatalf("over the limit: %q, %v", got, err)
	}
	got, err = frame.AppendEncode([]byte("head"), reg, a1, b2, 1.5, 1<<20)
	if !errors.Is(err, codec.ErrUnregisteredType) || string(got) != "head" {
		t.Fatalf("unregistered: %q, %v", got, err)
	}
}

// A Reader cuts small bodies from blocks it allocates now and then: a
// stream of small frames costs far less than an allocation per frame.
func TestReaderAllocatesBlocksNotBodies(t *testing.T) {
	var stream bytes.Buffer
	const frames = 1000
	for range frames {
		if err := frame.WriteFrame(&stream, sample(), 1024); err != nil {
			t.Fatal(err)
		}
	}
	data := stream.Bytes()
	src := bytes.NewReader(data)
	r := frame.NewReader(src, 1024)
	allocs := testing.AllocsPerRun(10, func() {
		src.Reset(data)
		for range frames {
			if _, err := r.Next(); err != nil {
				t.Fatal(err)
			}
		}
	})
	if perFrame := allocs / frames; perFrame > 0.1 {
		t.Fatalf("%.2f allocations per frame, want blocks shared by many", perFrame)
	}
}

// A Reader lent a block cuts small bodies from it while it has room, and
// from blocks of its own once it has none; a large body is its own, in
// or out of a lent block. Reading into the same block again allocates
// nothing, through a buffer (a connection's reader) or not.
func TestReaderCutsBodiesFromTheLentBlock(t *testing.T) {
	small, large := sample(), sample()
	large.Payload = bytes.Repeat([]byte{9}, frame.BlockMax+1)
	var stream bytes.Buffer
	for _, f := range []frame.Frame{small, small, large, small} {
		if err := frame.WriteFrame(&stream, f, 4*frame.BlockMax); err != nil {
			t.Fatal(err)
		}
	}
	data := stream.Bytes()
	smallBody := frame.Size(&small)
	for _, buffered := range []bool{false, true} {
		src := bytes.NewReader(data)
		var in io.Reader = src
		if buffered {
			in = bufio.NewReaderSize(src, 64<<10)
		}
		r := frame.NewReader(in, 4*frame.BlockMax)
		if r.Room() != 0 {
			t.Fatalf("a Reader lent no block has Room %d, want 0", r.Room())
		}
		// Room for two small bodies and a part of a third.
		block := make([]byte, 2*smallBody+smallBody/2)
		r.UseBlock(block)
		inBlock := func(p []byte) bool {
			start, end := uintptr(unsafe.Pointer(&block[0])), uintptr(unsafe.Pointer(&block[len(block)-1]))
			return len(p) > 0 && uintptr(unsafe.Pointer(&p[0])) >= start && uintptr(unsafe.Pointer(&p[len(p)-1])) <= end
		}
		want := []struct {
			inBlock bool
			room    int
		}{
			{true, len(block) - smallBody},
			{true, len(block) - 2*smallBody},
			{false, len(block) - 2*smallBody}, // large: its own
			{false, 0},                        // no room left: the Reader's own block
		}
		for i, w := range want {
			f, err := r.Next()
			if err != nil {
				t.Fatal(err)
			}
			if got := inBlock(f.Payload); got != w.inBlock || r.Room() != w.room {
				t.Fatalf("buffered %v, frame %d: payload in the lent block %v, Room %d; want %v, %d", buffered, i, got, r.Room(), w.inBlock, w.room)
			}
		}
		// Again into the same block, the first two frames only.
		allocs := testing.AllocsPerRun(10, func() {
			src.Reset(data)
			if buffered {
				in.(*bufio.Reader).Reset(src)
			}
			r.UseBlock(block)
			for range 2 {
				if _, err := r.Next(); err != nil {
					t.Fatal(err)
				}
			}
		})
		if allocs != 0 {
			t.Fatalf("buffered %v: reading into a lent block allocated %.1f times", buffered, allocs)
		}
	}
}

// BenchmarkReaderNext reads a connection's typical stream: small frames
// from one sender to one receiver in one manifest, through a buffer as
// a transport's connection reader does.
func BenchmarkReaderNext(b *testing.B) {
	f := frame.Frame{
		From:     cluster.UniqueAddress{Node: "node-a.example:7000", Incarnation: 1764290000123},
		To:       cluster.UniqueAddress{Node: "node-b.example:7000", Incarnation: 1764290000456},
		Manifest: "shoal.sharding",
		Payload:  bytes.Repeat([]byte{7}, 48),
	}
	var stream bytes.Buffer
	for range 1024 {
		if err := frame.WriteFrame(&stream, f, 1024); err != nil {
			b.Fatal(err)
		}
	}
	src := bytes.NewReader(stream.Bytes())
	r := frame.NewReader(bufio.NewReaderSize(src, 64<<10), 1024)
	b.SetBytes(int64(stream.Len() / 1024))
	for i := 0; b.Loop(); i++ {
		if i%1024 == 0 {
			src.Reset(stream.Bytes())
		}
		if _, err := r.Next(); err != nil {
			b.Fatal(err)
		}
	}
}

// Size is the length of the body Marshal appends.
func TestSize(t *testing.T) {
	for _, f := range []frame.Frame{
		{},
		{From: cluster.UniqueAddress{Node: "a", Incarnation: 127}, To: cluster.UniqueAddress{Node: "b", Incarnation: 128}, Manifest: "m", Payload: []byte("p")},
		{From: cluster.UniqueAddress{Node: strings.Repeat("n", 200), Incarnation: 1 << 63}, Manifest: strings.Repeat("m", 20000), Payload: make([]byte, 1<<16)},
	} {
		body, err := frame.Marshal(nil, f, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		if got := frame.Size(&f); got != len(body) {
			t.Fatalf("Size %d, Marshal appended %d bytes", got, len(body))
		}
	}
}

// Size runs on every encoded send, before the frame is written: it must
// not copy the payload to measure it.
func TestSizeAllocatesNothing(t *testing.T) {
	f := frame.Frame{From: cluster.UniqueAddress{Node: "a", Incarnation: 1}, Manifest: "m", Payload: make([]byte, 100)}
	n := 0
	if allocs := testing.AllocsPerRun(100, func() { n += frame.Size(&f) }); allocs != 0 {
		t.Fatalf("Size allocated %.0f times per call", allocs)
	}
}

// A Head writes the bytes Marshal writes and measures what Size measures,
// whatever the lengths of the names, manifest and payload.
func TestHeadWritesMarshalsBytes(t *testing.T) {
	long := cluster.UniqueAddress{Node: strings.Repeat("n", 200), Incarnation: 1 << 40}
	for _, from := range []cluster.UniqueAddress{a1, long, {}} {
		for _, to := range []cluster.UniqueAddress{b2, long} {
			h := frame.NewHead(from, to)
			for _, manifest := range []string{"", "shoal.sharding", strings.Repeat("m", 130)} {
				for _, n := range []int{0, 1, 127, 128, 20000} {
					f := frame.Frame{From: from, To: to, Manifest: manifest, Payload: bytes.Repeat([]byte{7}, n)}
					want, err := frame.Marshal([]byte("dst"), f, 1<<20)
					if err != nil {
						t.Fatal(err)
					}
					if got := h.Append([]byte("dst"), manifest, f.Payload); !bytes.Equal(got, want) {
						t.Fatalf("%v → %v, manifest %q, payload %d: Append = %x, want %x", from, to, manifest, n, got, want)
					}
					if got, want := h.Size(manifest, n), frame.Size(&f); got != want {
						t.Fatalf("%v → %v, manifest %q, payload %d: Size = %d, want %d", from, to, manifest, n, got, want)
					}
				}
			}
		}
	}
}
