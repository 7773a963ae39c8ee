package frame_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"testing"
	"unsafe"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/cluster/frame"
	"github.com/shoal-dev/shoal/entity/codec"
)

var (
	a1 = cluster.UniqueAddress{Node: "a", Incarnation: 1}
	b1 = cluster.UniqueAddress{Node: "b", Incarnation: 1}
	b2 = cluster.UniqueAddress{Node: "b", Incarnation: 2}
)

func sample() frame.Frame {
	return frame.Frame{From: a1, To: b2, Manifest: "m", Payload: []byte(`{"x":1}`)}
}

func TestRoundTrip(t *testing.T) {
	for _, f := range []frame.Frame{
		sample(),
		{From: cluster.UniqueAddress{Node: "ñ", Incarnation: 1 << 63}, To: b1, Manifest: "", Payload: nil},
		{From: a1, To: b1, Manifest: "big", Payload: bytes.Repeat([]byte{7}, 100_000)},
	} {
		body, err := frame.Marshal(nil, f, frame.DefaultMaxSize)
		if err != nil {
			t.Fatal(err)
		}
		got, err := frame.Unmarshal(body)
		if err != nil {
			t.Fatal(err)
		}
		if len(f.Payload) == 0 {
			f.Payload = []byte{}
		}
		if !reflect.DeepEqual(got, f) {
			t.Fatalf("round trip: %+v, want %+v", got, f)
		}
		body[len(body)-1] ^= 0xff // the frame owns its payload
		if !reflect.DeepEqual(got, f) {
			t.Fatal("Unmarshal shares the body's memory")
		}
	}
}

func TestMarshalRefusesOversized(t *testing.T) {
	f := sample()
	body, _ := frame.Marshal(nil, f, frame.DefaultMaxSize)
	if _, err := frame.Marshal(nil, f, len(body)); err != nil {
		t.Fatalf("a frame of exactly the limit: %v", err)
	}
	dst := []byte("prefix")
	out, err := frame.Marshal(dst, f, len(body)-1)
	if !errors.Is(err, frame.ErrTooLarge) {
		t.Fatalf("one byte over: %v, want ErrTooLarge", err)
	}
	if string(out) != "prefix" {
		t.Fatalf("a refused Marshal left %q in dst", out)
	}
}

// Every truncation and a wrong version is ErrCorrupt, never a panic or a
// wrong frame.
func TestUnmarshalCorrupt(t *testing.T) {
	body, _ := frame.Marshal(nil, sample(), frame.DefaultMaxSize)
	for n := range len(body) {
		if _, err := frame.Unmarshal(body[:n]); !errors.Is(err, frame.ErrCorrupt) {
			t.Errorf("truncated to %d of %d bytes: %v, want ErrCorrupt", n, len(body), err)
		}
	}
	if _, err := frame.Unmarshal(append(bytes.Clone(body), 0)); !errors.Is(err, frame.ErrCorrupt) {
		t.Errorf("trailing byte: %v, want ErrCorrupt", err)
	}
	other := bytes.Clone(body)
	other[0] = 2
	if _, err := frame.Unmarshal(other); !errors.Is(err, frame.ErrCorrupt) {
		t.Errorf("version 2: %v, want ErrCorrupt", err)
	}
}

// A stream survives bad frames: each is reported and the next one reads.
// readers are the ways to read a stream: ReadFrame, and a Reader, on a
// bufio.Reader too (whose buffered frames it copies out at once; a small
// buffer holds some frames whole, and not others).
var readers = map[string]func(r io.Reader, maxSize int) func() (frame.Frame, error){
	"ReadFrame": func(r io.Reader, maxSize int) func() (frame.Frame, error) {
		return func() (frame.Frame, error) { return frame.ReadFrame(r, maxSize) }
	},
	"Reader": func(r io.Reader, maxSize int) func() (frame.Frame, error) { return nextOf(frame.NewReader(r, maxSize)) },
	"Reader on bufio": func(r io.Reader, maxSize int) func() (frame.Frame, error) {
		return nextOf(frame.NewReader(bufio.NewReaderSize(r, 64), maxSize))
	},
}

