package memory_test

import (
	"context"
	"runtime"
	"strconv"
	"testing"

	"github.com/shoal-dev/shoal/journal"
	"github.com/shoal-dev/shoal/journal/journaltest"
	"github.com/shoal-dev/shoal/journal/memory"
)

func TestConformance(t *testing.T) {
	journaltest.Run(t, func(t *testing.T) journal.Journal { return memory.New() })
}

// A persistence id costs memory in proportion to its events: the journal
// holds many short logs (one per entity), so a chunk allocated whole would
// cost each of them tens of kilobytes.
func TestMemoryPerPersistenceIDGrowsWithItsLog(t *testing.T) {
	const ids, eventsPerID, limit = 2000, 3, 4 << 10
	j := memory.New()
	payload := make([]byte, 100)
	before := heapInUse()
	for i := range ids {
		pid := "order-" + strconv.Itoa(i)
		for seq := uint64(1); seq <= eventsPerID; seq++ {
			err := j.Write(context.Background(), []journal.Event{{PersistenceID: pid, SeqNr: seq, Manifest: "m", Payload: payload}})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	perID := (heapInUse() - before) / ids
	runtime.KeepAlive(j)
	t.Logf("%d bytes per persistence id", perID)
	if perID > limit {
		t.Fatalf("%d bytes per persistence id holding %d events, want at most %d", perID, eventsPerID, limit)
	}
}

func heapInUse() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

func TestQueriesConformance(t *testing.T) {
	journaltest.RunQueries(t, func(t *testing.T) journaltest.QueryJournal { return memory.New() })
}

// Deleted events leave the queries' index once they are most of it; the
// queries deliver what is left, in order, before and after.
func TestQueriesAfterCompaction(t *testing.T) {
	ctx := context.Background()
	j := memory.New()
	for i := range 40 {
		pid := "C|" + strconv.Itoa(i)
		for seq := uint64(1); seq <= 100; seq++ {
			if err := j.Write(ctx, []journal.Event{{PersistenceID: pid, SeqNr: seq, Manifest: "m"}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i := range 40 {
		if err := j.DeleteTo(ctx, "C|"+strconv.Itoa(i), 90); err != nil {
			t.Fatal(err)
		}
	}
	var got []journal.QueriedEvent
	if err := j.EventsBySlices(ctx, "C", journal.AllSlices, journal.Offset{}, journal.Current, func(e journal.QueriedEvent) error {
		got = append(got, e)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != 400 {
		t.Fatalf("%d events after deleting 90 of each 100, want 400", len(got))
	}
	for i, e := range got {
		if e.SeqNr <= 90 || (i > 0 && !got[i-1].Offset.Less(e.Offset)) {
			t.Fatalf("event %d: %s seq %d at %v", i, e.PersistenceID, e.SeqNr, e.Offset)
		}
	}
}
