package reminders

import (
	"container/heap"
	"time"

	"github.com/shoal-dev/shoal/timers/reminder"
)

// heldSet is what a Firer holds: the reminders due within its window, by
// key, and ordered by when each needs attention next (its due time, or,
// once delivered, when it is to be delivered again), so that firing looks
// only at what is due.
type heldSet struct {
	byKey map[reminder.Key]*held
	q     heldQueue
}

type held struct {
	r reminder.Reminder
	// sent is set once this generation was delivered; at is then when it
	// is delivered again unless acknowledged, else its due time (both on
	// the database's clock).
	sent  bool
	at    time.Time
	index int
}

func newHeldSet() *heldSet { return &heldSet{byKey: map[reminder.Key]*held{}} }

func (s *heldSet) len() int { return len(s.byKey) }

func (s *heldSet) get(k reminder.Key) (*held, bool) {
	h, ok := s.byKey[k]
	return h, ok
}

// put holds r, not yet delivered, replacing what was held for its key.
func (s *heldSet) put(r reminder.Reminder) {
	if h, ok := s.byKey[r.Key]; ok {
		h.r, h.sent = r, false
		s.schedule(h, r.Due)
		return
	}
	h := &held{r: r, at: r.Due}
	s.byKey[r.Key] = h
	heap.Push(&s.q, h)
}

// schedule moves h to at.
func (s *heldSet) schedule(h *held, at time.Time) {
	h.at = at
	heap.Fix(&s.q, h.index)
}

func (s *heldSet) remove(k reminder.Key) {
	if h, ok := s.byKey[k]; ok {
		delete(s.byKey, k)
		heap.Remove(&s.q, h.index)
	}
}

// removeIf drops every reminder drop selects.
func (s *heldSet) removeIf(drop func(*held) bool) {
	for k, h := range s.byKey {
		if drop(h) {
			s.remove(k)
		}
	}
}

func (s *heldSet) clear() {
	clear(s.byKey)
	s.q = s.q[:0]
}

// next is the reminder that needs attention first; nil when none is held.
func (s *heldSet) next() *held {
	if len(s.q) == 0 {
		return nil
	}
	return s.q[0]
}

type heldQueue []*held

func (q heldQueue) Len() int           { return len(q) }
func (q heldQueue) Less(i, j int) bool { return q[i].at.Before(q[j].at) }
func (q heldQueue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index, q[j].index = i, j
}
func (q *heldQueue) Push(x any) {
	h := x.(*held)
	h.index = len(*q)
	*q = append(*q, h)
}
func (q *heldQueue) Pop() any {
	old := *q
	h := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	return h
}
