package sharding

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestShardCoreRandomWalks steps a shardCore through seeded random
// schedules of messages, asks, StartEntity, passivation, failures, idle
// ticks and time, with incarnations that stop some while after they are
// asked to (or before taking their first mail) and report it later still,
// under a random per-entity buffer limit, then hands the shard off. It checks
// on every step that an entity never has two live incarnations, and at the
// end that every accepted message reached an incarnation or the hand-off's
// leftover exactly once, in the order it was sent; on the way, that no
// buffer outgrows the limit and no accepted message is refused.
func TestShardCoreRandomWalks(t *testing.T) {
	for seed := range uint64(300) {
		t.Run(strconv.FormatUint(seed, 10), func(t *testing.T) {
			w := newShardWalk(t, seed)
			for range 200 {
				w.step()
			}
			w.finish()
		})
	}
}

type walkIncarnation struct {
	entityID string
	dead     bool // stopped; its Stopped report may still be pending
	stopping bool // got the stop message or a force-stop: stops when it likes
	err      error
}

type shardWalk struct {
	t    *testing.T
	rng  *rand.Rand
	core *shardCore[string, *walkIncarnation]
	now  time.Time
	log  []string // the schedule, for a failing seed

	live     map[string]*walkIncarnation // entity → its live incarnation
	pending  []*walkIncarnation          // dead, Stopped not yet reported
	timers   map[uint64]harnessTimer
	sent     map[string][]string // entity → accepted messages, in send order
	received map[string][]string // entity → messages its incarnations got, in order
	leftover map[string][]string
	refused  map[string]bool // asks held, then refused when the entity backed off
	handed   bool
	next     int
}

func newShardWalk(t *testing.T, seed uint64) *shardWalk {
	rng := rand.New(rand.NewPCG(seed, 1))
	cfg := shardCoreConfig{
		hasStopMessage: rng.IntN(4) > 0, remember: rng.IntN(3) == 0,
		stopTimeout: time.Second, handOffTimeout: 2 * time.Second,
		restartBackoffMin: 100 * time.Millisecond, restartBackoffMax: time.Second,
		recoveryRate: rng.IntN(3), recoveryInterval: 100 * time.Millisecond,
		bufferLimit: rng.IntN(4), // 0: none
	}
	return &shardWalk{
		t: t, rng: rng, core: newShardCore[string, *walkIncarnation](cfg, rng.Float64),
		now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), live: map[string]*walkIncarnation{},
		timers: map[uint64]harnessTimer{}, sent: map[string][]string{}, received: map[string][]string{},
		leftover: map[string][]string{}, refused: map[string]bool{},
	}
}

func (w *shardWalk) fatalf(format string, args ...any) {
	w.t.Helper()
	w.t.Fatalf(format+"\nschedule:\n%s", append(args, strings.Join(w.log, "\n"))...)
}

func (w *shardWalk) step() {
	id := "e" + strconv.Itoa(w.rng.IntN(3))
	switch r := w.rng.IntN(100); {
	case r < 35:
		w.tell(id, w.rng.IntN(4) == 0)
	case r < 40:
		w.log = append(w.log, "start "+id)
		w.core.startEntity(id, w.now)
	case r < 48:
		if inc := w.live[id]; inc != nil {
			w.log = append(w.log, "passivate "+id)
			w.core.passivate(id, inc)
		}
	case r < 58: // the live incarnation stops: failed, asked to, or by itself
		if inc := w.live[id]; inc != nil && (inc.stopping || w.rng.IntN(3) == 0) {
			if !inc.stopping && w.rng.IntN(2) == 0 {
				inc.err = errors.New("boom")
			}
			w.log = append(w.log, fmt.Sprintf("die %s err=%v", id, inc.err))
			inc.dead = true
			delete(w.live, id)
			w.pending = append(w.pending, inc)
		}
	case r < 75: // a pending Stopped report arrives
		if len(w.pending) > 0 {
			i := w.rng.IntN(len(w.pending))
			inc := w.pending[i]
			w.pending = slices.Delete(w.pending, i, i+1)
			w.log = append(w.log, "stopped "+inc.entityID)
			w.core.stopped(inc.entityID, inc, inc.err, w.now)
		}
	case r < 80:
		tick := uint64(w.rng.IntN(20))
		w.log = append(w.log, fmt.Sprintf("idle %d", tick))
		w.core.passivateIdle(tick, 2)
	case r < 83:
		w.log = append(w.log, "remembered")
		w.core.remembered([]string{"e0", "e1", "e2"})
	default:
		d := time.Duration(w.rng.IntN(1500)) * time.Millisecond
		w.log = append(w.log, "advance "+d.String())
		w.advance(w.now.Add(d))
	}
	w.apply()
}

