package journaltest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/journal"
)

// QueryJournal is a journal that answers queries.
type QueryJournal interface {
	journal.Journal
	journal.Queries
	journal.EventCounter
}

// RunQueries runs the conformance suite of journal.Queries as subtests of t.
// Like Run's, the constructor is called once per subtest and may return a
// shared journal: every subtest uses entity types and tags of its own.
//
// A Live query ends when its context does, returning the context's error.
func RunQueries(t *testing.T, newJournal func(t *testing.T) QueryJournal) {
	tests := []struct {
		name string
		fn   func(t *testing.T, j QueryJournal, typ string)
	}{
		{"SliceRangeFiltering", testSliceRanges},
		{"TagFiltering", testTags},
		{"EventContents", testEventContents},
		{"PerPersistenceIDOrder", testPerPidOrder},
		{"ResumeFromOffset", testResume},
		{"CurrentEnds", testCurrentEnds},
		{"LiveFollows", testLiveFollows},
		{"LiveTagFollows", testLiveTagFollows},
		{"LiveConcurrentWriters", testLiveConcurrent},
		{"DeletedEventsNotDelivered", testQueryDeleted},
		{"OffsetOfAnotherKind", testOffsetMismatch},
		{"InvalidSliceRange", testInvalidRange},
		{"CallbackErrorStops", testQueryCallbackError},
		{"CurrentPersistenceIDs", testPersistenceIDs},
		{"CountEventsBySlices", testCount},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			j := newJournal(t)
			tc.fn(t, j, fmt.Sprintf("Q%s%d", tc.name, time.Now().UnixNano()))
		})
	}
}

// qevents returns n events of pid from seq first, tagged with tags.
func qevents(pid string, first uint64, n int, tags ...string) []journal.Event {
	out := make([]journal.Event, n)
	for i := range out {
		seq := first + uint64(i)
		out[i] = journal.Event{
			PersistenceID: pid,
			SeqNr:         seq,
			Manifest:      "test.Queried",
			Payload:       []byte(fmt.Sprintf("%s:%d", pid, seq)),
			Tags:          tags,
			WriterID:      "w",
			Timestamp:     time.Now(),
		}
	}
	return out
}

func bySlices(t *testing.T, j journal.Queries, typ string, r journal.SliceRange, after journal.Offset) []journal.QueriedEvent {
	t.Helper()
	var got []journal.QueriedEvent
	if err := j.EventsBySlices(ctxFor(t), typ, r, after, journal.Current, func(e journal.QueriedEvent) error {
		got = append(got, e)
		return nil
	}); err != nil {
		t.Fatalf("EventsBySlices(%s, %v, %v): %v", typ, r, after, err)
	}
	return got
}

func byTag(t *testing.T, j journal.Queries, tag string, after journal.Offset) []journal.QueriedEvent {
	t.Helper()
	var got []journal.QueriedEvent
	if err := j.EventsByTag(ctxFor(t), tag, after, journal.Current, func(e journal.QueriedEvent) error {
		got = append(got, e)
		return nil
	}); err != nil {
		t.Fatalf("EventsByTag(%s, %v): %v", tag, after, err)
	}
	return got
}

type pidSeq struct {
	pid string
	seq uint64
}

func keys(evs []journal.QueriedEvent) []pidSeq {
	out := make([]pidSeq, len(evs))
	for i, e := range evs {
		out[i] = pidSeq{e.PersistenceID, e.SeqNr}
	}
	return out
}

// wantStream checks that got is delivered in offset order, each event
// once, per persistence id in seq nr order, and holds exactly want.
func wantStream(t *testing.T, got []journal.QueriedEvent, want map[pidSeq]bool) {
	t.Helper()
	seen := map[pidSeq]bool{}
	last := map[string]uint64{}
	for i, e := range got {
		k := pidSeq{e.PersistenceID, e.SeqNr}
		if seen[k] {
			t.Fatalf("%s seq %d delivered twice", k.pid, k.seq)
		}
		seen[k] = true
		if !want[k] {
			t.Fatalf("%s seq %d delivered, not expected", k.pid, k.seq)
		}
		if e.SeqNr <= last[e.PersistenceID] {
			t.Fatalf("%s seq %d delivered after seq %d", k.pid, k.seq, last[e.PersistenceID])
		}
		last[e.PersistenceID] = e.SeqNr
		if i > 0 && !got[i-1].Offset.Less(e.Offset) {
			t.Fatalf("offset %v delivered after %v", e.Offset, got[i-1].Offset)
		}
	}
	for k := range want {
		if !seen[k] {
			t.Fatalf("%s seq %d not delivered (%d of %d delivered)", k.pid, k.seq, len(seen), len(want))
		}
	}
}

