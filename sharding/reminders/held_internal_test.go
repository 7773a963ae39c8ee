package reminders

import (
	"fmt"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/timers/reminder"
)

func TestHeldSetOrdersByNextAttention(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := func(id string, due time.Duration, gen uint64) reminder.Reminder {
		return reminder.Reminder{Key: reminder.Key{EntityType: "T", EntityID: id, Name: "n"}, ShardID: "s" + id, Due: t0.Add(due), Generation: gen}
	}
	s := newHeldSet()
	s.put(r("c", 3*time.Second, 1))
	s.put(r("a", time.Second, 1))
	s.put(r("b", 2*time.Second, 1))
	order := func() string {
		var out []string
		c := &heldSet{byKey: map[reminder.Key]*held{}}
		for _, h := range s.byKey {
			c.put(h.r)
			c.schedule(c.byKey[h.r.Key], h.at)
		}
		for h := c.next(); h != nil; h = c.next() {
			out = append(out, h.r.EntityID)
			c.remove(h.r.Key)
		}
		return fmt.Sprint(out)
	}
	if got := order(); got != "[a b c]" {
		t.Fatalf("order %s, want by due time", got)
	}
	// Delivered: a is next attended to at its redelivery time.
	a, _ := s.get(reminder.Key{EntityType: "T", EntityID: "a", Name: "n"})
	a.sent = true
	s.schedule(a, t0.Add(10*time.Second))
	if got := order(); got != "[b c a]" {
		t.Fatalf("order %s after a's delivery, want a last", got)
	}
	// Put again (a new generation): due at its own time, not sent.
	s.put(r("a", 0, 2))
	if a, _ := s.get(reminder.Key{EntityType: "T", EntityID: "a", Name: "n"}); a.sent || s.next() != a {
		t.Fatal("a reminder put again is not due first and unsent")
	}
	s.removeIf(func(h *held) bool { return h.r.ShardID == "sb" })
	if got := order(); got != "[a c]" || s.len() != 2 {
		t.Fatalf("order %s after dropping b's shard", got)
	}
	s.clear()
	if s.next() != nil || s.len() != 0 {
		t.Fatal("cleared set holds something")
	}
}
