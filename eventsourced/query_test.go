package eventsourced_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/eventsourced"
	"github.com/shoal-dev/shoal/journal"
	"github.com/shoal-dev/shoal/journal/memory"
)

type shopEvent interface{ isShopEvent() }

type (
	opened struct{ Name string }
	sold   struct{ Item string }
)

func (opened) isShopEvent() {}
func (sold) isShopEvent()   {}

func shopCodec() *codec.Registry {
	r := codec.NewRegistry()
	codec.MustRegister[opened](r, "shop.opened")
	codec.MustRegister[sold](r, "shop.sold")
	codec.MustRegister[added](r, "added")
	return r
}

func storeShopEvents(t *testing.T, j journal.Journal, reg *codec.Registry, pid string, evs ...any) {
	t.Helper()
	seq, err := j.HighestSeqNr(context.Background(), pid)
	if err != nil {
		t.Fatal(err)
	}
	var out []journal.Event
	for i, e := range evs {
		m, p, err := reg.Encode(e)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, journal.Event{PersistenceID: pid, SeqNr: seq + uint64(i) + 1, Manifest: m, Payload: p,
			Tags: []string{"shop"}, WriterID: "w", Timestamp: time.Unix(1700000000, 0)})
	}
	if err := j.Write(context.Background(), out); err != nil {
		t.Fatal(err)
	}
}

func TestTypedQueries(t *testing.T) {
	ctx := context.Background()
	j, reg := memory.New(), shopCodec()
	storeShopEvents(t, j, reg, "Shop|a", opened{"A"}, sold{"apple"})
	storeShopEvents(t, j, reg, "Shop|b", opened{"B"})
	storeShopEvents(t, j, reg, "Other|x", added{"not a shop event"})

	var got []eventsourced.Envelope[shopEvent]
	collect := func(e eventsourced.Envelope[shopEvent]) error {
		got = append(got, e)
		return nil
	}
	if err := eventsourced.EventsBySlices(ctx, j, reg, "Shop", journal.AllSlices, journal.Offset{}, journal.Current, collect); err != nil {
		t.Fatal(err)
	}
	want := []shopEvent{opened{"A"}, sold{"apple"}, opened{"B"}}
	if len(got) != len(want) {
		t.Fatalf("%d envelopes, want %d", len(got), len(want))
	}
	for i, e := range got {
		if e.Event != want[i] {
			t.Fatalf("envelope %d holds %#v, want %#v", i, e.Event, want[i])
		}
	}
	first := got[0]
	if first.PersistenceID != "Shop|a" || first.SeqNr != 1 || first.EntityType != "Shop" || first.Slice != journal.SliceOf("Shop|a") ||
		!first.Timestamp.Equal(time.Unix(1700000000, 0)) || len(first.Tags) != 1 || first.Tags[0] != "shop" || first.Offset.IsStart() {
		t.Fatalf("envelope %+v", first)
	}

	// Resuming from an envelope's offset, by tag this time.
	got = nil
	var tagged []eventsourced.Envelope[shopEvent]
	err := eventsourced.EventsByTag(ctx, j, reg, "shop", journal.Offset{}, journal.Current, func(e eventsourced.Envelope[shopEvent]) error {
		tagged = append(tagged, e)
		return nil
	})
	// Other|x is tagged "shop" too, and is no shopEvent: the query stops
	// there, naming it, after the three before it.
	var de *eventsourced.EventDecodeError
	if !errors.Is(err, codec.ErrTypeMismatch) || !errors.As(err, &de) || de.PersistenceID != "Other|x" || de.SeqNr != 1 {
		t.Fatalf("EventsByTag over a foreign event = %v, want a type mismatch naming Other|x seq 1", err)
	}
	if len(tagged) != 3 {
		t.Fatalf("%d envelopes before the foreign event, want 3", len(tagged))
	}
	if err := eventsourced.EventsBySlices(ctx, j, reg, "Shop", journal.AllSlices, tagged[0].Offset, journal.Current, collect); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Event != (sold{"apple"}) {
		t.Fatalf("resumed after the first event: %+v", got)
	}
}

