package postgres_test

import (
	"context"
	"testing"

	"github.com/shoal-dev/shoal/journal"
)

// Every insert path (a lone one-row INSERT, a group-commit batch, and a
// batch retried in a transaction after a conflict) stores each row's entity
// type and slice, so the queries find it.
func TestEveryInsertPathStoresTypeAndSlice(t *testing.T) {
	j, setup := batchJournal(t, 2+2+1)
	mustWrite(t, setup, evs("Lone|a", 1, 1, "lone")) // one event, idle journal: the one-row INSERT
	mustWrite(t, setup, evs("Multi|b", 1, 3, "multi"))
	mustWrite(t, setup, evs("Taken|c", 1, 1, "old"))
	before := j.Stats()
	errs := writeOneBatch(t, j, [][]journal.Event{
		evs("Retried|d", 1, 2, "new"),
		evs("Taken|c", 1, 2, "new"), // conflicts: the batch goes through the retry transaction
		evs("plain-e", 1, 1, "new"),
	})
	if j.Stats().ConflictBatches == before.ConflictBatches || errs[0] != nil || errs[1] == nil || errs[2] != nil {
		t.Fatalf("conflict path not taken as planned: %v", errs)
	}
	want := map[string]int{"Lone|a": 1, "Multi|b": 3, "Taken|c": 1, "Retried|d": 2, "plain-e": 1}
	for pid, n := range want {
		typ := journal.EntityTypeOf(pid)
		var got []journal.QueriedEvent
		if err := j.EventsBySlices(context.Background(), typ, journal.SliceRange{Min: journal.SliceOf(pid), Max: journal.SliceOf(pid)},
			journal.Offset{}, journal.Current, func(e journal.QueriedEvent) error {
				if e.PersistenceID == pid {
					got = append(got, e)
				}
				return nil
			}); err != nil {
			t.Fatal(err)
		}
		if len(got) != n {
			t.Fatalf("%s: the query by its type %q and slice %d found %d events, want %d", pid, typ, journal.SliceOf(pid), len(got), n)
		}
		for _, e := range got {
			if e.EntityType != typ || e.Slice != journal.SliceOf(pid) || e.Offset.Tx == 0 {
				t.Fatalf("%s seq %d stored with type %q slice %d tx %d", pid, e.SeqNr, e.EntityType, e.Slice, e.Offset.Tx)
			}
		}
	}
}
