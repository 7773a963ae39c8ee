package remote_test

import (
	"bufio"
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/cluster/frame"
	"github.com/shoal-dev/shoal/cluster/tcp"
	"github.com/shoal-dev/shoal/sharding/internal/protocol"
	"github.com/shoal-dev/shoal/sharding/internal/remote"
	"github.com/shoal-dev/shoal/sharding/internal/wire"
	v1 "github.com/shoal-dev/shoal/sharding/internal/wire/wiretest/v1"
)

// waitFor polls cond until it holds, failing the test after 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// A node of this release and one of the previous wire (version 1, the
// JSON wire, played by the frozen copy in wiretest/v1) over real sockets:
// they refuse each other at the handshake, both ways, with the versions
// named, and no message of one reaches the other's regions, so nothing is
// read with a field silently zeroed. A version 1 frame that came through
// anyway is dropped whole (its manifest is unknown), as is an envelope of
// an unknown type id, and the connection keeps serving.
func TestMixedWireVersions(t *testing.T) {
	newSelf := cluster.UniqueAddress{Node: "new", Incarnation: 1}
	oldSelf := cluster.UniqueAddress{Node: "old", Incarnation: 1}
	old, err := v1.Listen(oldSelf, "test")
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()

	reg := newCodec()
	rt, err := remote.New(newSelf, remote.Config{Codec: reg, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got []protocol.Message
	stop, err := rt.Listen(remote.Address{Node: rt.Node(), Type: "counter"}, func(m protocol.Message) error {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, m)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	tr, err := tcp.Listen(tcp.Config{
		Self: newSelf, Codec: reg, Handler: rt.Handle, ListenAddr: "127.0.0.1:0", ClusterName: "test",
		MinBackoff: time.Millisecond, MaxBackoff: 20 * time.Millisecond, Logger: quiet(),
		Resolve: func(to cluster.UniqueAddress) (string, error) {
			if to == oldSelf {
				return old.Addr(), nil
			}
			return "", cluster.ErrUnreachable
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close(context.Background())
	if err := rt.Bind(tr); err != nil {
		t.Fatal(err)
	}

	// The old node dials the new one: refused, in words it can read.
	conn, answer, err := v1.Dial(tr.Addr().String(), oldSelf, newSelf, "test")
	if err != nil {
		t.Fatal(err)
	}
	conn.Write(v1.Frame{From: oldSelf, To: newSelf, Manifest: v1.DeliverManifest,
		Payload: v1.Deliver("counter", "3", "c-1", "test.Add", []byte(`{"N":5}`))}.Append(nil))
	conn.Close()
	if answer.Manifest != v1.RefuseManifest || !strings.Contains(string(answer.Payload), "old#1 speaks wire version 1, this node 2") {
		t.Fatalf("the old node was answered %q %q", answer.Manifest, answer.Payload)
	}
	waitFor(t, "the new node counting the mismatch", func() bool { return tr.Stats().WireVersionMismatches == 1 })

	// The new node sends to the old one: the old one refuses its hello
	// (not its cluster name), which the new one reads as version 1.
	to := remote.Address{Node: oldSelf, Type: "counter"}
	if err := rt.Send(to, protocol.Deliver{Shard: "3", EntityID: "c-1", Msg: Add{N: 5}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the new node's dial refused as version 1", func() bool { return tr.Stats().WireVersionMismatches >= 2 })
	if hellos := old.Hellos(); len(hellos) == 0 || !strings.HasPrefix(string(hellos[0].Payload), "\x00") {
		t.Fatalf("the old node saw hellos %+v", hellos)
	}
	if r := old.Received(); len(r) != 0 {
		t.Fatalf("the old node received %d frames past the handshake", len(r))
	}

	// A peer that passes the handshake and then sends a version 1 frame,
	// then an envelope of a type id this node does not know, then a
	// Deliver: the first two are dropped and counted, the third arrives
	// whole.
	raw, err := net.Dial("tcp", tr.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	peer := cluster.UniqueAddress{Node: "peer", Incarnation: 1}
	hello := append([]byte{0, byte(cluster.WireVersion)}, "test"...)
	send := func(manifest string, payload []byte) {
		t.Helper()
		if err := frame.WriteFrame(raw, frame.Frame{From: peer, To: newSelf, Manifest: manifest, Payload: payload}, 1<<20); err != nil {
			t.Fatal(err)
		}
	}
	send(v1.HelloManifest, hello) // the manifests did not change
	if welcome, err := frame.ReadFrame(bufio.NewReader(raw), 4096); err != nil || welcome.Manifest != v1.WelcomeManifest {
		t.Fatalf("answer %+v, %v; want a welcome", welcome, err)
	}
	send(v1.DeliverManifest, v1.Deliver("counter", "3", "c-1", "test.Add", []byte(`{"N":5}`)))
	send(wire.EnvelopeManifest, []byte{99, 0})
	env, err := wire.NewEncoder(reg).Seal(wire.Target{Type: "counter"}, protocol.Deliver{Shard: "3", EntityID: "c-1", Msg: Add{N: 5}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := wire.AppendEnvelope(nil, env)
	if err != nil {
		t.Fatal(err)
	}
	send(wire.EnvelopeManifest, b)
	waitFor(t, "the Deliver", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == 1
	})
	if st := tr.Stats(); st.BadFrames != 2 {
		t.Fatalf("bad frames %d, want 2: the version 1 frame and the unknown type id", st.BadFrames)
	}
	if d := got[0].(protocol.Deliver); d.Msg != (Add{N: 5}) || d.EntityID != "c-1" || d.Shard != "3" {
		t.Fatalf("received %+v", d)
	}
	if st := rt.Stats(); st.Received != 1 {
		t.Fatalf("the regions' transport received %d messages, want the one Deliver", st.Received)
	}
}
