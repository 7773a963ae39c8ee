// Package v1 is a frozen copy of wire version 1, as a node of the release
// before versioned handshakes spoke it on a socket: its frames, its
// handshake (a hello whose payload is the cluster name alone) and the JSON
// form of a sharding Deliver. Tests play a node of the previous release
// with it against this one, over real sockets. It is a copy, not a use, of
// the code it froze, so that later changes there cannot change it; it is
// never edited.
package v1

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/shoal-dev/shoal/cluster"
)

// The handshake's manifests, as version 1 named them.
const (
	HelloManifest   = "\x00shoal.tcp.hello"
	WelcomeManifest = "\x00shoal.tcp.welcome"
	RefuseManifest  = "\x00shoal.tcp.refuse"
)

// Frame is a frame of version 1.
type Frame struct {
	From, To cluster.UniqueAddress
	Manifest string
	Payload  []byte
}

// Append appends f with its 4-byte length prefix.
func (f Frame) Append(dst []byte) []byte {
	var body []byte
	body = append(body, 1) // the frame format's own version
	body = appendString(body, f.From.Node)
	body = binary.AppendUvarint(body, f.From.Incarnation)
	body = appendString(body, f.To.Node)
	body = binary.AppendUvarint(body, f.To.Incarnation)
	body = appendString(body, f.Manifest)
	body = appendString(body, string(f.Payload))
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(body)))
	return append(dst, body...)
}

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

// ReadFrame reads one frame of at most 1 MiB.
func ReadFrame(r *bufio.Reader) (Frame, error) {
	var prefix [4]byte
	if _, err := io.ReadFull(r, prefix[:]); err != nil {
		return Frame{}, err
	}
	n := binary.BigEndian.Uint32(prefix[:])
	if n > 1<<20 {
		return Frame{}, fmt.Errorf("v1: frame of %d bytes", n)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return Frame{}, err
	}
	if len(body) == 0 || body[0] != 1 {
		return Frame{}, errors.New("v1: corrupt frame")
	}
	b := body[1:]
	var f Frame
	var ok [6]bool
	f.From.Node, b, ok[0] = readString(b)
	f.From.Incarnation, b, ok[1] = readUvarint(b)
	f.To.Node, b, ok[2] = readString(b)
	f.To.Incarnation, b, ok[3] = readUvarint(b)
	f.Manifest, b, ok[4] = readString(b)
	var p string
	p, b, ok[5] = readString(b)
	f.Payload = []byte(p)
	if ok != [6]bool{true, true, true, true, true, true} || len(b) > 0 {
		return Frame{}, errors.New("v1: corrupt frame")
	}
	return f, nil
}

func readUvarint(b []byte) (uint64, []byte, bool) {
	v, n := binary.Uvarint(b)
	if n <= 0 {
		return 0, nil, false
	}
	return v, b[n:], true
}

func readString(b []byte) (string, []byte, bool) {
	n, b, ok := readUvarint(b)
	if !ok || n > uint64(len(b)) {
		return "", nil, false
	}
	return string(b[:n]), b[n:], true
}

// Hello is version 1's hello: the cluster name is the whole payload.
func Hello(from, to cluster.UniqueAddress, clusterName string) Frame {
	return Frame{From: from, To: to, Manifest: HelloManifest, Payload: []byte(clusterName)}
}

// Dial connects to endpoint as from, sends version 1's hello and returns
// the answer, and the connection (welcomed or not).
func Dial(endpoint string, from, to cluster.UniqueAddress, clusterName string) (net.Conn, Frame, error) {
	conn, err := net.DialTimeout("tcp", endpoint, 5*time.Second)
	if err != nil {
		return nil, Frame{}, err
	}
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write(Hello(from, to, clusterName).Append(nil)); err != nil {
		conn.Close()
		return nil, Frame{}, err
	}
	answer, err := ReadFrame(bufio.NewReader(conn))
	if err != nil {
		conn.Close()
		return nil, Frame{}, err
	}
	return conn, answer, nil
}

// Listener answers hellos as a listener of version 1 did: a refusal,
// its reason as plain text, for a payload that is not its cluster name,
// a welcome with no payload otherwise, and then it reads frames.
type Listener struct {
	ln          net.Listener
	self        cluster.UniqueAddress
	clusterName string

	mu       sync.Mutex
	hellos   []Frame // every hello received
	received []Frame // frames after a welcome
}

// Listen listens on a free loopback port as self.
func Listen(self cluster.UniqueAddress, clusterName string) (*Listener, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	l := &Listener{ln: ln, self: self, clusterName: clusterName}
	go l.accept()
	return l, nil
}

// Addr is where it listens.
func (l *Listener) Addr() string { return l.ln.Addr().String() }

// Close stops listening.
func (l *Listener) Close() error { return l.ln.Close() }

// Hellos returns the hellos received so far.
func (l *Listener) Hellos() []Frame {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Frame(nil), l.hellos...)
}

// Received returns the frames received after a welcome.
func (l *Listener) Received() []Frame {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Frame(nil), l.received...)
}

func (l *Listener) accept() {
	for {
		conn, err := l.ln.Accept()
		if err != nil {
			return
		}
		go l.serve(conn)
	}
}

func (l *Listener) serve(conn net.Conn) {
	defer conn.Close()
	br := bufio.NewReader(conn)
	hello, err := ReadFrame(br)
	if err != nil || hello.Manifest != HelloManifest {
		return
	}
	l.mu.Lock()
	l.hellos = append(l.hellos, hello)
	l.mu.Unlock()
	if string(hello.Payload) != l.clusterName {
		reason := fmt.Sprintf("cluster %q, want %q", hello.Payload, l.clusterName)
		conn.Write(Frame{From: l.self, To: hello.From, Manifest: RefuseManifest, Payload: []byte(reason)}.Append(nil))
		return
	}
	conn.Write(Frame{From: l.self, To: hello.From, Manifest: WelcomeManifest}.Append(nil))
	for {
		f, err := ReadFrame(br)
		if err != nil {
			return
		}
		l.mu.Lock()
		l.received = append(l.received, f)
		l.mu.Unlock()
	}
}

// DeliverManifest is the manifest of a Deliver in version 1.
const DeliverManifest = "shoal.sharding.Deliver"

// Deliver is the JSON form of a sharding Deliver in version 1: the target,
// then the protocol struct's fields named by reflection, the user message
// base64 inside.
func Deliver(targetType, shard, entityID, manifest string, payload []byte) []byte {
	type encoded struct {
		Manifest string `json:"m"`
		Payload  []byte `json:"p,omitempty"`
	}
	b, err := json.Marshal(struct {
		To struct {
			Type string `json:"type"`
		} `json:"to"`
		Shard    string   `json:"shard"`
		EntityID string   `json:"entityID"`
		Msg      *encoded `json:"msg,omitempty"`
		Start    bool     `json:"start"`
		Ask      bool     `json:"ask"`
	}{To: struct {
		Type string `json:"type"`
	}{targetType}, Shard: shard, EntityID: entityID, Msg: &encoded{manifest, payload}})
	if err != nil {
		panic(err)
	}
	return b
}