// nextOf reads r's frames as copies, the zero Frame on error, as ReadFrame
// returns them.
func nextOf(r *frame.Reader) func() (frame.Frame, error) {
	return func() (frame.Frame, error) {
		f, err := r.Next()
		if err != nil {
			return frame.Frame{}, err
		}
		return *f, nil
	}
}

func TestStreamSkipsBadFrames(t *testing.T) {
	for name, read := range readers {
		t.Run(name, func(t *testing.T) { testStreamSkipsBadFrames(t, read) })
	}
}

func testStreamSkipsBadFrames(t *testing.T, reader func(io.Reader, int) func() (frame.Frame, error)) {
	var stream bytes.Buffer
	good := sample()
	if err := frame.WriteFrame(&stream, good, 1024); err != nil {
		t.Fatal(err)
	}
	big := sample()
	big.Payload = bytes.Repeat([]byte{1}, 2000)
	if err := frame.WriteFrame(&stream, big, 1024); !errors.Is(err, frame.ErrTooLarge) {
		t.Fatalf("WriteFrame over the limit: %v", err)
	}
	if err := frame.WriteFrame(&stream, big, 4096); err != nil { // a peer with a higher limit
		t.Fatal(err)
	}
	stream.Write([]byte{0, 0, 0, 3, 9, 9, 9}) // a corrupt body of 3 bytes
	second := sample()
	second.Manifest = "second"
	if err := frame.WriteFrame(&stream, second, 1024); err != nil {
		t.Fatal(err)
	}

	want := []struct {
		frame *frame.Frame
		err   error
	}{{&good, nil}, {nil, frame.ErrTooLarge}, {nil, frame.ErrCorrupt}, {&second, nil}, {nil, io.EOF}}
	next := reader(&stream, 1024)
	for i, w := range want {
		f, err := next()
		if w.err != nil {
			if !errors.Is(err, w.err) {
				t.Fatalf("frame %d: %v, want %v", i, err, w.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(f, *w.frame) {
			t.Fatalf("frame %d: %+v, %v; want %+v", i, f, err, *w.frame)
		}
	}
}

func TestStreamEndingInsideAFrame(t *testing.T) {
	var stream bytes.Buffer
	if err := frame.WriteFrame(&stream, sample(), 1024); err != nil {
		t.Fatal(err)
	}
	whole := stream.Bytes()
	for _, n := range []int{2, 4, len(whole) - 1} {
		if _, err := frame.ReadFrame(bytes.NewReader(whole[:n]), 1024); !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("cut at %d: %v, want io.ErrUnexpectedEOF", n, err)
		}
	}
	// An oversized frame cut short is broken too, not "too large".
	var big bytes.Buffer
	f := sample()
	f.Payload = make([]byte, 2000)
	frame.WriteFrame(&big, f, 4096)
	if _, err := frame.ReadFrame(bytes.NewReader(big.Bytes()[:1000]), 1024); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("oversized and cut: %v, want io.ErrUnexpectedEOF", err)
	}
}

type ping struct{ N int }

func TestDecodeChecksIncarnationAndManifest(t *testing.T) {
	reg := codec.NewRegistry()
	codec.MustRegister[ping](reg, "ping")
	body, err := frame.Encode(reg, a1, b2, ping{N: 3}, frame.DefaultMaxSize)
	if err != nil {
		t.Fatal(err)
	}
	from, msg, err := frame.Decode(reg, b2, body)
	if err != nil || from != a1 || msg != (ping{N: 3}) {
		t.Fatalf("Decode = %v, %v, %v", from, msg, err)
	}
	if _, _, err := frame.Decode(reg, b1, body); !errors.Is(err, cluster.ErrStaleIncarnation) {
		t.Fatalf("received by b#1: %v, want ErrStaleIncarnation", err)
	}
	other := codec.NewRegistry()
	if _, _, err := frame.Decode(other, b2, body); !errors.Is(err, codec.ErrUnknownManifest) {
		t.Fatalf("unknown manifest: %v, want codec.ErrUnknownManifest", err)
	}
	if _, err := frame.Encode(reg, a1, b2, struct{}{}, frame.DefaultMaxSize); !errors.Is(err, codec.ErrUnregisteredType) {
		t.Fatalf("unregistered type: %v", err)
	}
	if _, err := frame.Encode(reg, a1, b2, ping{N: 3}, 10); !errors.Is(err, frame.ErrTooLarge) {
		t.Fatalf("over the limit: %v", err)
	}
}

func FuzzUnmarshal(f *testing.F) {
	body, _ := frame.Marshal(nil, sample(), frame.DefaultMaxSize)
	f.Add(body)
	f.Add([]byte{1})
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := frame.Unmarshal(b)
		if err != nil {
			if !errors.Is(err, frame.ErrCorrupt) {
				t.Fatalf("error %v is not ErrCorrupt", err)
			}
			return
		}
		again, err := frame.Marshal(nil, fr, len(b)+16)
		if err != nil {
			t.Fatal(err)
		}
		back, err := frame.Unmarshal(again)
		if err != nil || !reflect.DeepEqual(back, fr) {
			t.Fatalf("re-marshalled frame differs: %+v vs %+v (%v)", back, fr, err)
		}
	})
}

