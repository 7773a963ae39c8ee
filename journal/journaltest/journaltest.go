// Package journaltest is the conformance suite every journal.Journal
// implementation passes.
//
// An implementation's test calls Run with a constructor:
//
//	func TestConformance(t *testing.T) {
//		journaltest.Run(t, func(t *testing.T) journal.Journal { return memory.New() })
//	}
//
// The constructor is called once per subtest; it may return a fresh journal
// or a shared one (every subtest uses persistence ids of its own), and it
// registers any cleanup with t.Cleanup.
//
// A journal that answers journal.Queries also passes RunQueries.
package journaltest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/journal"
)

// Run runs the conformance suite as subtests of t.
func Run(t *testing.T, newJournal func(t *testing.T) journal.Journal) {
	tests := []struct {
		name string
		fn   func(t *testing.T, j journal.Journal, pid func(string) string)
	}{
		{"AtomicMultiEventWrite", testAtomicMultiEventWrite},
		{"ConflictOnExistingSeq", testConflictOnExistingSeq},
		{"Rejected", testRejected},
		{"ReplayRanges", testReplayRanges},
		{"ReplayAcrossPages", testReplayAcrossPages},
		{"ReplayCallbackErrorStops", testReplayCallbackErrorStops},
		{"ReplayCallbackUsesJournal", testReplayCallbackUsesJournal},
		{"HighestSeqNr", testHighestSeqNr},
		{"HighestSeqNrSurvivesDeleteTo", testHighestSurvivesDelete},
		{"DeleteTo", testDeleteTo},
		{"ConcurrentWritersDifferentPids", testConcurrentDifferentPids},
		{"ConcurrentConflictingWritersOnePid", testConcurrentConflicting},
		{"ConcurrentRacingWriters", testConcurrentRacing},
		{"RoundTrip", testRoundTrip},
		{"OrderingIncreases", testOrderingIncreases},
		{"CancelledContext", testCancelledContext},
		{"AsyncWriter", testAsyncWriter},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			j := newJournal(t)
			// Unique persistence ids per subtest let implementations share
			// one store between subtests.
			prefix := fmt.Sprintf("%s-%d", tc.name, time.Now().UnixNano())
			tc.fn(t, j, func(s string) string { return prefix + "|" + s })
		})
	}
}

