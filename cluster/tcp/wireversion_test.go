package tcp_test

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/cluster/clustertest"
	"github.com/shoal-dev/shoal/cluster/frame"
	"github.com/shoal-dev/shoal/cluster/tcp"
	"github.com/shoal-dev/shoal/internal/logtest"
)

// versionErrors returns the log records of side that report a wire
// version mismatch, at level.
func versionErrors(t *testing.T, logged *logtest.Buffer, side, level string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, r := range logged.Records(t) {
		if r["side"] == side && r["level"] == level && strings.Contains(r["msg"].(string), "wire version") {
			out = append(out, r)
		}
	}
	return out
}

// Two nodes of different wire versions refuse each other at the
// handshake, both ways: each end counts it and logs it once, with both
// versions, however often the link redials; no message passes.
func TestWireVersionMismatchRefusedAtTheHandshake(t *testing.T) {
	var logged logtest.Buffer
	logger := slog.New(slog.NewJSONHandler(&logged, &slog.HandlerOptions{Level: slog.LevelDebug}))
	nw := newNetwork(t, pingRegistry(), nil)
	nw.tune = func(c *tcp.Config) { c.Logger = logger.With("side", "b") }
	gotB := newRecorder()
	b := nw.start(t, addr("b", 1), gotB.handle, "")
	nw.tune = func(c *tcp.Config) {
		c.Logger = logger.With("side", "a")
		tcp.SetWireVersion(c, cluster.WireVersion+1) // the next release
	}
	gotA := newRecorder()
	a := nw.start(t, addr("a", 1), gotA.handle, "")

	if err := a.Send(b.Self(), clustertest.Ping{Sender: "a", Seq: 1}); err != nil {
		t.Fatal(err)
	}
	if err := b.Send(a.Self(), clustertest.Ping{Sender: "b", Seq: 1}); err != nil {
		t.Fatal(err)
	}
	// Each dials the other several times: both refuse and are refused.
	eventually(t, "several refused dials each way, counted on both ends", func() bool {
		sa, sb := a.Stats(), b.Stats()
		return sa.RefusedHandshakes >= 3 && sb.RefusedHandshakes >= 3 && sa.WireVersionMismatches >= 6 && sb.WireVersionMismatches >= 6
	})
	for _, tr := range []*tcp.Transport{a, b} {
		if st := tr.Stats(); st.Delivered != 0 || st.Dials != 0 {
			t.Errorf("%s: %+v, want mismatches both ways, nothing delivered, no link up", tr.Self(), st)
		}
	}
	for _, side := range []string{"a", "b"} {
		errs := versionErrors(t, &logged, side, "ERROR")
		if len(errs) != 1 { // once per peer node and version, dialling and dialled
			t.Fatalf("%s logged %d errors about the wire version, want 1: %v", side, len(errs), errs)
		}
		for _, r := range errs {
			local, peer := r["local_version"].(float64), r["peer_version"].(float64)
			if side == "b" && (local != float64(cluster.WireVersion) || peer != float64(cluster.WireVersion+1)) ||
				side == "a" && (local != float64(cluster.WireVersion+1) || peer != float64(cluster.WireVersion)) {
				t.Errorf("%s logged versions %v/%v", side, local, peer)
			}
			if !strings.Contains(r["err"].(string), "speaks wire version") {
				t.Errorf("%s logged %q", side, r["err"])
			}
		}
		if n := len(versionErrors(t, &logged, side, "DEBUG")); n == 0 {
			t.Errorf("%s: later mismatches not logged at debug", side)
		}
	}
	if len(gotA.from("b")) != 0 || len(gotB.from("a")) != 0 {
		t.Fatal("a message passed between two wire versions")
	}
}

// A dialler of wire version 1, whose hello carries only its cluster name,
// is refused with a reason it can read (plain text, as version 1 wrote
// its refusals) naming both versions.
func TestVersionOneDiallerRefused(t *testing.T) {
	nw := newNetwork(t, pingRegistry(), nil)
	b := nw.start(t, addr("b", 1), func(cluster.UniqueAddress, any) { t.Error("a message from version 1 was handled") }, "")
	p := dialRaw(t, b.Addr().String())
	p.write(frame.Frame{From: addr("old", 1), To: b.Self(), Manifest: tcp.HelloManifest, Payload: []byte("test")})
	answer, err := p.read()
	if err != nil {
		t.Fatal(err)
	}
	if answer.Manifest != tcp.RefuseManifest || bytes.HasPrefix(answer.Payload, []byte{0}) ||
		!strings.Contains(string(answer.Payload), "old#1 speaks wire version 1, this node 2") {
		t.Fatalf("answer %q %q, want a plain-text refusal naming both versions", answer.Manifest, answer.Payload)
	}
	eventually(t, "the mismatch counted", func() bool { return b.Stats().WireVersionMismatches == 1 })
}

// A listener of wire version 1 refuses a hello of version 2 (its payload
// is not the cluster name) with a plain-text reason: the dialler reads
// that as version 1 and fails the dial with a *cluster.WireVersionError.
func TestVersionOneListenerRefusesWithATypedError(t *testing.T) {
	var logged logtest.Buffer
	nw := newNetwork(t, pingRegistry(), func(c *tcp.Config) {
		c.Logger = slog.New(slog.NewJSONHandler(&logged, nil)).With("side", "a")
	})
	a := nw.start(t, addr("a", 1), func(cluster.UniqueAddress, any) {}, "")
	old := addr("old", 1)
	ln := listenAs(t, nw, old)
	hellos := make(chan frame.Frame, 16)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			hello, err := frame.ReadFrame(conn, 4096)
			if err == nil {
				hellos <- hello
				// Version 1's check and words, for a payload that is not its cluster name.
				frame.WriteFrame(conn, frame.Frame{From: old, To: hello.From, Manifest: tcp.RefuseManifest,
					Payload: []byte(`cluster "\x00\x02test", want "test"`)}, 4096)
			}
			conn.Close()
		}
	}()
	if err := a.Send(old, clustertest.Ping{Sender: "a", Seq: 1}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "two refused dials", func() bool { return a.Stats().WireVersionMismatches >= 2 })
	hello := <-hellos
	if !bytes.Equal(hello.Payload, tcp.HelloPayload("test")) {
		t.Fatalf("hello payload %q", hello.Payload)
	}
	errs := versionErrors(t, &logged, "a", "ERROR")
	if len(errs) != 1 || !strings.Contains(errs[0]["err"].(string), "old#1 speaks wire version 1, this node 2") {
		t.Fatalf("logged %v, want one error naming both versions", errs)
	}
}
