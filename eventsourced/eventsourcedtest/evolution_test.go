package eventsourcedtest_test

import (
	"context"
	"reflect"
	"testing"

	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/eventsourced/eventsourcedtest"
	"github.com/shoal-dev/shoal/journal"
)

// pairV1 is an old event that stood for two values set in turn.
type pairV1 struct{ First, Then string }

// Rows written to the kit's journal directly in old forms (docs/DESIGN.md,
// Schema evolution) are recovered, and reported, as the events they stand
// for today; the entity writes on after the last stored row.
func TestKitReadsOldRowsAsTodaysEvents(t *testing.T) {
	r := registry()
	codec.MustRegister[was](r, "was", codec.Aliases("reg.Was"))
	codec.MustUpcast(r, "reg.Pair/v1", func(old pairV1) []any { return []any{was{V: old.First}, was{V: old.Then}} })
	codec.MustRegisterUpcaster(r, "reg.Noise", func([]byte) ([]any, error) { return nil, nil })
	kit := eventsourcedtest.New[command, event, state](t, key, create, eventsourcedtest.Options{Codec: r})

	const pid = "Reg|test-entity"
	rows := []journal.Event{
		{PersistenceID: pid, SeqNr: 1, Manifest: "reg.Was", Payload: []byte(`{"V":"a"}`)},
		{PersistenceID: pid, SeqNr: 2, Manifest: "reg.Pair/v1", Payload: []byte(`{"First":"b","Then":"c"}`)},
		{PersistenceID: pid, SeqNr: 3, Manifest: "reg.Noise", Payload: []byte(`{}`)},
	}
	for _, row := range rows {
		if err := kit.Journal().Write(context.Background(), []journal.Event{row}); err != nil {
			t.Fatal(err)
		}
	}
	kit.Restart()
	if s := kit.State(); s.V != "c" {
		t.Fatalf("recovered %+v, want the last value of the split row", s)
	}

	res := kit.RunCommand(set{V: "d"})
	if !reflect.DeepEqual(res.Events, []event{was{V: "d"}}) || res.State.V != "d" {
		t.Fatalf("result %+v", res)
	}
	want := []eventsourcedtest.Persisted[event]{
		{Events: []event{was{V: "a"}}},
		{Events: []event{was{V: "b"}, was{V: "c"}}},
		{}, // the dropped row: a write of no event
	}
	if !reflect.DeepEqual(res.Others, want) {
		t.Fatalf("Others %+v, want the old rows as today's events %+v", res.Others, want)
	}
	written := kit.Journal().Written()
	if last := written[len(written)-1]; last.SeqNr != 4 || last.Manifest != "was" {
		t.Fatalf("new row %d %q, want seq 4 under today's manifest", last.SeqNr, last.Manifest)
	}
}