func set(evs ...[]journal.Event) map[pidSeq]bool {
	out := map[pidSeq]bool{}
	for _, es := range evs {
		for _, e := range es {
			out[pidSeq{e.PersistenceID, e.SeqNr}] = true
		}
	}
	return out
}

func testSliceRanges(t *testing.T, j QueryJournal, typ string) {
	var all []journal.Event
	for i := range 40 {
		evs := qevents(fmt.Sprintf("%s|e%d", typ, i), 1, 1+i%3)
		write(t, j, evs)
		all = append(all, evs...)
	}
	other := qevents(typ+"x|e1", 1, 2) // another entity type, sharing a prefix
	write(t, j, other)

	got := bySlices(t, j, typ, journal.AllSlices, journal.Offset{})
	wantStream(t, got, set(all))
	for _, e := range got {
		if e.EntityType != typ || e.Slice != journal.SliceOf(e.PersistenceID) {
			t.Fatalf("%s seq %d: entity type %q slice %d, want %q %d", e.PersistenceID, e.SeqNr, e.EntityType, e.Slice, typ, journal.SliceOf(e.PersistenceID))
		}
	}
	ranges, err := journal.SplitSlices(4)
	if err != nil {
		t.Fatal(err)
	}
	union := map[pidSeq]bool{}
	for _, r := range ranges {
		part := bySlices(t, j, typ, r, journal.Offset{})
		want := map[pidSeq]bool{}
		for _, e := range all {
			if r.Contains(journal.SliceOf(e.PersistenceID)) {
				want[pidSeq{e.PersistenceID, e.SeqNr}] = true
			}
		}
		wantStream(t, part, want)
		for _, k := range keys(part) {
			union[k] = true
		}
	}
	if len(union) != len(all) {
		t.Fatalf("4 slice ranges delivered %d events, want %d", len(union), len(all))
	}
	// One slice alone: exactly its pid's events.
	s := journal.SliceOf(all[0].PersistenceID)
	one := bySlices(t, j, typ, journal.SliceRange{Min: s, Max: s}, journal.Offset{})
	for _, e := range one {
		if e.Slice != s {
			t.Fatalf("slice %d delivered for range [%d, %d]", e.Slice, s, s)
		}
	}
	if len(one) == 0 {
		t.Fatalf("slice %d of %s: nothing delivered", s, all[0].PersistenceID)
	}
}

func testTags(t *testing.T, j QueryJournal, typ string) {
	a, b := typ+"-a", typ+"-b"
	ea := qevents(typ+"|1", 1, 3, a)
	eb := qevents(typ+"|2", 1, 2, b)
	eab := qevents(typ+"|3", 1, 2, b, a)
	none := qevents(typ+"|4", 1, 2)
	for _, evs := range [][]journal.Event{ea, eb, eab, none, qevents(typ+"|1", 4, 1, b)} {
		write(t, j, evs)
	}
	wantStream(t, byTag(t, j, a, journal.Offset{}), set(ea, eab))
	wantStream(t, byTag(t, j, b, journal.Offset{}), set(eb, eab, []journal.Event{{PersistenceID: typ + "|1", SeqNr: 4}}))
	if got := byTag(t, j, typ+"-none", journal.Offset{}); len(got) != 0 {
		t.Fatalf("an unused tag delivered %d events", len(got))
	}
	if got := byTag(t, j, typ, journal.Offset{}); len(got) != 0 {
		t.Fatalf("a prefix of the tags delivered %d events", len(got))
	}
}

func testEventContents(t *testing.T, j QueryJournal, typ string) {
	ts := time.Date(2024, 5, 6, 7, 8, 9, 123456000, time.UTC)
	in := journal.Event{PersistenceID: typ + "|x", SeqNr: 1, Manifest: "m.V1", Payload: []byte{0, 1, 2, 255},
		Tags: []string{typ + `-t"1`, typ + "-t2"}, WriterID: "writer-7", Timestamp: ts}
	write(t, j, []journal.Event{in})
	for _, got := range [][]journal.QueriedEvent{
		bySlices(t, j, typ, journal.AllSlices, journal.Offset{}),
		byTag(t, j, typ+`-t"1`, journal.Offset{}),
	} {
		if len(got) != 1 {
			t.Fatalf("%d events, want 1", len(got))
		}
		e := got[0]
		if e.PersistenceID != in.PersistenceID || e.SeqNr != 1 || e.Manifest != in.Manifest || string(e.Payload) != string(in.Payload) ||
			!slices.Equal(e.Tags, in.Tags) || e.WriterID != in.WriterID || !e.Timestamp.Equal(ts) || e.Ordering == 0 {
			t.Fatalf("queried %+v, want %+v", e.Event, in)
		}
		if e.Offset.IsStart() || e.Offset.Kind == "" {
			t.Fatalf("offset %v, want one of the journal's kind", e.Offset)
		}
	}
}

