package sharding

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"time"

	"github.com/shoal-dev/shoal/internal/deepequal"
	"github.com/shoal-dev/shoal/sharding/internal/protocol"
)

// The simulator's world: one virtual clock, one event queue, one PRNG and
// a network model. Everything in a simulation happens as an event popped
// from the queue in (time, sequence) order; nothing runs on a goroutine,
// reads the wall clock, or iterates a map where the order could matter.
// See sim_test.go for the nodes, workload and invariants.

// simEvent is one thing that happens at a virtual time.
type simEvent struct {
	at  time.Duration // since the start of the run
	seq uint64        // ties broken by scheduling order
	fn  func()
}

type simQueue []*simEvent

func (q simQueue) Len() int { return len(q) }
func (q simQueue) Less(i, j int) bool {
	return q[i].at < q[j].at || q[i].at == q[j].at && q[i].seq < q[j].seq
}
func (q simQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *simQueue) Push(x any)   { *q = append(*q, x.(*simEvent)) }
func (q *simQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	return e
}

// simClock is the virtual clock and the event queue around it.
type simClock struct {
	now   time.Duration
	queue simQueue
	seq   uint64
	steps int // events run so far
}

// at schedules fn after d (at least now).
func (c *simClock) after(d time.Duration, fn func()) {
	c.seq++
	heap.Push(&c.queue, &simEvent{at: c.now + max(d, 0), seq: c.seq, fn: fn})
}

// runUntil runs events up to and including time end; stop ends early.
func (c *simClock) runUntil(end time.Duration, stop func() bool) {
	for len(c.queue) > 0 && !stop() {
		if c.queue[0].at > end {
			break
		}
		e := heap.Pop(&c.queue).(*simEvent)
		c.now = e.at
		c.steps++
		e.fn()
	}
	if !stop() && c.now < end {
		c.now = end
	}
}

// simBase is the wall-clock instant virtual time 0 stands for.
var simBase = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// simClone deep-copies a protocol message, so that sender and receiver
// share no memory (as if it had crossed a wire), and panics on what no
// wire could carry: an unexported field, a pointer, a function, a channel.
func simClone(m Message) Message {
	v := reflect.ValueOf(m)
	out := cloneValue(v).Interface().(Message)
	if !deepequal.Equal(m, out) {
		panic(fmt.Sprintf("sim: %T does not survive a copy", m))
	}
	return out
}

func cloneValue(v reflect.Value) reflect.Value {
	switch v.Kind() {
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64, reflect.String:
		return v
	case reflect.Struct:
		out := reflect.New(v.Type()).Elem()
		for i := range v.NumField() {
			if !v.Type().Field(i).IsExported() {
				panic(fmt.Sprintf("sim: %s has unexported field %s: it cannot cross a wire", v.Type(), v.Type().Field(i).Name))
			}
			out.Field(i).Set(cloneValue(v.Field(i)))
		}
		return out
	case reflect.Slice:
		if v.IsNil() {
			return reflect.Zero(v.Type())
		}
		out := reflect.MakeSlice(v.Type(), v.Len(), v.Len())
		for i := range v.Len() {
			out.Index(i).Set(cloneValue(v.Index(i)))
		}
		return out
	case reflect.Map:
		if v.IsNil() {
			return reflect.Zero(v.Type())
		}
		out := reflect.MakeMapWithSize(v.Type(), v.Len())
		iter := v.MapRange()
		for iter.Next() {
			out.SetMapIndex(cloneValue(iter.Key()), cloneValue(iter.Value()))
		}
		return out
	case reflect.Interface:
		if v.IsNil() {
			return reflect.Zero(v.Type())
		}
		out := reflect.New(v.Type()).Elem()
		out.Set(cloneValue(v.Elem()))
		return out
	}
	panic(fmt.Sprintf("sim: a %s (%s) cannot cross a wire", v.Kind(), v.Type()))
}

// simCmds finds the entity messages v carries, however deep, without
// following pointers.
func simCmds(v reflect.Value, found func(simCmd)) {
	switch v.Kind() {
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[simCmd]() {
			found(simCmd{Sender: v.Field(0).String(), Seq: int(v.Field(1).Int())})
			return
		}
		for i := range v.NumField() {
			simCmds(v.Field(i), found)
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			simCmds(v.Index(i), found)
		}
	case reflect.Map:
		iter := v.MapRange()
		for iter.Next() {
			simCmds(iter.Value(), found)
		}
	case reflect.Interface:
		if !v.IsNil() {
			simCmds(v.Elem(), found)
		}
	}
}

// simLink is one direction of a node pair: per-link FIFO is all the
// network promises.
type simLink struct{ from, to string }