// A Reader hands out the node names and manifest of the frame before
// when they are equal, not copies, and each payload as it was sent.
func TestReaderSharesRepeatedStrings(t *testing.T) {
	var stream bytes.Buffer
	other := sample()
	other.Manifest, other.Payload = "other", []byte("2")
	sent := []frame.Frame{sample(), sample(), other}
	for _, f := range sent {
		if err := frame.WriteFrame(&stream, f, 1024); err != nil {
			t.Fatal(err)
		}
	}
	next := nextOf(frame.NewReader(&stream, 1024))
	var got []frame.Frame
	for range sent {
		f, err := next()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, f)
	}
	if !reflect.DeepEqual(got, sent) {
		t.Fatalf("read %+v, want %+v", got, sent)
	}
	same := func(a, b string) bool { return unsafe.StringData(a) == unsafe.StringData(b) }
	if !same(got[0].From.Node, got[1].From.Node) || !same(got[0].To.Node, got[2].To.Node) || !same(got[0].Manifest, got[1].Manifest) {
		t.Fatal("repeated node names and manifests were copied again")
	}
	got[0].Payload[0] = 'X' // each payload is its frame's own
	if string(got[1].Payload) != string(sample().Payload) {
		t.Fatalf("payloads share memory: %q", got[1].Payload)
	}
}

// FuzzReadFrame reads a stream of arbitrary bytes frame by frame: every
// frame is a frame or a typed error (too large, corrupt, the stream cut),
// never a panic or a read past the limit, and the stream always ends. A
// Reader reads the same frames and errors.
func FuzzReadFrame(f *testing.F) {
	var stream bytes.Buffer
	frame.WriteFrame(&stream, sample(), 1024)
	stream.Write([]byte{0, 0, 0, 3, 9, 9, 9})
	big := sample()
	big.Payload = make([]byte, 300)
	frame.WriteFrame(&stream, big, 4096)
	f.Add(stream.Bytes())
	stream.Reset()
	frame.WriteFrame(&stream, sample(), 1024)
	later := sample()
	later.To.Incarnation++ // a header that differs from the one before in one byte
	frame.WriteFrame(&stream, later, 1024)
	f.Add(stream.Bytes())
	f.Add([]byte{0, 0, 0, 0})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bytes.NewReader(b)
		stream := nextOf(frame.NewReader(bytes.NewReader(b), 256))
		buffered := nextOf(frame.NewReader(bufio.NewReaderSize(bytes.NewReader(b), 64), 256))
		// A Reader lent one block, lent again before every frame (as a
		// connection's reader whose batches each hold one message).
		lentReader := frame.NewReader(bufio.NewReaderSize(bytes.NewReader(b), 64), 256)
		block := make([]byte, 2*frame.BlockMax)
		lent := func() (frame.Frame, error) {
			lentReader.UseBlock(block)
			return nextOf(lentReader)()
		}
		for i := 0; ; i++ {
			if i > len(b) {
				t.Fatal("more frames than bytes")
			}
			fr, err := frame.ReadFrame(r, 256)
			if fr2, err2 := stream(); !reflect.DeepEqual(fr, fr2) || (err == nil) != (err2 == nil) || (err != nil && err.Error() != err2.Error()) {
				t.Fatalf("frame %d: ReadFrame %+v, %v; Reader %+v, %v", i, fr, err, fr2, err2)
			}
			if fr3, err3 := buffered(); !reflect.DeepEqual(fr, fr3) || (err == nil) != (err3 == nil) || (err != nil && err.Error() != err3.Error()) {
				t.Fatalf("frame %d: ReadFrame %+v, %v; Reader on bufio %+v, %v", i, fr, err, fr3, err3)
			}
			if fr4, err4 := lent(); !reflect.DeepEqual(fr, fr4) || (err == nil) != (err4 == nil) || (err != nil && err.Error() != err4.Error()) {
				t.Fatalf("frame %d: ReadFrame %+v, %v; Reader with a lent block %+v, %v", i, fr, err, fr4, err4)
			}
			switch {
			case err == nil:
				if len(fr.Payload) > 256 {
					t.Fatalf("a payload of %d bytes under a limit of 256", len(fr.Payload))
				}
				continue
			case errors.Is(err, frame.ErrTooLarge), errors.Is(err, frame.ErrCorrupt):
				continue
			case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
				return
			default:
				t.Fatalf("untyped error: %v", err)
			}
		}
	})
}