func testPerPidOrder(t *testing.T, j QueryJournal, typ string) {
	var all []journal.Event
	for round := range 5 {
		for p := range 4 {
			evs := qevents(fmt.Sprintf("%s|p%d", typ, p), uint64(round*3+1), 3)
			write(t, j, evs)
			all = append(all, evs...)
		}
	}
	wantStream(t, bySlices(t, j, typ, journal.AllSlices, journal.Offset{}), set(all))
}

func testResume(t *testing.T, j QueryJournal, typ string) {
	tag := typ + "-r"
	var all []journal.Event
	for i := range 30 {
		evs := qevents(fmt.Sprintf("%s|r%d", typ, i%5), uint64(i/5+1), 1, tag)
		write(t, j, evs)
		all = append(all, evs...)
	}
	full := bySlices(t, j, typ, journal.AllSlices, journal.Offset{})
	fullTag := byTag(t, j, tag, journal.Offset{})
	for _, k := range []int{0, 1, 13, 29} {
		// Through its text form, as an offset store keeps it.
		text, err := full[k].Offset.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var after journal.Offset
		if err := after.UnmarshalText(text); err != nil {
			t.Fatal(err)
		}
		rest := bySlices(t, j, typ, journal.AllSlices, after)
		if !slices.Equal(keys(rest), keys(full[k+1:])) {
			t.Fatalf("resumed after event %d (%s): %v, want %v", k, text, keys(rest), keys(full[k+1:]))
		}
		restTag := byTag(t, j, tag, fullTag[k].Offset)
		if !slices.Equal(keys(restTag), keys(fullTag[k+1:])) {
			t.Fatalf("tag query resumed after event %d: %v, want %v", k, keys(restTag), keys(fullTag[k+1:]))
		}
	}
	// Resuming at the end and writing more delivers just the new event.
	more := qevents(typ+"|r0", 7, 1, tag)
	write(t, j, more)
	wantStream(t, bySlices(t, j, typ, journal.AllSlices, full[len(full)-1].Offset), set(more))
}

func testCurrentEnds(t *testing.T, j QueryJournal, typ string) {
	evs := qevents(typ+"|c", 1, 5)
	write(t, j, evs)
	done := make(chan error, 1)
	var got []journal.QueriedEvent
	go func() {
		done <- j.EventsBySlices(ctxFor(t), typ, journal.AllSlices, journal.Offset{}, journal.Current, func(e journal.QueriedEvent) error {
			got = append(got, e)
			return nil
		})
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Current query: %v", err)
		}
	case <-ctxFor(t).Done():
		t.Fatal("a Current query did not end")
	}
	wantStream(t, got, set(evs))
	if got := bySlices(t, j, typ+"-empty", journal.AllSlices, journal.Offset{}); len(got) != 0 {
		t.Fatalf("an empty entity type delivered %d events", len(got))
	}
}

// live runs a Live query in a goroutine; its events arrive on the channel,
// its result on the error channel once cancel is called.
func live(t *testing.T, run func(ctx context.Context, fn func(journal.QueriedEvent) error) error) (<-chan journal.QueriedEvent, <-chan error, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctxFor(t))
	evs := make(chan journal.QueriedEvent, 10000)
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, func(e journal.QueriedEvent) error {
			evs <- e
			return nil
		})
	}()
	t.Cleanup(cancel)
	return evs, done, cancel
}

func receive(t *testing.T, evs <-chan journal.QueriedEvent, n int) []journal.QueriedEvent {
	t.Helper()
	var got []journal.QueriedEvent
	for len(got) < n {
		select {
		case e := <-evs:
			got = append(got, e)
		case <-ctxFor(t).Done():
			t.Fatalf("received %d of %d events", len(got), n)
		}
	}
	return got
}

func wantCancelled(t *testing.T, done <-chan error, evs <-chan journal.QueriedEvent) {
	t.Helper()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("a cancelled Live query returned %v, want context.Canceled", err)
		}
	case <-ctxFor(t).Done():
		t.Fatal("a Live query did not end when its context did")
	}
	if len(evs) != 0 {
		t.Fatalf("%d events delivered beyond those written", len(evs))
	}
}

