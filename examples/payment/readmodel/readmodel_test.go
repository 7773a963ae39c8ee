package readmodel

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/journal"
	"github.com/shoal-dev/shoal/projection"
)

var t0 = time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)

func ev(key Key, seq uint64, manifest string, payload string) Event {
	vs, err := Decode(manifest, []byte(payload))
	if err != nil {
		panic(err)
	}
	return Event{Key: key, SeqNr: seq, Timestamp: t0.Add(time.Duration(seq) * time.Second), Change: vs[0].(Change)}
}

func TestApplyFollowsThePaymentsStates(t *testing.T) {
	k := Key{ShopKey{"example", 0, "shop-1"}, "o1"}
	steps := []struct {
		manifest, payload string
		want              State
	}{
		{"payment.SettlementAccepted", `{"Request":{"Amount":1200}}`, Settling},
		{"payment.SettlementSuccessConfirmed", `{}`, Settled},
		{"payment.CancelAccepted", `{}`, Canceling},
		{"payment.CancelFailureConfirmed", `{}`, Settled},
		{"payment.CancelAccepted", `{}`, Canceling},
		{"payment.CancelSuccessConfirmed", `{}`, Canceled},
	}
	var s Settlement
	for i, st := range steps {
		var err error
		s, err = Apply(s, ev(k, uint64(i+1), st.manifest, st.payload))
		if err != nil {
			t.Fatal(err)
		}
		if s.State != st.want || s.Amount != 1200 || s.SeqNr != uint64(i+1) || !s.UpdatedAt.Equal(t0.Add(time.Duration(i+1)*time.Second)) {
			t.Fatalf("after %s: %+v, want state %s amount 1200 seq %d", st.manifest, s, st.want, i+1)
		}
	}
	if _, err := Apply(s, ev(k, 3, "payment.CancelAccepted", `{}`)); !errors.Is(err, ErrDuplicate) {
		t.Fatalf("old event: %v, want ErrDuplicate", err)
	}
	if _, err := Apply(s, ev(k, 8, "payment.CancelAccepted", `{}`)); !errors.Is(err, ErrGap) {
		t.Fatalf("event past the next: %v, want ErrGap", err)
	}
}

func TestDecodeRefusesWhatIsNotAPaymentEvent(t *testing.T) {
	if _, err := Decode("payment.Settle", []byte(`{}`)); !errors.Is(err, ErrUnknownEvent) {
		t.Fatalf("a command's manifest: %v", err)
	}
	if _, err := Decode("payment.SettlementAccepted", []byte(`{"Request":{"Amount":0}}`)); err == nil {
		t.Fatal("an accepted settlement without amount was decoded")
	}
	if _, err := Decode("payment.SettlementAccepted", []byte(`{`)); err == nil {
		t.Fatal("a malformed payload was decoded")
	}
}

func TestParsePersistenceID(t *testing.T) {
	k, err := ParsePersistenceID("ec-house-money|example:7:shop%3A1:o1")
	if err != nil {
		t.Fatal(err)
	}
	if want := (Key{ShopKey{"example", 7, "shop:1"}, "o1"}); k != want {
		t.Fatalf("%+v, want %+v", k, want)
	}
	for _, bad := range []string{"counter|a:0:b:c", "ec-house-money|a:b:c", "ec-house-money|a:x:b:c", "ec-house-money|a:0:%zz:c"} {
		if _, err := ParsePersistenceID(bad); !errors.Is(err, ErrNotAPayment) {
			t.Errorf("%q: %v, want ErrNotAPayment", bad, err)
		}
	}
}

