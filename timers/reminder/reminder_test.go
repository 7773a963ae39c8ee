package reminder_test

import (
	"errors"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/timers/reminder"
)

func TestNextDueFiresOnceForMissedTicks(t *testing.T) {
	due := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		now  time.Duration // after due
		want time.Duration
	}{
		{0, time.Minute},
		{30 * time.Second, time.Minute},
		{time.Minute, 2 * time.Minute}, // exactly on a tick: that tick counts as handled
		{3*time.Minute + time.Second, 4 * time.Minute},
		{-time.Hour, time.Minute}, // handled early: the next tick still follows due
	}
	for _, c := range cases {
		if got := reminder.NextDue(due, time.Minute, due.Add(c.now)); !got.Equal(due.Add(c.want)) {
			t.Errorf("NextDue at due+%v = due+%v, want due+%v", c.now, got.Sub(due), c.want)
		}
	}
}

type expire struct {
	reminder.Delivery
	ID string
}

func TestDeliveryOf(t *testing.T) {
	if _, ok := reminder.DeliveryOf(expire{ID: "x"}); ok {
		t.Fatal("a command with a zero Delivery reads as delivered by a reminder")
	}
	d := reminder.Delivery{Reminder: reminder.Key{EntityType: "T", EntityID: "1", Name: "n"}, Generation: 7}
	got, ok := reminder.DeliveryOf(expire{Delivery: d})
	if !ok || got != d {
		t.Fatalf("DeliveryOf = %+v %v, want %+v", got, ok, d)
	}
	if _, ok := reminder.DeliveryOf("plain"); ok {
		t.Fatal("a command without a Delivery reads as delivered")
	}
}

func TestValidate(t *testing.T) {
	k := reminder.Key{EntityType: "T", EntityID: "1", Name: "n"}
	ok := reminder.Change{Key: k, ShardID: "1", Manifest: "m", Generation: 1}
	if err := (reminder.Batch{Changes: []reminder.Change{ok}}).Validate(); err != nil {
		t.Fatal(err)
	}
	bad := []reminder.Batch{
		{Changes: []reminder.Change{{Key: reminder.Key{EntityType: "T", EntityID: "1"}, Cancel: true}}},
		{Changes: []reminder.Change{{Key: k, ShardID: "1", Manifest: "m"}}},
		{Changes: []reminder.Change{{Key: k, ShardID: "1", Generation: 1}}},
		{Changes: []reminder.Change{{Key: k, ShardID: "1", Manifest: "m", Generation: 1, After: -1}}},
		{Changes: []reminder.Change{{Key: k, ShardID: "1", Manifest: "m", Generation: 1, Period: time.Microsecond}}},
		{Acks: []reminder.Ack{{Key: k, Generation: 1}}},
	}
	for i, b := range bad {
		if err := b.Validate(); !errors.Is(err, reminder.ErrInvalid) {
			t.Errorf("batch %d: %v, want ErrInvalid", i, err)
		}
	}
}

func TestStamp(t *testing.T) {
	d := reminder.Delivery{Reminder: reminder.Key{EntityType: "T", EntityID: "1", Name: "n"}, Generation: 9}
	orig := expire{ID: "x"}
	got, ok := reminder.Stamp(orig, d)
	if !ok || got.(expire).Delivery != d || got.(expire).ID != "x" || !orig.IsZero() {
		t.Fatalf("Stamp(value) = %+v %v, want a stamped copy", got, ok)
	}
	p := &expire{ID: "y"}
	got, ok = reminder.Stamp(p, d)
	if !ok || got.(*expire).Delivery != d || !p.IsZero() {
		t.Fatalf("Stamp(pointer) = %+v %v, want a pointer to a stamped copy", got, ok)
	}
	type named struct{ D reminder.Delivery }
	for _, v := range []any{"plain", named{}, (*expire)(nil), 3} {
		if _, ok := reminder.Stamp(v, d); ok || reminder.CanCarry(v) {
			t.Errorf("%T: stamped, want refused (no embedded Delivery)", v)
		}
	}
	if !reminder.CanCarry(expire{}) || !reminder.CanCarry(&expire{}) {
		t.Error("CanCarry refuses a command that embeds a Delivery")
	}
}