func testLiveFollows(t *testing.T, j QueryJournal, typ string) {
	before := qevents(typ+"|l1", 1, 3)
	write(t, j, before)
	evs, done, cancel := live(t, func(ctx context.Context, fn func(journal.QueriedEvent) error) error {
		return j.EventsBySlices(ctx, typ, journal.AllSlices, journal.Offset{}, journal.Live, fn)
	})
	got := receive(t, evs, 3)
	after1 := qevents(typ+"|l1", 4, 2)
	after2 := qevents(typ+"|l2", 1, 1)
	write(t, j, after1)
	write(t, j, after2)
	got = append(got, receive(t, evs, 3)...)
	wantStream(t, got, set(before, after1, after2))
	cancel()
	wantCancelled(t, done, evs)
}

func testLiveTagFollows(t *testing.T, j QueryJournal, typ string) {
	tag := typ + "-live"
	evs, done, cancel := live(t, func(ctx context.Context, fn func(journal.QueriedEvent) error) error {
		return j.EventsByTag(ctx, tag, journal.Offset{}, journal.Live, fn)
	})
	a := qevents(typ+"|a", 1, 2, tag)
	write(t, j, qevents(typ+"|b", 1, 1, typ+"-other"))
	write(t, j, a)
	wantStream(t, receive(t, evs, 2), set(a))
	cancel()
	wantCancelled(t, done, evs)
}

func testLiveConcurrent(t *testing.T, j QueryJournal, typ string) {
	const writers, each = 4, 25
	evs, done, cancel := live(t, func(ctx context.Context, fn func(journal.QueriedEvent) error) error {
		return j.EventsBySlices(ctx, typ, journal.AllSlices, journal.Offset{}, journal.Live, fn)
	})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var all []journal.Event
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for s := range each {
				e := qevents(fmt.Sprintf("%s|w%d", typ, w), uint64(s+1), 1)
				if err := j.Write(ctxFor(t), e); err != nil {
					t.Errorf("Write: %v", err)
					return
				}
				mu.Lock()
				all = append(all, e...)
				mu.Unlock()
			}
		}()
	}
	got := receive(t, evs, writers*each)
	wg.Wait()
	wantStream(t, got, set(all))
	cancel()
	wantCancelled(t, done, evs)
	wantStream(t, bySlices(t, j, typ, journal.AllSlices, journal.Offset{}), set(all))
}

func testQueryDeleted(t *testing.T, j QueryJournal, typ string) {
	evs := qevents(typ+"|d", 1, 5, typ+"-d")
	write(t, j, evs)
	if err := j.DeleteTo(ctxFor(t), typ+"|d", 3); err != nil {
		t.Fatal(err)
	}
	wantStream(t, bySlices(t, j, typ, journal.AllSlices, journal.Offset{}), set(evs[3:]))
	wantStream(t, byTag(t, j, typ+"-d", journal.Offset{}), set(evs[3:]))
}

func testOffsetMismatch(t *testing.T, j QueryJournal, typ string) {
	write(t, j, qevents(typ+"|o", 1, 1, typ))
	foreign := journal.Offset{Kind: "another-journal", Tx: 1, Pos: 1}
	never := func(journal.QueriedEvent) error { return errors.New("delivered") }
	if err := j.EventsBySlices(ctxFor(t), typ, journal.AllSlices, foreign, journal.Current, never); !errors.Is(err, journal.ErrOffsetMismatch) {
		t.Fatalf("EventsBySlices with %v = %v, want ErrOffsetMismatch", foreign, err)
	}
	if err := j.EventsByTag(ctxFor(t), typ, foreign, journal.Live, never); !errors.Is(err, journal.ErrOffsetMismatch) {
		t.Fatalf("EventsByTag with %v = %v, want ErrOffsetMismatch", foreign, err)
	}
}

func testInvalidRange(t *testing.T, j QueryJournal, typ string) {
	never := func(journal.QueriedEvent) error { return errors.New("delivered") }
	for _, r := range []journal.SliceRange{{Min: -1, Max: 5}, {Min: 0, Max: journal.NumberOfSlices}, {Min: 9, Max: 8}} {
		for _, mode := range []journal.Mode{journal.Current, journal.Live} {
			if err := j.EventsBySlices(ctxFor(t), typ, r, journal.Offset{}, mode, never); !errors.Is(err, journal.ErrInvalidQuery) {
				t.Fatalf("EventsBySlices over %v = %v, want ErrInvalidQuery", r, err)
			}
		}
	}
	if _, err := j.CurrentPersistenceIDs(ctxFor(t), typ, "", 0); !errors.Is(err, journal.ErrInvalidQuery) {
		t.Fatalf("CurrentPersistenceIDs with limit 0 = %v, want ErrInvalidQuery", err)
	}
}

