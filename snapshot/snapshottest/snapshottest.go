// Package snapshottest is the conformance suite every snapshot.Store
// implementation passes.
//
//	func TestConformance(t *testing.T) {
//		snapshottest.Run(t, func(t *testing.T) snapshot.Store { return memory.New() })
//	}
//
// The constructor is called once per subtest; it may return a fresh store or
// a shared one (every subtest uses persistence ids of its own).
package snapshottest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/snapshot"
)

// Run runs the conformance suite as subtests of t.
func Run(t *testing.T, newStore func(t *testing.T) snapshot.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s snapshot.Store, pid func(string) string)
	}{
		{"SaveLoadLatest", testSaveLoadLatest},
		{"LoadNone", testLoadNone},
		{"CriteriaSeqNr", testCriteriaSeqNr},
		{"CriteriaTimestamp", testCriteriaTimestamp},
		{"ReplaceSameSeqNr", testReplaceSameSeqNr},
		{"DeleteKeepNewest", testDeleteKeepNewest},
		{"DeleteByTimestamp", testDeleteByTimestamp},
		{"IsolationBetweenPids", testIsolation},
		{"RoundTrip", testRoundTrip},
		{"CancelledContext", testCancelledContext},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t)
			prefix := fmt.Sprintf("%s-%d", tc.name, time.Now().UnixNano())
			tc.fn(t, s, func(id string) string { return prefix + "|" + id })
		})
	}
}