// A Reader takes a frame's addresses and manifest from the frame before
// only when they are all the same: a frame that differs in any one of
// them, an incarnation included, is read with its own, and a frame that
// repeats them but whose payload does not parse is corrupt. It reads
// what ReadFrame reads.
func TestReaderReadsEachFramesOwnHeader(t *testing.T) {
	f := sample()
	var sent []frame.Frame
	next := func(change func(*frame.Frame)) {
		change(&f)
		f.Payload = append([]byte(nil), f.Payload...)
		sent = append(sent, f)
	}
	next(func(*frame.Frame) {})
	next(func(f *frame.Frame) { f.Payload = []byte("same header") })
	next(func(f *frame.Frame) { f.From.Incarnation++ })
	next(func(f *frame.Frame) { f.To.Incarnation++ })
	next(func(f *frame.Frame) { f.From.Node = "c" })
	next(func(f *frame.Frame) { f.To.Node = "d" })
	next(func(f *frame.Frame) { f.Manifest = "n" })
	next(func(f *frame.Frame) { f.Payload = nil })
	next(func(f *frame.Frame) { f.Payload = []byte("x") })

	var stream bytes.Buffer
	write := func(body []byte) {
		stream.Write([]byte{0, 0, 0, byte(len(body))})
		stream.Write(body)
	}
	var header []byte // the last frame's body up to its payload's length
	for _, f := range sent {
		body, err := frame.Marshal(nil, f, 255)
		if err != nil {
			t.Fatal(err)
		}
		write(body)
		header = body[:len(body)-len(f.Payload)-1]
	}
	// The same header, then: no payload length, a length past the end,
	// bytes after the payload; and a good frame after them.
	write(header)
	write(append(header[:len(header):len(header)], 5, 'x'))
	write(append(header[:len(header):len(header)], 1, 'x', 'y'))
	last := f
	last.Payload = []byte("after")
	body, _ := frame.Marshal(nil, last, 255)
	write(body)
	sent = append(sent, frame.Frame{}, frame.Frame{}, frame.Frame{}, last)

	for name, next := range readers {
		t.Run(name, func(t *testing.T) {
			testReadsOwnHeader(t, next(bytes.NewReader(stream.Bytes()), 255), stream.Bytes(), sent)
		})
	}
}

func testReadsOwnHeader(t *testing.T, next func() (frame.Frame, error), stream []byte, sent []frame.Frame) {
	want := bytes.NewReader(stream)
	for i, f := range sent {
		got, err := next()
		ref, refErr := frame.ReadFrame(want, 255)
		same := func(a, b frame.Frame) bool {
			return a.From == b.From && a.To == b.To && a.Manifest == b.Manifest && bytes.Equal(a.Payload, b.Payload)
		}
		if !same(got, f) || !same(ref, f) {
			t.Fatalf("frame %d: Reader read %+v (%v), ReadFrame %+v, want %+v", i, got, err, ref, f)
		}
		if (f.From.Node == "") != errors.Is(err, frame.ErrCorrupt) || fmt.Sprint(err) != fmt.Sprint(refErr) {
			t.Fatalf("frame %d: Reader's error %v, ReadFrame's %v", i, err, refErr)
		}
	}
}
