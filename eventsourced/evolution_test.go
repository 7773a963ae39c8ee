package eventsourced_test

// Schema evolution in recovery (docs/DESIGN.md, Schema evolution): a journal
// holding rows written by older versions of the list entity, under old
// manifests and in old shapes, recovers to the state today's code would
// have built, and the entity writes on after the last stored row.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/eventsourced"
	"github.com/shoal-dev/shoal/journal"
	"github.com/shoal-dev/shoal/journal/memory"
	"github.com/shoal-dev/shoal/snapshot"
	snapmemory "github.com/shoal-dev/shoal/snapshot/memory"
)

// The list entity's old event shapes, only ever read.
type (
	itemsAddedV1 struct{ Items []string } // one event for several items
	itemV1       struct{ Name string }    // the field was renamed
	itemV0       struct{ N string }       // older still: upcast to itemV1
	stateV1      struct{ Entries []string }
	stateSplit   struct{}
)

var errCorruptOldRow = errors.New("corrupt old row")

// evolvedRegistry reads every old form of the list entity's history.
func evolvedRegistry() *codec.Registry {
	r := newRegistry()
	codec.MustRegister[added](r, "added", codec.Aliases("list.ItemAdded"))
	codec.MustRegister[state](r, "state", codec.Aliases("list.State"))
	codec.MustUpcast(r, "list.ItemsAdded/v1", func(old itemsAddedV1) []any {
		out := make([]any, len(old.Items))
		for i, it := range old.Items {
			out[i] = added{Item: it}
		}
		return out
	})
	codec.MustUpcast(r, "list.Item/v1", func(old itemV1) []any { return []any{added{Item: old.Name}} })
	codec.MustUpcast(r, "list.Item/v0", func(old itemV0) []any { return []any{itemV1{Name: old.N}} })
	codec.MustRegisterUpcaster(r, "list.Viewed", func([]byte) ([]any, error) { return nil, nil })
	codec.MustRegisterUpcaster(r, "list.Broken", func([]byte) ([]any, error) { return nil, errCorruptOldRow })
	// A command is registered, but it is no event: upcasting to it is a bug.
	codec.MustRegisterUpcaster(r, "list.NotAnEvent", func([]byte) ([]any, error) { return []any{add{Item: "x"}}, nil })
	codec.MustUpcast(r, "list.State/v1", func(old stateV1) []any { return []any{state{Items: old.Entries}} })
	codec.MustUpcast(r, "list.State/split", func(stateSplit) []any { return []any{state{}, state{}} })
	return r
}

// row is a stored event as an older version of the entity wrote it.
type row struct{ manifest, payload string }

// writeRows writes rows for pid directly into j, with seq nrs 1, 2, ...
func writeRows(t *testing.T, j journal.Journal, pid string, rows ...row) {
	t.Helper()
	for i, r := range rows {
		ev := journal.Event{PersistenceID: pid, SeqNr: uint64(i + 1), Manifest: r.manifest, Payload: []byte(r.payload)}
		if err := j.Write(context.Background(), []journal.Event{ev}); err != nil {
			t.Fatal(err)
		}
	}
}

// oldHistory is one row of each kind; the last one is dropped, so the seq
// nr to write on comes from a row that yields no event.
var oldHistory = []row{
	{"list.ItemAdded", `{"Item":"a"}`},                // 1: renamed manifest
	{"list.ItemsAdded/v1", `{"Items":["b","c","d"]}`}, // 2: one to many
	{"list.Viewed", `{}`},                             // 3: dropped
	{"list.Item/v1", `{"Name":"e"}`},                  // 4: one to one
	{"list.Item/v0", `{"N":"f"}`},                     // 5: chain v0 -> v1 -> added
	{"added", `{"Item":"g"}`},                         // 6: today's form
	{"list.Viewed", `{}`},                             // 7: dropped
}