// simNet carries messages between nodes: per-link FIFO with a random
// delay per message, no order across links; a link break loses what is in
// flight on it; a partition loses everything across it.
type simNet struct {
	w    *simWorld
	last map[simLink]time.Duration // latest arrival scheduled on the link
	gen  map[simLink]uint64        // bumped by a break: older messages are lost
	cut  map[simLink]bool          // partitioned
	// hold delays, until its redial, what a link carries (a break the
	// transport's queue survives): nothing on it arrives before.
	hold map[simLink]time.Duration
	held map[simLink][]func() // reached their end while it was held, in order
	slow map[simLink]simSlow  // slow for a while (faultSlow)
	// slowAll: every link is slow until the heal, each message taking up
	// to this much more (faultSlow).
	slowAll time.Duration
	// slowUntil is when the last slow link (or held one) of the run is
	// over, as far as it is known yet.
	slowUntil time.Duration
	// maxDelay bounds a message's random flight time; with 0 every message
	// takes fixedDelay, so messages arrive in the one global order they
	// were sent in (the in-process transport's).
	maxDelay, fixedDelay time.Duration
	// duplicate, a sabotage for the self-tests, delivers every Deliver twice.
	duplicate bool
}

const simMinDelay = time.Millisecond

// simSlow is a link slow until a time, each message taking up to worst.
type simSlow struct{ until, worst time.Duration }

// delay is one message's flight time on link l.
func (n *simNet) delay(l simLink) time.Duration {
	if l.from == l.to {
		return 0 // in-process: the node's own mailbox
	}
	d := n.fixedDelay
	if n.maxDelay > 0 {
		d = simMinDelay + time.Duration(n.w.rng.Int64N(int64(n.maxDelay)))
	}
	if n.slowAll > 0 && n.w.clock.now < n.w.healAt {
		d += n.w.rng.between(0, n.slowAll)
	}
	if s, ok := n.slow[l]; ok && n.w.clock.now < s.until {
		d += n.w.rng.between(0, s.worst)
	}
	return d
}

// holdLink delays what is on its way between a and b, both ways, until
// at: it arrives then, in order, and what is sent meanwhile after it.
func (n *simNet) holdLink(a, b string, at time.Duration) {
	n.slowUntil = max(n.slowUntil, at)
	for _, l := range []simLink{{a, b}, {b, a}} {
		n.hold[l] = max(n.hold[l], at)
		n.last[l] = max(n.last[l], n.hold[l]+simMinDelay)
	}
}

// send puts msg on the link from → to, for to's region or coordinator.
func (n *simNet) send(from, to string, coordinator bool, msg Message) {
	l := simLink{from, to}
	if n.cut[l] {
		n.w.tracef("%s -> %s%s lost (partition): %s", from, to, coordSuffix(coordinator), simShow(msg))
		n.w.lostToFault(msg)
		return
	}
	msg = simClone(msg)
	at := max(n.w.clock.now+n.delay(l), n.last[l])
	n.last[l] = at
	gen := n.gen[l]
	copies := 1
	if _, ok := msg.(protocol.Deliver); ok && n.duplicate {
		copies = 2
	}
	if _, ok := msg.(protocol.Deliver); !ok && l.from != l.to && n.w.cfg.faults[faultDups] && n.w.rng.chance(0.05) {
		copies = 2 // right behind the first: per-link order holds
	}
	for range copies {
		land := func() {
			if n.gen[l] != gen {
				n.w.tracef("%s -> %s%s lost (link broke): %s", from, to, coordSuffix(coordinator), simShow(msg))
				n.w.lostToFault(msg)
				return
			}
			n.w.arrive(from, to, coordinator, msg)
		}
		n.w.clock.after(at-n.w.clock.now, func() {
			if n.w.clock.now < n.hold[l] || len(n.held[l]) > 0 {
				n.wait(l, land) // the link is being redialled
				return
			}
			land()
		})
	}
}

// wait queues what reached a held link's end, in order, until the redial
// (the hold may grow meanwhile).
func (n *simNet) wait(l simLink, land func()) {
	n.held[l] = append(n.held[l], land)
	if len(n.held[l]) > 1 {
		return // a flush is due
	}
	var flush func()
	flush = func() {
		if hold := n.hold[l]; n.w.clock.now < hold {
			n.w.clock.after(hold-n.w.clock.now, flush)
			return
		}
		queued := n.held[l]
		delete(n.held, l)
		for _, f := range queued {
			f()
		}
	}
	n.w.clock.after(n.hold[l]-n.w.clock.now, flush)
}

// reachable is what the transport's Send finds out at once: a node that
// left or died refuses the connection.
func (w *simWorld) reachable(node string) bool {
	n := w.nodes[node]
	return n != nil && n.state != nodeGone
}

// breakLink loses everything in flight between a and b, both ways.
func (n *simNet) breakLink(a, b string) {
	n.gen[simLink{a, b}]++
	n.gen[simLink{b, a}]++
}

func coordSuffix(coordinator bool) string {
	if coordinator {
		return "/coordinator"
	}
	return ""
}

// simShow prints a message for the trace.
func simShow(m Message) string {
	s := fmt.Sprintf("%T%+v", m, m)
	return strings.TrimPrefix(s, "sharding.")
}

// simRand wraps the run's one PRNG with the draws the simulator needs.
type simRand struct{ *rand.Rand }

func (r simRand) chance(p float64) bool { return r.Float64() < p }

// between is a uniform duration in [lo, hi).
func (r simRand) between(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(r.Int64N(int64(hi-lo)))
}