func ctxFor(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// events returns n events of pid numbered from first, tagged with writer.
func events(pid string, first uint64, n int, writer string) []journal.Event {
	out := make([]journal.Event, n)
	for i := range out {
		seq := first + uint64(i)
		out[i] = journal.Event{
			PersistenceID: pid,
			SeqNr:         seq,
			Manifest:      "test.Event",
			Payload:       []byte(fmt.Sprintf("%s:%d", writer, seq)),
			Tags:          []string{"t"},
			WriterID:      writer,
			Timestamp:     time.Now(),
		}
	}
	return out
}

func write(t *testing.T, j journal.Journal, evs []journal.Event) {
	t.Helper()
	if err := j.Write(ctxFor(t), evs); err != nil {
		t.Fatalf("Write %s %d..%d: %v", evs[0].PersistenceID, evs[0].SeqNr, evs[len(evs)-1].SeqNr, err)
	}
}

func replay(t *testing.T, j journal.Journal, pid string, from, to uint64) []journal.Event {
	t.Helper()
	var got []journal.Event
	if err := j.Replay(ctxFor(t), pid, from, to, func(e journal.Event) error {
		got = append(got, e)
		return nil
	}); err != nil {
		t.Fatalf("Replay %s %d..%d: %v", pid, from, to, err)
	}
	return got
}

func seqs(evs []journal.Event) []uint64 {
	out := make([]uint64, len(evs))
	for i, e := range evs {
		out[i] = e.SeqNr
	}
	return out
}

func wantSeqs(t *testing.T, got []journal.Event, from, to uint64) {
	t.Helper()
	var want []uint64
	for s := from; s <= to && from != 0; s++ {
		want = append(want, s)
	}
	g := seqs(got)
	if len(g) != len(want) {
		t.Fatalf("replayed seq nrs %v, want %d..%d", short(g), from, to)
	}
	for i := range g {
		if g[i] != want[i] {
			t.Fatalf("replayed seq nrs %v, want %d..%d", short(g), from, to)
		}
	}
}

func short(s []uint64) string {
	if len(s) > 20 {
		return fmt.Sprintf("%v…(%d)", s[:20], len(s))
	}
	return fmt.Sprint(s)
}

func highest(t *testing.T, j journal.Journal, pid string) uint64 {
	t.Helper()
	h, err := j.HighestSeqNr(ctxFor(t), pid)
	if err != nil {
		t.Fatalf("HighestSeqNr %s: %v", pid, err)
	}
	return h
}

func wantConflict(t *testing.T, err error, pid string, lo, hi uint64) {
	t.Helper()
	if !errors.Is(err, journal.ErrWriteConflict) {
		t.Fatalf("err = %v, want one matching journal.ErrWriteConflict", err)
	}
	var wc *journal.WriteConflictError
	if !errors.As(err, &wc) {
		t.Fatalf("err = %v (%T), want a *journal.WriteConflictError in its chain", err, err)
	}
	if wc.PersistenceID != pid || wc.SeqNr < lo || wc.SeqNr > hi {
		t.Fatalf("conflict names %s seq %d, want %s seq in %d..%d", wc.PersistenceID, wc.SeqNr, pid, lo, hi)
	}
}

func testAtomicMultiEventWrite(t *testing.T, j journal.Journal, pid func(string) string) {
	p := pid("a")
	write(t, j, events(p, 1, 5, "w1"))
	write(t, j, events(p, 6, 1, "w1"))
	got := replay(t, j, p, 1, math.MaxUint64)
	wantSeqs(t, got, 1, 6)
	for _, e := range got {
		if want := fmt.Sprintf("w1:%d", e.SeqNr); string(e.Payload) != want {
			t.Fatalf("payload of seq %d = %q, want %q", e.SeqNr, e.Payload, want)
		}
	}
	if h := highest(t, j, p); h != 6 {
		t.Fatalf("HighestSeqNr = %d, want 6", h)
	}
}

func testConflictOnExistingSeq(t *testing.T, j journal.Journal, pid func(string) string) {
	p := pid("a")
	write(t, j, events(p, 1, 3, "w1"))

	// A batch overlapping the end fails whole: seq 4 and 5 are not written.
	err := j.Write(ctxFor(t), events(p, 3, 3, "w2"))
	wantConflict(t, err, p, 3, 3)
	// A batch entirely inside the existing range.
	err = j.Write(ctxFor(t), events(p, 1, 2, "w2"))
	wantConflict(t, err, p, 1, 2)
	// A single event on an existing seq.
	err = j.Write(ctxFor(t), events(p, 2, 1, "w2"))
	wantConflict(t, err, p, 2, 2)

	got := replay(t, j, p, 1, math.MaxUint64)
	wantSeqs(t, got, 1, 3)
	for _, e := range got {
		if e.WriterID != "w1" {
			t.Fatalf("seq %d written by %q after failed writes, want w1", e.SeqNr, e.WriterID)
		}
	}
	if h := highest(t, j, p); h != 3 {
		t.Fatalf("HighestSeqNr = %d after conflicts, want 3", h)
	}
	// The journal still accepts the next seq.
	write(t, j, events(p, 4, 2, "w1"))
	wantSeqs(t, replay(t, j, p, 1, math.MaxUint64), 1, 5)
}

func testRejected(t *testing.T, j journal.Journal, pid func(string) string) {
	p, q := pid("a"), pid("b")
	mixed := append(events(p, 1, 1, "w"), events(q, 2, 1, "w")...)
	gap := events(p, 1, 3, "w")
	gap[2].SeqNr = 4
	backwards := events(p, 2, 2, "w")
	backwards[0], backwards[1] = backwards[1], backwards[0]
	cases := map[string][]journal.Event{
		"empty":           nil,
		"empty pid":       events("", 1, 1, "w"),
		"seq zero":        events(p, 0, 2, "w"),
		"mixed pids":      mixed,
		"gap":             gap,
		"not ascending":   backwards,
		"duplicate seq":   {events(p, 1, 1, "w")[0], events(p, 1, 1, "w")[0]},
		"mixed with gaps": append(events(p, 1, 1, "w"), events(q, 5, 1, "w")...),
	}
	for name, evs := range cases {
		err := j.Write(ctxFor(t), evs)
		if !errors.Is(err, journal.ErrRejected) {
			t.Errorf("%s: err = %v, want one matching journal.ErrRejected", name, err)
		}
		if errors.Is(err, journal.ErrWriteConflict) {
			t.Errorf("%s: rejected batch also reported as a conflict: %v", name, err)
		}
	}
	for _, id := range []string{p, q} {
		if got := replay(t, j, id, 0, math.MaxUint64); len(got) != 0 {
			t.Fatalf("rejected writes stored %v for %s", seqs(got), id)
		}
		if h := highest(t, j, id); h != 0 {
			t.Fatalf("HighestSeqNr(%s) = %d after rejected writes, want 0", id, h)
		}
	}
}

func testReplayRanges(t *testing.T, j journal.Journal, pid func(string) string) {
	p := pid("a")
	write(t, j, events(p, 1, 4, "w"))
	write(t, j, events(p, 5, 6, "w"))
	write(t, j, events(pid("b"), 1, 20, "w")) // another pid never leaks in

	wantSeqs(t, replay(t, j, p, 0, math.MaxUint64), 1, 10)
	wantSeqs(t, replay(t, j, p, 1, 10), 1, 10)
	wantSeqs(t, replay(t, j, p, 3, 7), 3, 7)
	wantSeqs(t, replay(t, j, p, 4, 5), 4, 5)
	wantSeqs(t, replay(t, j, p, 8, 100), 8, 10)
	wantSeqs(t, replay(t, j, p, 10, 10), 10, 10)
	wantSeqs(t, replay(t, j, p, 0, 0), 0, 0)
	wantSeqs(t, replay(t, j, p, 11, math.MaxUint64), 0, 0)
	wantSeqs(t, replay(t, j, p, 7, 6), 0, 0)
	wantSeqs(t, replay(t, j, pid("unknown"), 0, math.MaxUint64), 0, 0)
	// A pid that is a prefix of another is a different pid.
	wantSeqs(t, replay(t, j, pid(""), 0, math.MaxUint64), 0, 0)
}

func testReplayAcrossPages(t *testing.T, j journal.Journal, pid func(string) string) {
	p := pid("long")
	const n, batch = 2500, 100
	for first := uint64(1); first <= n; first += batch {
		write(t, j, events(p, first, batch, "w"))
	}
	got := replay(t, j, p, 1, math.MaxUint64)
	wantSeqs(t, got, 1, n)
	wantSeqs(t, replay(t, j, p, 999, 2001), 999, 2001)
	for i := 1; i < len(got); i++ {
		if got[i].Ordering <= got[i-1].Ordering {
			t.Fatalf("Ordering not increasing at seq %d: %d then %d", got[i].SeqNr, got[i-1].Ordering, got[i].Ordering)
		}
	}
}

func testReplayCallbackErrorStops(t *testing.T, j journal.Journal, pid func(string) string) {
	p := pid("a")
	for first := uint64(1); first <= 1000; first += 100 {
		write(t, j, events(p, first, 100, "w"))
	}
	stop := errors.New("enough")
	var calls int
	err := j.Replay(ctxFor(t), p, 1, math.MaxUint64, func(e journal.Event) error {
		calls++
		if e.SeqNr != uint64(calls) {
			return fmt.Errorf("call %d got seq %d", calls, e.SeqNr)
		}
		if calls == 10 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) {
		t.Fatalf("Replay err = %v, want the callback's error", err)
	}
	if calls != 10 {
		t.Fatalf("callback called %d times after returning an error at call 10", calls)
	}

	// A cancelled context stops a replay too.
	ctx, cancel := context.WithCancel(ctxFor(t))
	calls = 0
	err = j.Replay(ctx, p, 1, math.MaxUint64, func(e journal.Event) error {
		calls++
		if calls == 5 {
			cancel()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Replay after cancel: err = %v (after %d events), want context.Canceled", err, calls)
	}
}

// testReplayCallbackUsesJournal: fn may call the journal (an entity's event
// handler might, through some service) without deadlocking the replay.
func testReplayCallbackUsesJournal(t *testing.T, j journal.Journal, pid func(string) string) {
	p, q := pid("a"), pid("b")
	for first := uint64(1); first <= 3000; first += 500 {
		write(t, j, events(p, first, 500, "w"))
	}
	ctx := ctxFor(t)
	var n uint64
	err := j.Replay(ctx, p, 1, math.MaxUint64, func(e journal.Event) error {
		n++
		if e.SeqNr%1000 != 0 {
			return nil
		}
		if h, err := j.HighestSeqNr(ctx, p); err != nil || h != 3000 {
			return fmt.Errorf("HighestSeqNr inside replay = %d, %v", h, err)
		}
		return j.Write(ctx, events(q, e.SeqNr/1000, 1, "w"))
	})
	if err != nil {
		t.Fatalf("Replay: %v", err)
	}
	if n != 3000 {
		t.Fatalf("replayed %d events, want 3000", n)
	}
	wantSeqs(t, replay(t, j, q, 0, math.MaxUint64), 1, 3)
}

func testHighestSeqNr(t *testing.T, j journal.Journal, pid func(string) string) {
	p := pid("a")
	if h := highest(t, j, p); h != 0 {
		t.Fatalf("HighestSeqNr of unknown pid = %d, want 0", h)
	}
	write(t, j, events(p, 1, 3, "w"))
	if h := highest(t, j, p); h != 3 {
		t.Fatalf("HighestSeqNr = %d, want 3", h)
	}
	write(t, j, events(p, 4, 1, "w"))
	if h := highest(t, j, p); h != 4 {
		t.Fatalf("HighestSeqNr = %d, want 4", h)
	}
	if h := highest(t, j, pid("b")); h != 0 {
		t.Fatalf("HighestSeqNr of another pid = %d, want 0", h)
	}
}

func testHighestSurvivesDelete(t *testing.T, j journal.Journal, pid func(string) string) {
	p := pid("a")
	write(t, j, events(p, 1, 5, "w"))
	if err := j.DeleteTo(ctxFor(t), p, 3); err != nil {
		t.Fatalf("DeleteTo 3: %v", err)
	}
	if h := highest(t, j, p); h != 5 {
		t.Fatalf("HighestSeqNr after DeleteTo 3 = %d, want 5", h)
	}
	if err := j.DeleteTo(ctxFor(t), p, 5); err != nil {
		t.Fatalf("DeleteTo 5: %v", err)
	}
	if h := highest(t, j, p); h != 5 {
		t.Fatalf("HighestSeqNr after deleting everything = %d, want 5", h)
	}
	if got := replay(t, j, p, 0, math.MaxUint64); len(got) != 0 {
		t.Fatalf("replay after deleting everything: %v", seqs(got))
	}
	// A deleted seq nr still counts as taken: a stale incarnation cannot
	// reuse it.
	err := j.Write(ctxFor(t), events(p, 5, 1, "stale"))
	wantConflict(t, err, p, 5, 5)
	err = j.Write(ctxFor(t), events(p, 1, 2, "stale"))
	wantConflict(t, err, p, 1, 2)
	write(t, j, events(p, 6, 2, "w"))
	wantSeqs(t, replay(t, j, p, 0, math.MaxUint64), 6, 7)
	if h := highest(t, j, p); h != 7 {
		t.Fatalf("HighestSeqNr = %d, want 7", h)
	}
}

func testDeleteTo(t *testing.T, j journal.Journal, pid func(string) string) {
	p, q := pid("a"), pid("b")
	write(t, j, events(p, 1, 10, "w"))
	write(t, j, events(q, 1, 10, "w"))
	ctx := ctxFor(t)
	if err := j.DeleteTo(ctx, p, 4); err != nil {
		t.Fatalf("DeleteTo: %v", err)
	}
	wantSeqs(t, replay(t, j, p, 0, math.MaxUint64), 5, 10)
	wantSeqs(t, replay(t, j, p, 2, 6), 5, 6)
	wantSeqs(t, replay(t, j, q, 0, math.MaxUint64), 1, 10) // other pids untouched
	// Idempotent, and a lower bound than already deleted is a no-op.
	if err := j.DeleteTo(ctx, p, 4); err != nil {
		t.Fatalf("DeleteTo again: %v", err)
	}
	if err := j.DeleteTo(ctx, p, 2); err != nil {
		t.Fatalf("DeleteTo lower: %v", err)
	}
	wantSeqs(t, replay(t, j, p, 0, math.MaxUint64), 5, 10)
	// Beyond the highest deletes everything written so far.
	if err := j.DeleteTo(ctx, p, math.MaxUint64); err != nil {
		t.Fatalf("DeleteTo max: %v", err)
	}
	wantSeqs(t, replay(t, j, p, 0, math.MaxUint64), 0, 0)
	// Unknown pid: no error.
	if err := j.DeleteTo(ctx, pid("unknown"), 10); err != nil {
		t.Fatalf("DeleteTo unknown pid: %v", err)
	}
	if h := highest(t, j, pid("unknown")); h != 0 {
		t.Fatalf("HighestSeqNr of a pid only deleted = %d, want 0", h)
	}
}

func testConcurrentDifferentPids(t *testing.T, j journal.Journal, pid func(string) string) {
	const writers, rounds = 50, 20
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := pid(fmt.Sprint(w))
			next := uint64(1)
			for r := range rounds {
				n := 1 + (w+r)%3
				if err := j.Write(context.Background(), events(p, next, n, "w")); err != nil {
					errs <- fmt.Errorf("writer %d round %d: %w", w, r, err)
					return
				}
				next += uint64(n)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for w := range writers {
		p := pid(fmt.Sprint(w))
		var total uint64
		for r := range rounds {
			total += uint64(1 + (w+r)%3)
		}
		wantSeqs(t, replay(t, j, p, 0, math.MaxUint64), 1, total)
		if h := highest(t, j, p); h != total {
			t.Fatalf("HighestSeqNr(%s) = %d, want %d", p, h, total)
		}
	}
}

// testConcurrentConflicting starts several writers at once on seq 1 of one
// pid: exactly one wins, the others get the conflict, and the stored log is
// the winner's batch alone.
func testConcurrentConflicting(t *testing.T, j journal.Journal, pid func(string) string) {
	const writers, batch = 8, 4
	for round := range 5 {
		p := pid(fmt.Sprint(round))
		start := make(chan struct{})
		results := make([]error, writers)
		var wg sync.WaitGroup
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				results[w] = j.Write(context.Background(), events(p, 1, batch, fmt.Sprintf("w%d", w)))
			}()
		}
		close(start)
		wg.Wait()
		winner := -1
		for w, err := range results {
			switch {
			case err == nil:
				if winner >= 0 {
					t.Fatalf("writers %d and %d both wrote seq 1..%d of %s", winner, w, batch, p)
				}
				winner = w
			default:
				wantConflict(t, err, p, 1, batch)
			}
		}
		if winner < 0 {
			t.Fatalf("no writer won on %s: %v", p, results)
		}
		got := replay(t, j, p, 0, math.MaxUint64)
		wantSeqs(t, got, 1, batch)
		for _, e := range got {
			if want := fmt.Sprintf("w%d", winner); e.WriterID != want {
				t.Fatalf("seq %d written by %s, want the winner %s only", e.SeqNr, e.WriterID, want)
			}
		}
	}
}

// testConcurrentRacing runs writers that keep appending to one pid, each
// reading the highest seq nr and writing a batch after it, retrying on
// conflict. The log ends contiguous, each batch whole and from one writer.
func testConcurrentRacing(t *testing.T, j journal.Journal, pid func(string) string) {
	const writers, batches, batch = 6, 15, 3
	p := pid("a")
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			name := fmt.Sprintf("w%d", w)
			for done := 0; done < batches; {
				h, err := j.HighestSeqNr(ctx, p)
				if err != nil {
					errs <- err
					return
				}
				err = j.Write(ctx, events(p, h+1, batch, name))
				switch {
				case err == nil:
					done++
				case errors.Is(err, journal.ErrWriteConflict):
				default:
					errs <- fmt.Errorf("%s: %w", name, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	got := replay(t, j, p, 0, math.MaxUint64)
	wantSeqs(t, got, 1, writers*batches*batch)
	for i := 0; i < len(got); i += batch {
		for k := 1; k < batch; k++ {
			if got[i+k].WriterID != got[i].WriterID {
				t.Fatalf("batch at seq %d interleaves writers %s and %s", got[i].SeqNr, got[i].WriterID, got[i+k].WriterID)
			}
		}
	}
}

func testRoundTrip(t *testing.T, j journal.Journal, pid func(string) string) {
	p := pid("ünïcode ✓ 'quoted' \"id\"")
	big := bytes.Repeat([]byte{0, 1, 2, 0xff, 0xfe}, 1<<18) // 1.25 MiB
	ts := time.Date(2024, 2, 29, 23, 59, 58, 123456789, time.FixedZone("x", 5*3600+1800))
	in := []journal.Event{
		{PersistenceID: p, SeqNr: 1, Manifest: "pkg.Event/v2", Payload: []byte{0, 0xff, 'a', 0, 0x80}, Tags: []string{"a", "b c", "ü"}, WriterID: "writer-1", Timestamp: ts},
		{PersistenceID: p, SeqNr: 2, Manifest: "", Payload: nil, Tags: nil, WriterID: "", Timestamp: ts.Add(time.Second)},
		{PersistenceID: p, SeqNr: 3, Manifest: "unknown.Manifest.NobodyRegistered", Payload: big, Tags: []string{}, WriterID: "writer-2", Timestamp: time.Now()},
		{PersistenceID: p, SeqNr: 4, Manifest: "m", Payload: []byte(`{"json":true}`), Tags: []string{""}, WriterID: "w", Timestamp: time.Now()},
	}
	// The journal must not keep references into the caller's slices.
	keep := make([]journal.Event, len(in))
	for i, e := range in {
		keep[i] = e
		keep[i].Payload = bytes.Clone(e.Payload)
		keep[i].Tags = append([]string(nil), e.Tags...)
	}
	write(t, j, in)
	in[0].Payload[0] = 'X'
	in[0].Tags[0] = "X"

	got := replay(t, j, p, 0, math.MaxUint64)
	if len(got) != len(keep) {
		t.Fatalf("replayed %d events, want %d", len(got), len(keep))
	}
	for i, want := range keep {
		g := got[i]
		if g.PersistenceID != want.PersistenceID || g.SeqNr != want.SeqNr || g.Manifest != want.Manifest || g.WriterID != want.WriterID {
			t.Errorf("event %d = {%q %d %q %q}, want {%q %d %q %q}", i, g.PersistenceID, g.SeqNr, g.Manifest, g.WriterID,
				want.PersistenceID, want.SeqNr, want.Manifest, want.WriterID)
		}
		if !bytes.Equal(g.Payload, want.Payload) {
			t.Errorf("event %d payload differs (%d bytes, want %d)", i, len(g.Payload), len(want.Payload))
		}
		if len(g.Tags) != len(want.Tags) {
			t.Errorf("event %d tags = %q, want %q", i, g.Tags, want.Tags)
		} else {
			for k := range g.Tags {
				if g.Tags[k] != want.Tags[k] {
					t.Errorf("event %d tags = %q, want %q", i, g.Tags, want.Tags)
				}
			}
		}
		// Stores may keep microseconds only (PostgreSQL does).
		if d := g.Timestamp.Sub(want.Timestamp); d < -time.Microsecond || d > time.Microsecond {
			t.Errorf("event %d timestamp = %v, want %v", i, g.Timestamp, want.Timestamp)
		}
		if g.Ordering <= 0 {
			t.Errorf("event %d Ordering = %d, want > 0", i, g.Ordering)
		}
	}
	// Replayed events are the caller's to keep and change.
	got[0].Payload[0] = 'Y'
	if again := replay(t, j, p, 1, 1); again[0].Payload[0] != 0 {
		t.Fatalf("changing a replayed payload changed the stored one")
	}
}

func testOrderingIncreases(t *testing.T, j journal.Journal, pid func(string) string) {
	p, q := pid("a"), pid("b")
	write(t, j, events(p, 1, 3, "w"))
	write(t, j, events(q, 1, 2, "w"))
	write(t, j, events(p, 4, 2, "w"))
	a := replay(t, j, p, 0, math.MaxUint64)
	b := replay(t, j, q, 0, math.MaxUint64)
	for i := 1; i < len(a); i++ {
		if a[i].Ordering <= a[i-1].Ordering {
			t.Fatalf("Ordering of %s not increasing: %d then %d", p, a[i-1].Ordering, a[i].Ordering)
		}
	}
	// Writes completed one after the other are ordered in that order.
	if !(a[2].Ordering < b[0].Ordering && b[1].Ordering < a[3].Ordering) {
		t.Fatalf("Ordering does not follow write order: a3=%d b1=%d b2=%d a4=%d", a[2].Ordering, b[0].Ordering, b[1].Ordering, a[3].Ordering)
	}
}

func testCancelledContext(t *testing.T, j journal.Journal, pid func(string) string) {
	p := pid("a")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := j.Write(ctx, events(p, 1, 2, "w")); !errors.Is(err, context.Canceled) {
		t.Fatalf("Write with a cancelled context: err = %v, want context.Canceled", err)
	}
	if err := j.Replay(ctx, p, 0, math.MaxUint64, func(journal.Event) error { return nil }); !errors.Is(err, context.Canceled) {
		t.Fatalf("Replay with a cancelled context: err = %v, want context.Canceled", err)
	}
	if _, err := j.HighestSeqNr(ctx, p); !errors.Is(err, context.Canceled) {
		t.Fatalf("HighestSeqNr with a cancelled context: err = %v, want context.Canceled", err)
	}
	if err := j.DeleteTo(ctx, p, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("DeleteTo with a cancelled context: err = %v, want context.Canceled", err)
	}
	if got := replay(t, j, p, 0, math.MaxUint64); len(got) != 0 {
		t.Fatalf("a write with a cancelled context stored %v", seqs(got))
	}
}

// testAsyncWriter checks journal.AsyncWriter for implementations that have
// it: done is called exactly once with the error Write would have returned.
func testAsyncWriter(t *testing.T, j journal.Journal, pid func(string) string) {
	aw, ok := j.(journal.AsyncWriter)
	if !ok {
		t.Skip("no journal.AsyncWriter")
	}
	p := pid("taken")
	write(t, j, events(p, 1, 2, "w"))

	type outcome struct {
		i   int
		err error
	}
	const fresh = 20
	batches := [][]journal.Event{
		events(p, 2, 2, "stale"), // conflict
		nil,                      // rejected
	}
	for i := range fresh {
		batches = append(batches, events(pid(fmt.Sprint(i)), 1, 1+i%3, "w"))
	}
	out := make(chan outcome, 2*len(batches))
	for i, b := range batches {
		aw.WriteAsync(context.Background(), b, func(err error) { out <- outcome{i, err} })
	}
	got := make([]int, len(batches))
	deadline := time.After(time.Minute)
	for range batches {
		select {
		case o := <-out:
			got[o.i]++
			switch {
			case o.i == 0:
				wantConflict(t, o.err, p, 2, 2)
			case o.i == 1:
				if !errors.Is(o.err, journal.ErrRejected) {
					t.Errorf("empty batch: err = %v, want ErrRejected", o.err)
				}
			case o.err != nil:
				t.Errorf("write %d: %v", o.i, o.err)
			}
		case <-deadline:
			t.Fatalf("WriteAsync callbacks missing: calls per write %v", got)
		}
	}
	select {
	case o := <-out:
		t.Fatalf("done called again for write %d", o.i)
	default:
	}
	wantSeqs(t, replay(t, j, p, 0, math.MaxUint64), 1, 2)
	for i := range fresh {
		wantSeqs(t, replay(t, j, pid(fmt.Sprint(i)), 0, math.MaxUint64), 1, uint64(1+i%3))
	}
}