func ctxFor(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// base is a fixed instant with whole microseconds, which every store keeps exactly.
var base = time.Date(2025, 1, 2, 3, 4, 5, 6000, time.UTC)

func snap(pid string, seq uint64, ts time.Time) snapshot.Snapshot {
	return snapshot.Snapshot{
		PersistenceID: pid,
		SeqNr:         seq,
		Timestamp:     ts,
		Manifest:      "test.State",
		Payload:       []byte(fmt.Sprintf("state@%d", seq)),
	}
}

func save(t *testing.T, s snapshot.Store, sn snapshot.Snapshot) {
	t.Helper()
	if err := s.Save(ctxFor(t), sn); err != nil {
		t.Fatalf("Save %s@%d: %v", sn.PersistenceID, sn.SeqNr, err)
	}
}

// saveSeqs saves snapshots at the given seq nrs, timestamped base+seq seconds.
func saveSeqs(t *testing.T, s snapshot.Store, pid string, seqs ...uint64) {
	t.Helper()
	for _, seq := range seqs {
		save(t, s, snap(pid, seq, base.Add(time.Duration(seq)*time.Second)))
	}
}

// wantLoad loads with c and checks the seq nr found; 0 means none.
func wantLoad(t *testing.T, s snapshot.Store, pid string, c snapshot.Criteria, want uint64) snapshot.Snapshot {
	t.Helper()
	got, ok, err := s.Load(ctxFor(t), pid, c)
	if err != nil {
		t.Fatalf("Load %s %+v: %v", pid, c, err)
	}
	switch {
	case want == 0 && ok:
		t.Fatalf("Load %s %+v found seq %d, want none", pid, c, got.SeqNr)
	case want != 0 && !ok:
		t.Fatalf("Load %s %+v found none, want seq %d", pid, c, want)
	case want != 0 && got.SeqNr != want:
		t.Fatalf("Load %s %+v = seq %d, want %d", pid, c, got.SeqNr, want)
	}
	if ok {
		if got.PersistenceID != pid {
			t.Fatalf("Load %s returned a snapshot of %s", pid, got.PersistenceID)
		}
		if p := fmt.Sprintf("state@%d", got.SeqNr); string(got.Payload) != p && !bytes.HasPrefix(got.Payload, []byte("v")) {
			t.Fatalf("Load %s seq %d payload %q, want %q", pid, got.SeqNr, got.Payload, p)
		}
	}
	return got
}

func del(t *testing.T, s snapshot.Store, pid string, c snapshot.Criteria) {
	t.Helper()
	if err := s.Delete(ctxFor(t), pid, c); err != nil {
		t.Fatalf("Delete %s %+v: %v", pid, c, err)
	}
}

func testSaveLoadLatest(t *testing.T, s snapshot.Store, pid func(string) string) {
	p := pid("a")
	saveSeqs(t, s, p, 5)
	wantLoad(t, s, p, snapshot.Latest(), 5)
	// Newest means highest seq nr, whatever the order of saving or the timestamps.
	save(t, s, snap(p, 10, base))
	saveSeqs(t, s, p, 7)
	wantLoad(t, s, p, snapshot.Latest(), 10)
}

func testLoadNone(t *testing.T, s snapshot.Store, pid func(string) string) {
	wantLoad(t, s, pid("unknown"), snapshot.Latest(), 0)
	saveSeqs(t, s, pid("a"), 3)
	wantLoad(t, s, pid("a"), snapshot.UpTo(2), 0)
	wantLoad(t, s, pid("a"), snapshot.Criteria{MinSeqNr: 4, MaxSeqNr: 100}, 0)
}

func testCriteriaSeqNr(t *testing.T, s snapshot.Store, pid func(string) string) {
	p := pid("a")
	saveSeqs(t, s, p, 10, 20, 30, 40)
	wantLoad(t, s, p, snapshot.UpTo(35), 30)
	wantLoad(t, s, p, snapshot.UpTo(30), 30)
	wantLoad(t, s, p, snapshot.UpTo(9), 0)
	wantLoad(t, s, p, snapshot.Criteria{MinSeqNr: 15, MaxSeqNr: 25}, 20)
	wantLoad(t, s, p, snapshot.Criteria{MinSeqNr: 40, MaxSeqNr: 40}, 40)
	wantLoad(t, s, p, snapshot.Criteria{MinSeqNr: 41, MaxSeqNr: ^uint64(0)}, 0)
}

func testCriteriaTimestamp(t *testing.T, s snapshot.Store, pid func(string) string) {
	p := pid("a")
	// seq 1 at base+1s, seq 2 at base+2s, seq 3 at base+3s.
	saveSeqs(t, s, p, 1, 2, 3)
	at := func(sec int) time.Time { return base.Add(time.Duration(sec) * time.Second) }
	wantLoad(t, s, p, snapshot.Criteria{MaxSeqNr: 10, MaxTimestamp: at(2)}, 2)
	wantLoad(t, s, p, snapshot.Criteria{MaxSeqNr: 10, MaxTimestamp: at(2).Add(-time.Microsecond)}, 1)
	wantLoad(t, s, p, snapshot.Criteria{MaxSeqNr: 10, MaxTimestamp: at(0)}, 0)
	wantLoad(t, s, p, snapshot.Criteria{MaxSeqNr: 10, MinTimestamp: at(3)}, 3)
	wantLoad(t, s, p, snapshot.Criteria{MaxSeqNr: 2, MinTimestamp: at(2)}, 2)
	wantLoad(t, s, p, snapshot.Criteria{MaxSeqNr: 2, MinTimestamp: at(2).Add(time.Microsecond)}, 0)
	wantLoad(t, s, p, snapshot.Criteria{MaxSeqNr: 10, MinTimestamp: at(1), MaxTimestamp: at(1)}, 1)
	// Timestamps in another zone denote the same instants.
	wantLoad(t, s, p, snapshot.Criteria{MaxSeqNr: 10, MaxTimestamp: at(2).In(time.FixedZone("y", -7*3600))}, 2)
}

func testReplaceSameSeqNr(t *testing.T, s snapshot.Store, pid func(string) string) {
	p := pid("a")
	first := snap(p, 5, base)
	first.Payload = []byte("v1")
	save(t, s, first)
	second := snap(p, 5, base.Add(time.Minute))
	second.Payload = []byte("v2")
	second.Manifest = "test.State/v2"
	save(t, s, second)
	got := wantLoad(t, s, p, snapshot.Latest(), 5)
	if string(got.Payload) != "v2" || got.Manifest != "test.State/v2" || !got.Timestamp.Equal(second.Timestamp) {
		t.Fatalf("after replacing seq 5: %q %q %v, want v2 test.State/v2 %v", got.Payload, got.Manifest, got.Timestamp, second.Timestamp)
	}
	// Only one snapshot at seq 5: deleting it leaves none.
	del(t, s, p, snapshot.UpTo(5))
	wantLoad(t, s, p, snapshot.Latest(), 0)
}

// testDeleteKeepNewest is how retention keeps the N newest snapshots: delete
// everything up to the seq nr of the oldest one to keep, minus one.
func testDeleteKeepNewest(t *testing.T, s snapshot.Store, pid func(string) string) {
	p := pid("a")
	saveSeqs(t, s, p, 10, 20, 30, 40, 50)
	del(t, s, p, snapshot.UpTo(30)) // keep 2 newest
	wantLoad(t, s, p, snapshot.Latest(), 50)
	wantLoad(t, s, p, snapshot.UpTo(49), 40)
	wantLoad(t, s, p, snapshot.UpTo(39), 0)
	// Deleting again or below is a no-op, deleting by a range takes just that range.
	del(t, s, p, snapshot.UpTo(30))
	del(t, s, p, snapshot.Criteria{MinSeqNr: 45, MaxSeqNr: 55})
	wantLoad(t, s, p, snapshot.Latest(), 40)
	del(t, s, p, snapshot.Latest())
	wantLoad(t, s, p, snapshot.Latest(), 0)
	del(t, s, pid("unknown"), snapshot.Latest())
}

func testDeleteByTimestamp(t *testing.T, s snapshot.Store, pid func(string) string) {
	p := pid("a")
	saveSeqs(t, s, p, 1, 2, 3, 4)
	del(t, s, p, snapshot.Criteria{MaxSeqNr: 100, MaxTimestamp: base.Add(2 * time.Second)})
	wantLoad(t, s, p, snapshot.UpTo(2), 0)
	wantLoad(t, s, p, snapshot.Latest(), 4)
	del(t, s, p, snapshot.Criteria{MaxSeqNr: 100, MinTimestamp: base.Add(4 * time.Second)})
	wantLoad(t, s, p, snapshot.Latest(), 3)
}

func testIsolation(t *testing.T, s snapshot.Store, pid func(string) string) {
	a, b, ab := pid("a"), pid("b"), pid("a|b")
	saveSeqs(t, s, a, 1, 2)
	saveSeqs(t, s, b, 5, 6)
	saveSeqs(t, s, ab, 9)
	wantLoad(t, s, a, snapshot.Latest(), 2)
	wantLoad(t, s, b, snapshot.Latest(), 6)
	wantLoad(t, s, ab, snapshot.Latest(), 9)
	del(t, s, a, snapshot.Latest())
	wantLoad(t, s, a, snapshot.Latest(), 0)
	wantLoad(t, s, b, snapshot.Latest(), 6)
	wantLoad(t, s, ab, snapshot.Latest(), 9)
}

func testRoundTrip(t *testing.T, s snapshot.Store, pid func(string) string) {
	p := pid("ünïcode 'q'")
	big := bytes.Repeat([]byte{0, 0xff, 7}, 1<<19)
	ts := time.Date(2024, 2, 29, 12, 0, 0, 999999999, time.FixedZone("z", 3600))
	in := snapshot.Snapshot{PersistenceID: p, SeqNr: 1 << 40, Timestamp: ts, Manifest: "pkg.State/v3", Payload: big}
	keep := bytes.Clone(big)
	save(t, s, in)
	big[0] = 9 // the store must not keep the caller's slice
	got, ok, err := s.Load(ctxFor(t), p, snapshot.Latest())
	if err != nil || !ok {
		t.Fatalf("Load: ok=%v err=%v", ok, err)
	}
	if got.PersistenceID != p || got.SeqNr != in.SeqNr || got.Manifest != in.Manifest || !bytes.Equal(got.Payload, keep) {
		t.Fatalf("round trip: got {%q %d %q %d bytes}, want {%q %d %q %d bytes}",
			got.PersistenceID, got.SeqNr, got.Manifest, len(got.Payload), p, in.SeqNr, in.Manifest, len(keep))
	}
	if d := got.Timestamp.Sub(ts); d < -time.Microsecond || d > time.Microsecond {
		t.Fatalf("timestamp = %v, want %v", got.Timestamp, ts)
	}
	got.Payload[0] = 9
	again, _, _ := s.Load(ctxFor(t), p, snapshot.Latest())
	if again.Payload[0] != 0 {
		t.Fatalf("changing a loaded payload changed the stored one")
	}
	// An empty payload and manifest round trip too.
	save(t, s, snapshot.Snapshot{PersistenceID: p, SeqNr: 1, Timestamp: base})
	got, ok, err = s.Load(ctxFor(t), p, snapshot.UpTo(1))
	if err != nil || !ok || len(got.Payload) != 0 || got.Manifest != "" {
		t.Fatalf("empty snapshot: %+v ok=%v err=%v", got, ok, err)
	}
}

func testCancelledContext(t *testing.T, s snapshot.Store, pid func(string) string) {
	p := pid("a")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Save(ctx, snap(p, 1, base)); !errors.Is(err, context.Canceled) {
		t.Fatalf("Save: err = %v, want context.Canceled", err)
	}
	if _, _, err := s.Load(ctx, p, snapshot.Latest()); !errors.Is(err, context.Canceled) {
		t.Fatalf("Load: err = %v, want context.Canceled", err)
	}
	if err := s.Delete(ctx, p, snapshot.Latest()); !errors.Is(err, context.Canceled) {
		t.Fatalf("Delete: err = %v, want context.Canceled", err)
	}
	wantLoad(t, s, p, snapshot.Latest(), 0)
}