func (w *shardWalk) tell(id string, failFast bool) {
	w.next++
	msg := "m" + strconv.Itoa(w.next)
	w.log = append(w.log, fmt.Sprintf("tell %s %s fail-fast=%v", id, msg, failFast))
	verdict, inc := w.core.deliver(id, msg, failFast, false, uint64(w.next))
	w.apply()
	switch verdict {
	case deliverUnavailable, deliverBufferFull:
		return // refused: the sender knows, nothing to account for
	case deliverHeld:
		w.checkBuffer(id)
	case deliverTellNew:
		inc = w.core.handle(id)
		fallthrough
	case deliverTell:
		if !w.deliverTo(id, inc, msg, false) {
			return
		}
	}
	w.sent[id] = append(w.sent[id], msg)
}

// deliverTo tells inc msg, as the runner does; accepted is true for a
// message the core had accepted before. It reports false when the core
// refused a message it had not accepted.
func (w *shardWalk) deliverTo(id string, inc *walkIncarnation, msg string, accepted bool) bool {
	if inc == nil {
		w.fatalf("tell %s to no incarnation", msg)
	}
	if inc.dead {
		if !w.core.undelivered(id, msg, accepted, false) {
			if accepted {
				w.fatalf("%s: accepted message %s refused", id, msg)
			}
			return false
		}
		w.checkBuffer(id)
		return true
	}
	w.received[id] = append(w.received[id], msg)
	return true
}

// checkBuffer fails when a buffer outgrew the limit: a restart could not
// hand it whole to the next incarnation.
func (w *shardWalk) checkBuffer(id string) {
	if e := w.core.entities[id]; e != nil && w.core.cfg.bufferLimit > 0 && len(e.buffer) > w.core.cfg.bufferLimit {
		w.fatalf("%s holds %d messages, over the limit %d", id, len(e.buffer), w.core.cfg.bufferLimit)
	}
}

func (w *shardWalk) advance(to time.Time) {
	for {
		var next uint64
		for gen, tm := range w.timers {
			if !tm.due.After(to) && (next == 0 || tm.due.Before(w.timers[next].due) || tm.due.Equal(w.timers[next].due) && gen < next) {
				next = gen
			}
		}
		if next == 0 {
			break
		}
		tm := w.timers[next]
		delete(w.timers, next)
		w.now = tm.due
		w.core.timerFired(tm.kind, tm.entityID, next, w.now)
		w.apply()
	}
	w.now = to
}

func (w *shardWalk) apply() {
	for len(w.core.out) > 0 {
		out := w.core.out
		w.core.out = nil
		for _, ef := range out {
			switch ef.kind {
			case effStart:
				if old := w.live[ef.entityID]; old != nil {
					w.fatalf("%s started while an incarnation still runs", ef.entityID)
				}
				inc := &walkIncarnation{entityID: ef.entityID}
				w.core.attach(ef.entityID, inc)
				if w.rng.IntN(8) == 0 {
					// It stops before taking its mail (its setup stopped it):
					// the core takes the whole buffer back, limit or not.
					w.log = append(w.log, "born dead "+ef.entityID)
					inc.dead = true
					w.pending = append(w.pending, inc)
				} else {
					w.live[ef.entityID] = inc
				}
				for _, m := range ef.msgs {
					w.deliverTo(ef.entityID, inc, m, true)
				}
			case effSendStop, effForceStop:
				if ef.handle != nil {
					ef.handle.stopping = true
				}
			case effArmTimer:
				w.timers[ef.gen] = harnessTimer{kind: ef.timer, entityID: ef.entityID, due: w.now.Add(ef.after)}
			case effCancelTimer:
				delete(w.timers, ef.gen)
			case effRefuseAsks:
				for _, m := range ef.msgs {
					w.refused[m] = true // its sender learns it is unavailable
				}
			case effHandedOff:
				if w.handed {
					w.fatalf("hand-off reported twice")
				}
				w.handed = true
				for _, p := range ef.leftover {
					if !p.start {
						w.leftover[p.entityID] = append(w.leftover[p.entityID], p.msg)
					}
				}
			}
		}
	}
}

// finish hands the shard off, lets every incarnation stop, and checks
// that each accepted message arrived once, in order, or waits in leftover.
func (w *shardWalk) finish() {
	w.log = append(w.log, "hand-off")
	w.core.handOff()
	w.apply()
	for round := 0; !w.handed; round++ {
		if round > 100 {
			w.fatalf("hand-off never completed; entities %v", w.core.entityIDs())
		}
		for id, inc := range w.live {
			if inc.stopping {
				inc.dead = true
				delete(w.live, id)
				w.pending = append(w.pending, inc)
			}
		}
		for _, inc := range w.pending {
			w.core.stopped(inc.entityID, inc, inc.err, w.now)
			w.apply()
		}
		w.pending = nil
		w.advance(w.now.Add(time.Second))
	}
	for id, sent := range w.sent {
		sent = slices.DeleteFunc(slices.Clone(sent), func(m string) bool { return w.refused[m] })
		got := slices.Concat(w.received[id], w.leftover[id])
		if !slices.Equal(got, sent) {
			w.fatalf("entity %s: sent %v, received %v then leftover %v", id, sent, w.received[id], w.leftover[id])
		}
	}
}