func TestTypedQueryUnknownManifest(t *testing.T) {
	ctx := context.Background()
	j, reg := memory.New(), shopCodec()
	storeShopEvents(t, j, reg, "Shop|a", opened{"A"})
	if err := j.Write(ctx, []journal.Event{{PersistenceID: "Shop|a", SeqNr: 2, Manifest: "shop.fromTheFuture", Payload: []byte(`{}`)}}); err != nil {
		t.Fatal(err)
	}
	storeShopEvents(t, j, reg, "Shop|a", sold{"pear"})
	var got []shopEvent
	err := eventsourced.EventsBySlices(ctx, j, reg, "Shop", journal.AllSlices, journal.Offset{}, journal.Current, func(e eventsourced.Envelope[shopEvent]) error {
		got = append(got, e.Event)
		return nil
	})
	var de *eventsourced.EventDecodeError
	if !errors.Is(err, codec.ErrUnknownManifest) || !errors.As(err, &de) || de.PersistenceID != "Shop|a" || de.SeqNr != 2 || de.Manifest != "shop.fromTheFuture" {
		t.Fatalf("query over an unknown manifest = %v, want codec.ErrUnknownManifest naming Shop|a seq 2", err)
	}
	if len(got) != 1 {
		t.Fatalf("delivered %v before the undecodable event, want the one before it", got)
	}
	// fn's own error comes back as is.
	stop := errors.New("stop")
	err = eventsourced.EventsBySlices(ctx, j, reg, "Shop", journal.AllSlices, journal.Offset{}, journal.Live, func(eventsourced.Envelope[shopEvent]) error { return stop })
	if err != stop {
		t.Fatalf("fn's error came back as %v", err)
	}
}

// An old event an upcaster splits reaches a query as one envelope per new
// event, in order, all with the stored event's seq nr and offset; a renamed
// manifest decodes through its alias.
func TestTypedQueryUpcastsOldEvents(t *testing.T) {
	ctx := context.Background()
	j := memory.New()
	reg := codec.NewRegistry()
	codec.MustRegister[opened](reg, "shop.opened", codec.Aliases("shop.created/v0"))
	codec.MustRegister[sold](reg, "shop.sold")
	type soldTwo struct{ Items [2]string } // the shape of an old event, never written again
	codec.MustUpcast(reg, "shop.soldTwo/v1", func(o soldTwo) []any { return []any{sold{o.Items[0]}, sold{o.Items[1]}} })
	old := []journal.Event{
		{PersistenceID: "Shop|a", SeqNr: 1, Manifest: "shop.created/v0", Payload: []byte(`{"Name":"A"}`), Timestamp: time.Unix(1700000000, 0)},
		{PersistenceID: "Shop|a", SeqNr: 2, Manifest: "shop.soldTwo/v1", Payload: []byte(`{"Items":["apple","pear"]}`), Timestamp: time.Unix(1700000001, 0)},
	}
	if err := j.Write(ctx, old); err != nil {
		t.Fatal(err)
	}
	storeShopEvents(t, j, reg, "Shop|a", sold{"plum"})
	var got []eventsourced.Envelope[shopEvent]
	err := eventsourced.EventsBySlices(ctx, j, reg, "Shop", journal.AllSlices, journal.Offset{}, journal.Current, func(e eventsourced.Envelope[shopEvent]) error {
		got = append(got, e)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		ev  shopEvent
		seq uint64
	}{{opened{"A"}, 1}, {sold{"apple"}, 2}, {sold{"pear"}, 2}, {sold{"plum"}, 3}}
	if len(got) != len(want) {
		t.Fatalf("got %d envelopes %+v, want %d", len(got), got, len(want))
	}
	for i, w := range want {
		if got[i].Event != w.ev || got[i].SeqNr != w.seq {
			t.Errorf("envelope %d = %+v seq %d, want %+v seq %d", i, got[i].Event, got[i].SeqNr, w.ev, w.seq)
		}
	}
	if got[1].Offset != got[2].Offset || got[2].Offset == got[3].Offset {
		t.Errorf("offsets %v %v %v: the split parts share the stored event's, the next has its own", got[1].Offset, got[2].Offset, got[3].Offset)
	}
}
