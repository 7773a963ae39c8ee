package memberlist

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/internal/logtest"
)

// memberlist's [ERR] lines about a member that left gracefully, or written
// once this node leaves, are logged at INFO; any other stays at ERROR.
func TestGracefulLeaveErrorsAreLoggedAtInfo(t *testing.T) {
	var logged logtest.Buffer
	w := newLogWriter(slog.New(slog.NewJSONHandler(&logged, nil)))
	write := func(line string) {
		if _, err := w.Write([]byte(line + "\n")); err != nil {
			t.Fatal(err)
		}
	}
	write("[ERR] memberlist: Push/Pull with b#1 failed: EOF")
	w.memberLeft("b#1", "127.0.0.1:7001")
	write("[ERR] memberlist: Push/Pull with b#1 failed: EOF")
	write("[ERR] memberlist: Failed to send gossip to 127.0.0.1:7001: connection refused")
	write("[ERR] memberlist: Push/Pull with c#1 failed: EOF") // c crashed: no leave announced
	write("[WARN] memberlist: Was able to connect to c#1 over TCP but UDP probes failed")
	w.selfLeaving()
	write("[ERR] memberlist: Failed to send gossip to 127.0.0.1:7002: use of closed network connection")

	want := []struct{ level, msg string }{
		{"ERROR", "memberlist: Push/Pull with b#1 failed: EOF"},
		{"INFO", "memberlist: Push/Pull with b#1 failed: EOF"},
		{"INFO", "memberlist: Failed to send gossip to 127.0.0.1:7001: connection refused"},
		{"ERROR", "memberlist: Push/Pull with c#1 failed: EOF"},
		{"WARN", "memberlist: Was able to connect to c#1 over TCP but UDP probes failed"},
		{"INFO", "memberlist: Failed to send gossip to 127.0.0.1:7002: use of closed network connection"},
	}
	got := logged.Records(t)
	if len(got) != len(want) {
		t.Fatalf("%d records, want %d: %v", len(got), len(want), got)
	}
	for i, r := range got {
		if r["level"] != want[i].level || r["msg"] != want[i].msg {
			t.Errorf("record %d: %v %q, want %s %q", i, r["level"], r["msg"], want[i].level, want[i].msg)
		}
		if r["level"] == "INFO" && r["cause"] != "graceful leave" {
			t.Errorf("record %d lacks the cause: %v", i, r)
		}
	}
}

// A member that leaves gracefully is remembered by the others' log
// writers (from its leave event, whose metadata says Leaving); the leaver's
// own writer knows it is leaving.
func TestLogWriterLearnsOfAGracefulLeave(t *testing.T) {
	start := func(id string) *Membership {
		m, err := New(Config{NodeID: id, Endpoint: "127.0.0.1:1", BindAddr: "127.0.0.1", ClusterName: "logs",
			Timing: FastTiming(), Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Shutdown() })
		return m
	}
	a, b := start("a"), start("b")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.Join(ctx, []string{a.Addr()}); err != nil {
		t.Fatal(err)
	}
	leaver := nodeName(b.cfg.self())
	if err := b.SetLeaving(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	if !b.logs.expected([]byte("anything")) {
		t.Fatal("the leaver's log writer does not know it left")
	}
	for !a.logs.expected([]byte("memberlist: Push/Pull with " + leaver + " failed: EOF")) {
		select {
		case <-ctx.Done():
			t.Fatalf("a never learnt that %s left gracefully", leaver)
		case <-time.After(20 * time.Millisecond):
		}
	}
	if a.logs.expected([]byte("memberlist: Push/Pull with z#9 failed: EOF")) {
		t.Fatal("a line about another member counted as a graceful leave")
	}
}