func testQueryCallbackError(t *testing.T, j QueryJournal, typ string) {
	write(t, j, qevents(typ+"|f", 1, 10, typ))
	stop := errors.New("stop here")
	for _, mode := range []journal.Mode{journal.Current, journal.Live} {
		calls := 0
		fn := func(journal.QueriedEvent) error {
			calls++
			if calls == 3 {
				return stop
			}
			return nil
		}
		if err := j.EventsBySlices(ctxFor(t), typ, journal.AllSlices, journal.Offset{}, mode, fn); !errors.Is(err, stop) || calls != 3 {
			t.Fatalf("EventsBySlices (mode %d): %v after %d calls, want fn's error after 3", mode, err, calls)
		}
		calls = 0
		if err := j.EventsByTag(ctxFor(t), typ, journal.Offset{}, mode, fn); !errors.Is(err, stop) || calls != 3 {
			t.Fatalf("EventsByTag (mode %d): %v after %d calls, want fn's error after 3", mode, err, calls)
		}
	}
}

func testPersistenceIDs(t *testing.T, j QueryJournal, typ string) {
	var want []string
	for i := range 25 {
		pid := fmt.Sprintf("%s|id-%02d", typ, i)
		write(t, j, qevents(pid, 1, 1+i%2))
		want = append(want, pid)
	}
	write(t, j, qevents(typ+"x|id-00", 1, 1)) // another type, sorting among them
	write(t, j, qevents(typ+"|gone", 1, 1))
	if err := j.DeleteTo(ctxFor(t), typ+"|gone", 1); err != nil {
		t.Fatal(err)
	}
	var got []string
	after := ""
	for pages := 0; ; pages++ {
		page, err := j.CurrentPersistenceIDs(ctxFor(t), typ, after, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) > 10 {
			t.Fatalf("page of %d ids, limit 10", len(page))
		}
		if len(page) == 0 {
			if pages != 3 {
				t.Fatalf("%d pages of 10 for 25 ids", pages)
			}
			break
		}
		got = append(got, page...)
		after = page[len(page)-1]
	}
	if !slices.Equal(got, want) {
		t.Fatalf("CurrentPersistenceIDs = %v, want %v", got, want)
	}
}

func testCount(t *testing.T, j QueryJournal, typ string) {
	ctx := context.Background()
	count := func(r journal.SliceRange, after journal.Offset) int64 {
		t.Helper()
		n, err := j.CountEventsBySlices(ctx, typ, r, after)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := count(journal.AllSlices, journal.Offset{}); n != 0 {
		t.Fatalf("count of a type without events = %d, want 0", n)
	}
	for i := range 12 {
		write(t, j, qevents(fmt.Sprintf("%s|n%d", typ, i%4), uint64(i/4+1), 1))
	}
	write(t, j, qevents("Other"+typ+"|x", 1, 3)) // another type counts for nothing
	all := bySlices(t, j, typ, journal.AllSlices, journal.Offset{})
	for k, want := range map[int]int64{-1: 12, 0: 11, 5: 6, 11: 0} {
		after := journal.Offset{}
		if k >= 0 {
			after = all[k].Offset
		}
		if n := count(journal.AllSlices, after); n != want {
			t.Errorf("count after event %d = %d, want %d", k, n, want)
		}
	}
	half := journal.SliceRange{Min: 0, Max: journal.NumberOfSlices/2 - 1}
	var inHalf int64
	for _, e := range all {
		if half.Contains(e.Slice) {
			inHalf++
		}
	}
	if n := count(half, journal.Offset{}); n != inHalf {
		t.Errorf("count in %v = %d, want %d", half, n, inHalf)
	}
	if _, err := j.CountEventsBySlices(ctx, typ, journal.AllSlices, journal.Offset{Kind: "other", Pos: 1}); !errors.Is(err, journal.ErrOffsetMismatch) {
		t.Errorf("count after another kind's offset: %v, want ErrOffsetMismatch", err)
	}
	if _, err := j.CountEventsBySlices(ctx, typ, journal.SliceRange{Min: 5, Max: 1}, journal.Offset{}); !errors.Is(err, journal.ErrInvalidQuery) {
		t.Errorf("count over an invalid range: %v, want ErrInvalidQuery", err)
	}
}