func TestMemorySkipsDuplicatesAndKeepsTotals(t *testing.T) {
	ctx := context.Background()
	m := NewMemory()
	pid := func(order string) string { return "ec-house-money|example:0:shop-1:" + order }
	env := func(order string, seq uint64, manifest, payload string) projection.Envelope[Change] {
		vs, err := Decode(manifest, []byte(payload))
		if err != nil {
			t.Fatal(err)
		}
		return projection.Envelope[Change]{Event: vs[0].(Change), PersistenceID: pid(order), SeqNr: seq, Timestamp: t0}
	}
	envs := []projection.Envelope[Change]{
		env("a", 1, "payment.SettlementAccepted", `{"Request":{"Amount":100}}`),
		env("a", 2, "payment.SettlementSuccessConfirmed", `{}`),
		env("b", 1, "payment.SettlementAccepted", `{"Request":{"Amount":40}}`),
		env("a", 3, "payment.CancelAccepted", `{}`),
		env("b", 2, "payment.SettlementTimeoutDetected", `{}`),
		env("a", 4, "payment.CancelSuccessConfirmed", `{}`),
		env("c", 1, "payment.SettlementAccepted", `{"Request":{"Amount":7}}`),
		env("c", 2, "payment.SettlementSuccessConfirmed", `{}`),
	}
	// At-least-once: the tail again, as after a restart before a save.
	for _, e := range append(envs, envs[2:]...) {
		if err := m.Handle(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	shop, err := m.Shop(ctx, ShopKey{"example", 0, "shop-1"})
	if err != nil {
		t.Fatal(err)
	}
	want := Totals{Canceled: Total{1, 100}, Failed: Total{1, 40}, Settled: Total{1, 7}}
	if shop.Totals != want {
		t.Fatalf("totals %+v, want %+v", shop.Totals, want)
	}
	var states []State
	for _, s := range shop.Settlements {
		states = append(states, s.State)
	}
	if len(states) != 3 || states[0] != Canceled || states[1] != Failed || states[2] != Settled {
		t.Fatalf("states by order id %v", states)
	}
	all, totals, _ := m.All(ctx)
	events := make([]Event, 0, len(envs))
	for _, e := range envs {
		x, err := EventOf(e)
		if err != nil {
			t.Fatal(err)
		}
		events = append(events, x)
	}
	folded, err := Fold(events)
	if err != nil {
		t.Fatal(err)
	}
	if len(folded) != len(all) {
		t.Fatalf("memory holds %d settlements, the fold %d", len(all), len(folded))
	}
	for k, s := range folded {
		if all[k] != s {
			t.Fatalf("%s: memory %+v, fold %+v", k, all[k], s)
		}
	}
	if got := TotalsOf(folded)[ShopKey{"example", 0, "shop-1"}]; got != totals[ShopKey{"example", 0, "shop-1"}] {
		t.Fatalf("totals of the fold %+v, kept %+v", got, totals)
	}
}

// A rebuild of one instance clears its slices only.
func TestMemoryClearForgetsOneRangeOfSlices(t *testing.T) {
	ctx := context.Background()
	m := NewMemory()
	var pids []string
	for i := 0; len(pids) < 40; i++ {
		pid := "ec-house-money|example:0:shop-1:o" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		pids = append(pids, pid)
		c := Change{To: Settling, Amount: 10}
		if err := m.Handle(ctx, projection.Envelope[Change]{Event: c, PersistenceID: pid, SeqNr: 1, Timestamp: t0}); err != nil {
			t.Fatal(err)
		}
	}
	low := journal.SliceRange{Min: 0, Max: 511}
	if err := m.Clear(low)(ctx); err != nil {
		t.Fatal(err)
	}
	all, totals, _ := m.All(ctx)
	kept := 0
	for _, pid := range pids {
		_, ok := all[mustKey(t, pid)]
		if ok == low.Contains(journal.SliceOf(pid)) {
			t.Fatalf("%s (slice %d): kept %v after clearing %v", pid, journal.SliceOf(pid), ok, low)
		}
		if ok {
			kept++
		}
	}
	if kept == 0 || kept == len(pids) {
		t.Fatalf("kept %d of %d: the test's ids do not spread over both halves", kept, len(pids))
	}
	if got := totals[ShopKey{"example", 0, "shop-1"}].Settling; got != (Total{int64(kept), int64(10 * kept)}) {
		t.Fatalf("totals %+v after the clear, want %d settling", got, kept)
	}
}

func mustKey(t *testing.T, pid string) Key {
	k, err := ParsePersistenceID(pid)
	if err != nil {
		t.Fatal(err)
	}
	return k
}