// traceEntity is the list entity whose state notes each applied event with
// the LastSeqNr it was applied at.
func traceEntity(rec *recorder, replayBatch int) func(entity.Context[cmd]) entity.Behavior[cmd] {
	return func(ec entity.Context[cmd]) entity.Behavior[cmd] {
		return eventsourced.New(eventsourced.Config[cmd, event, state]{
			PersistenceID: eventsourced.PersistenceIDOf(listKey, ec.EntityID()),
			OnCommand:     listCommand(rec),
			OnEvent: func(ctx eventsourced.Context[cmd], s state, e event) state {
				if a, ok := e.(added); ok {
					s.Items = append(slices.Clone(s.Items), fmt.Sprintf("%s@%d", a.Item, ctx.LastSeqNr()))
				}
				return s
			},
			OnSignal:    func(_ eventsourced.Context[cmd], _ state, sig eventsourced.Signal) { rec.signal(sig) },
			ReplayBatch: replayBatch,
		})
	}
}

func recoveredAt(rec *recorder) []uint64 {
	var at []uint64
	for _, s := range rec.signals() {
		if rc, ok := s.(eventsourced.RecoveryCompleted); ok {
			at = append(at, rc.SeqNr)
		}
	}
	return at
}

// Every kind of old row is applied as today's events, in order, each at its
// stored row's seq nr; the entity then writes at the next stored seq nr.
// Batch 0 recovers on the entity's goroutine (the memory journal reads
// without IO), 2 in pages on a reader, where a split row crosses a page.
func TestRecoveryReadsRenamedAndUpcastEvents(t *testing.T) {
	for _, batch := range []int{0, 2} {
		t.Run(fmt.Sprint("batch ", batch), func(t *testing.T) {
			j := memory.New()
			writeRows(t, j, "List|old", oldHistory...)
			rec := &recorder{}
			sys, _ := entity.NewSystem(entity.Config{Codec: evolvedRegistry(), Journal: j, Logger: quietLogger()})
			props := &entity.Props[cmd]{Key: listKey, Create: traceEntity(rec, batch)}
			cell := entity.Spawn(sys, props, "old")

			// LastSeqNr while applying is that of the event applied before:
			// the parts of row 2 after the first see 2, and row 4 sees the
			// dropped row 3.
			want := []string{"a@0", "b@1", "c@2", "d@2", "e@3", "f@4", "g@5"}
			if got := askItems(t, cell); !slices.Equal(got, want) {
				t.Fatalf("items after recovery %q, want %q", got, want)
			}
			if at := recoveredAt(rec); !slices.Equal(at, []uint64{7}) {
				t.Fatalf("RecoveryCompleted at %v, want [7]: the stored rows, not the events they became", at)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			n, err := entity.Ask(ctx, cell, func(r entity.ReplyTo[int]) cmd { return addAndReply{Item: "h", ReplyTo: r} })
			if err != nil || n != len(want)+1 {
				t.Fatalf("addAndReply after recovery = %d, %v", n, err)
			}
			var stored []journal.Event
			if err := j.Replay(ctx, "List|old", 1, 100, func(ev journal.Event) error { stored = append(stored, ev); return nil }); err != nil {
				t.Fatal(err)
			}
			if len(stored) != len(oldHistory)+1 {
				t.Fatalf("%d stored rows, want the %d old ones and one new", len(stored), len(oldHistory))
			}
			last := stored[len(stored)-1]
			if last.SeqNr != 8 || last.Manifest != "added" || string(last.Payload) != `{"Item":"h"}` {
				t.Fatalf("new row %d %q %s, want 8 under today's manifest", last.SeqNr, last.Manifest, last.Payload)
			}

			// And the history, old rows and new, recovers the same again.
			cell.StopNow()
			<-cell.Done()
			again := entity.Spawn(sys, props, "old")
			if got := askItems(t, again); !slices.Equal(got, append(want, "h@7")) {
				t.Fatalf("items after the second recovery %q", got)
			}
		})
	}
}

// A row that no upcaster can read fails the recovery naming it, like an
// unknown manifest: an upcaster's error, and a result that is no event.
func TestRecoveryFailsOnBadUpcast(t *testing.T) {
	cases := []struct {
		manifest string
		is       error
	}{
		{"list.Broken", errCorruptOldRow},
		{"list.NotAnEvent", codec.ErrTypeMismatch},
		{"list.Item/v1", nil}, // its payload does not decode as the old shape
	}
	for _, c := range cases {
		for _, batch := range []int{0, 1} {
			t.Run(fmt.Sprint(c.manifest, " batch ", batch), func(t *testing.T) {
				j := memory.New()
				writeRows(t, j, "List|bad", oldHistory[0], row{c.manifest, `{"Name":`}, oldHistory[1])
				sys, _ := entity.NewSystem(entity.Config{Codec: evolvedRegistry(), Journal: j, Logger: quietLogger()})
				cell := entity.Spawn(sys, &entity.Props[cmd]{Key: listKey, Create: listEntity(listOptions{replayBatch: batch})}, "bad")
				<-cell.Done()
				var rerr *eventsourced.RecoveryError
				if !errors.As(cell.Err(), &rerr) || rerr.SeqNr != 2 || !errors.Is(cell.Err(), eventsourced.ErrRecoveryFailed) {
					t.Fatalf("stop reason = %v, want a RecoveryError at seq 2", cell.Err())
				}
				if c.is != nil && !errors.Is(cell.Err(), c.is) {
					t.Fatalf("stop reason %v does not match %v", cell.Err(), c.is)
				}
				if c.is == nil && !errors.As(cell.Err(), new(*codec.UpcastError)) {
					t.Fatalf("stop reason %v is not an UpcastError", cell.Err())
				}
			})
		}
	}
}

// A snapshot stored under an old manifest, or in an old shape upcast one to
// one, restores the state; one upcast to several states fails the recovery.
func TestRecoveryReadsOldSnapshots(t *testing.T) {
	cases := []struct {
		manifest, payload string
		fails             error
	}{
		{"list.State", `{"Items":["a","b"]}`, nil},
		{"list.State/v1", `{"Entries":["a","b"]}`, nil},
		{"list.State/split", `{}`, codec.ErrNotOneValue},
	}
	for _, c := range cases {
		t.Run(c.manifest, func(t *testing.T) {
			j := memory.New()
			writeRows(t, j, "List|snap", oldHistory[0], oldHistory[0], row{"list.Item/v1", `{"Name":"c"}`})
			store := snapmemory.New()
			snap := snapshot.Snapshot{PersistenceID: "List|snap", SeqNr: 2, Timestamp: time.Now(), Manifest: c.manifest, Payload: []byte(c.payload)}
			if err := store.Save(context.Background(), snap); err != nil {
				t.Fatal(err)
			}
			rec := &recorder{}
			sys, _ := entity.NewSystem(entity.Config{Codec: evolvedRegistry(), Journal: j, Snapshots: store, Logger: quietLogger()})
			cell := entity.Spawn(sys, &entity.Props[cmd]{Key: listKey, Create: listEntity(listOptions{rec: rec})}, "snap")
			if c.fails != nil {
				<-cell.Done()
				if !errors.Is(cell.Err(), c.fails) || !errors.Is(cell.Err(), eventsourced.ErrRecoveryFailed) {
					t.Fatalf("stop reason = %v, want %v", cell.Err(), c.fails)
				}
				return
			}
			if got := askItems(t, cell); !slices.Equal(got, []string{"a", "b", "c"}) {
				t.Fatalf("items %q, want the snapshot's a, b and the event after it", got)
			}
			if at := recoveredAt(rec); !slices.Equal(at, []uint64{3}) {
				t.Fatalf("RecoveryCompleted at %v, want [3]", at)
			}
		})
	}
}
