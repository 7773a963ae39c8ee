package sharding

import (
	"errors"
	"flag"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/internal/scenario"
)

// Scenario files in testdata/shard/*.txt step a shardCore, the shard's
// bookkeeping, through its inputs and print the effects it asks for, in
// the style of go.etcd.io/raft's data-driven tests (and of package
// allocation's). A case is one command line, a line "----", and the
// expected output up to the next blank line; lines starting with # are
// comments. Run with -rewrite-shard to regenerate the expected output
// (then review the diff).
//
// The harness plays the runner: it names each incarnation ID#N, keeps a
// fake clock, fires armed timers when the clock passes them, and reports a
// tell to an incarnation that refuses mail back to the core.
//
// Commands:
//
//	config [stop-message=B] [remember=B] [stop-timeout=D] [hand-off-timeout=D]
//	       [backoff-min=D] [backoff-max=D] [recovery-rate=N] [recovery-interval=D] [jitter=F]
//	       [buffer-limit=N]
//	                     a new core (defaults: stop message, no remember, 30s, 60s,
//	                     200ms, 10s, 0, 100ms, jitter 0.5 = none, no buffer limit)
//	tell ID MSG [fail-fast] [accepted] [tick=N]
//	                     a message through sharding (accepted: by the region already)
//	start ID             StartEntity
//	refuse ID            the current incarnation has stopped; its Stopped is still to come
//	full ID              the current incarnation's mailbox is full: it refuses mail
//	passivate ID[#N]     the incarnation asks to passivate
//	stopped ID[#N] [err=TEXT]          the incarnation stopped (failed with TEXT)
//	idle TICK TICKS      idle passivation at region tick TICK
//	advance D            move the clock, firing due timers in order
//	hand-off             hand the shard off
//	remembered ID...     the remember store answered with these entities
//	terminate            stop everything at once
//	entities             print every entity's state
var rewriteShard = flag.Bool("rewrite-shard", false, "rewrite the expected output of testdata/shard/*.txt")

func TestShardCoreScenarios(t *testing.T) {
	scenario.RunDir(t, "testdata/shard/*.txt", *rewriteShard, func(t *testing.T) scenario.RunFunc {
		h := &shardHarness{scenarioBase: scenarioBase{t: t}}
		return h.runAt(h.run)
	})
}

// scenarioBase is what the shard and region harnesses share: where the
// command being run comes from, what it printed, and failing there.
type scenarioBase struct {
	t     *testing.T
	where string
	out   []string
}

func (b *scenarioBase) fatalf(format string, args ...any) {
	b.t.Helper()
	b.t.Fatalf("%s: "+format, append([]any{b.where}, args...)...)
}

func (b *scenarioBase) printf(format string, args ...any) {
	b.out = append(b.out, fmt.Sprintf(format, args...))
}

// runAt adapts run to scenario.RunFunc.
func (b *scenarioBase) runAt(run func(line string) string) scenario.RunFunc {
	return func(where, line string) string {
		b.where = where
		return run(line)
	}
}

// begin parses a command line and clears the output; every command but
// config needs a configured machine.
func (b *scenarioBase) begin(line string, configured bool) scenario.Command {
	c := scenario.Parse(line)
	if c.Name != "config" && !configured {
		b.fatalf("%s before config", c.Name)
	}
	b.out = nil
	return c
}

// need fails unless c has n positional arguments.
func (b *scenarioBase) need(c scenario.Command, n int) {
	if len(c.Pos) < n {
		b.fatalf("%s needs %d arguments", c.Name, n)
	}
}

// shardHarness runs a shardCore as the real runner would, minus the IO.
type shardHarness struct {
	scenarioBase
	core  *shardCore[string, string]
	start time.Time
	now   time.Time

	incarnations map[string]int  // entity → incarnations started
	refusing     map[string]bool // handles whose tells fail as stopped
	full         map[string]bool // handles whose tells fail as a full mailbox
	timers       map[uint64]harnessTimer
}

type harnessTimer struct {
	kind     timerKind
	entityID string
	due      time.Time
}

func (h *shardHarness) configure(kv map[string]string) {
	cfg := shardCoreConfig{
		hasStopMessage: true, stopTimeout: 30 * time.Second, handOffTimeout: 60 * time.Second,
		restartBackoffMin: 200 * time.Millisecond, restartBackoffMax: 10 * time.Second,
		recoveryInterval: 100 * time.Millisecond,
	}
	jitter := 0.5
	for k, v := range kv {
		var err error
		switch k {
		case "stop-message":
			cfg.hasStopMessage, err = strconv.ParseBool(v)
		case "remember":
			cfg.remember, err = strconv.ParseBool(v)
		case "stop-timeout":
			cfg.stopTimeout, err = time.ParseDuration(v)
		case "hand-off-timeout":
			cfg.handOffTimeout, err = time.ParseDuration(v)
		case "backoff-min":
			cfg.restartBackoffMin, err = time.ParseDuration(v)
		case "backoff-max":
			cfg.restartBackoffMax, err = time.ParseDuration(v)
		case "recovery-rate":
			cfg.recoveryRate, err = strconv.Atoi(v)
		case "recovery-interval":
			cfg.recoveryInterval, err = time.ParseDuration(v)
		case "jitter":
			jitter, err = strconv.ParseFloat(v, 64)
		case "buffer-limit":
			cfg.bufferLimit, err = strconv.Atoi(v)
		default:
			h.fatalf("unknown config key %q", k)
		}
		if err != nil {
			h.fatalf("%s=%q: %v", k, v, err)
		}
	}
	h.core = newShardCore[string, string](cfg, func() float64 { return jitter })
	h.start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	h.now = h.start
	h.incarnations = map[string]int{}
	h.refusing = map[string]bool{}
	h.full = map[string]bool{}
	h.timers = map[uint64]harnessTimer{}
}

// handleOf is ID#N as given, or the current incarnation of a bare ID.
func (h *shardHarness) handleOf(arg string) (entityID, handle string) {
	if id, _, ok := strings.Cut(arg, "#"); ok {
		return id, arg
	}
	return arg, h.core.handle(arg)
}

func (h *shardHarness) at() time.Duration { return h.now.Sub(h.start) }

func (h *shardHarness) run(line string) string {
	c := h.begin(line, h.core != nil)
	cmd, pos, kv := c.Name, c.Pos, c.KV
	need := func(n int) { h.need(c, n) }
	switch cmd {
	case "config":
		h.configure(kv)
	case "tell":
		need(2)
		id, msg := pos[0], pos[1]
		tick, _ := strconv.ParseUint(kv["tick"], 10, 64)
		accepted := slices.Contains(pos, "accepted")
		verdict, handle := h.core.deliver(id, msg, slices.Contains(pos, "fail-fast"), accepted, tick)
		h.apply()
		switch verdict {
		case deliverHeld:
			h.printf("held")
		case deliverBufferFull:
			h.printf("refused: buffer full")
		case deliverUnavailable:
			until, cause := h.core.backOffOf(id)
			h.printf("unavailable: retry after %v: %v", until.Sub(h.now), cause)
		case deliverTellNew:
			handle = h.core.handle(id)
			fallthrough
		case deliverTell:
			if h.tell(id, handle, msg, accepted, slices.Contains(pos, "fail-fast")) {
				h.core.told(id, tick)
			}
		}
	case "start":
		need(1)
		h.core.startEntity(pos[0], h.now)
		h.apply()
	case "refuse":
		need(1)
		_, handle := h.handleOf(pos[0])
		h.refusing[handle] = true
	case "full":
		need(1)
		_, handle := h.handleOf(pos[0])
		h.full[handle] = true
	case "passivate":
		need(1)
		id, handle := h.handleOf(pos[0])
		h.core.passivate(id, handle)
		h.apply()
	case "stopped":
		need(1)
		id, handle := h.handleOf(pos[0])
		var err error
		if text, ok := kv["err"]; ok {
			err = errors.New(text)
		}
		h.core.stopped(id, handle, err, h.now)
		h.apply()
	case "idle":
		need(2)
		now, err1 := strconv.ParseUint(pos[0], 10, 64)
		ticks, err2 := strconv.ParseUint(pos[1], 10, 64)
		if err := errors.Join(err1, err2); err != nil {
			h.fatalf("%v", err)
		}
		h.core.passivateIdle(now, ticks)
		h.apply()
	case "advance":
		need(1)
		d, err := time.ParseDuration(pos[0])
		if err != nil {
			h.fatalf("%v", err)
		}
		h.advance(h.now.Add(d))
	case "hand-off":
		h.core.handOff()
		h.apply()
	case "remembered":
		h.core.remembered(pos)
		h.apply()
	case "terminate":
		if dropped := h.core.terminate(); dropped > 0 {
			h.printf("dropped %d held", dropped)
		}
		h.apply()
		h.core.forgetAll()
	case "entities":
		h.printEntities()
	default:
		h.fatalf("unknown command %q", cmd)
	}
	return strings.Join(h.out, "\n")
}

// tell delivers msg as the runner does: an incarnation that refuses it
// (stopped, not yet reported) hands it back to the core, which keeps it
// unless the buffer is full and msg was not accepted before. It reports
// whether the incarnation took msg.
func (h *shardHarness) tell(id, handle, msg string, accepted, ask bool) bool {
	switch {
	case h.refusing[handle]:
		if h.core.undelivered(id, msg, accepted, ask) {
			h.printf("tell %s %s: refused, stopped; held", handle, msg)
		} else {
			h.printf("tell %s %s: refused, stopped; refused: buffer full", handle, msg)
		}
		return false
	case h.full[handle]:
		h.printf("tell %s %s: refused, mailbox full", handle, msg)
		return false
	}
	h.printf("tell %s %s", handle, msg)
	return true
}

// advance fires every timer due by to, earliest first, at its due time.
func (h *shardHarness) advance(to time.Time) {
	for {
		var next uint64
		for gen, tm := range h.timers {
			if !tm.due.After(to) && (next == 0 || tm.due.Before(h.timers[next].due) || tm.due.Equal(h.timers[next].due) && gen < next) {
				next = gen
			}
		}
		if next == 0 {
			break
		}
		tm := h.timers[next]
		delete(h.timers, next)
		h.now = tm.due
		h.printf("at %v: timer %d fires", h.at(), next)
		h.core.timerFired(tm.kind, tm.entityID, next, h.now)
		h.apply()
	}
	h.now = to
}

var timerNames = map[timerKind]string{
	timerStopTimeout: "stop-timeout", timerRestart: "restart", timerHandOff: "hand-off-timeout", timerRecovery: "recovery",
}

var forceNames = map[forceReason]string{
	forceNoStopMessage: "no stop message", forceStopTimeout: "stop timeout", forceHandOffTimeout: "hand-off timeout",
	forceTerminate: "terminate",
}

// apply carries out and prints the core's effects, as the runner would.
func (h *shardHarness) apply() {
	for len(h.core.out) > 0 {
		out := h.core.out
		h.core.out = nil
		for _, ef := range out {
			switch ef.kind {
			case effStart:
				h.incarnations[ef.entityID]++
				handle := fmt.Sprintf("%s#%d", ef.entityID, h.incarnations[ef.entityID])
				h.core.attach(ef.entityID, handle)
				h.printf("start %s", handle)
				for _, m := range ef.msgs {
					h.tell(ef.entityID, handle, m, true, false)
				}
			case effSendStop:
				h.printf("stop-message %s (%s)", ef.handle, ef.why)
			case effForceStop:
				h.printf("force-stop %s (%s)", ef.handle, forceNames[ef.force])
			case effArmTimer:
				h.timers[ef.gen] = harnessTimer{kind: ef.timer, entityID: ef.entityID, due: h.now.Add(ef.after)}
				what := timerNames[ef.timer]
				if ef.entityID != "" {
					what += " " + ef.entityID
				}
				line := fmt.Sprintf("timer %d: %s in %v", ef.gen, what, ef.after)
				if ef.timer == timerRestart {
					line += fmt.Sprintf(" (attempt %d after: %v)", ef.attempt, ef.cause)
				}
				h.printf("%s", line)
			case effCancelTimer:
				if _, ok := h.timers[ef.gen]; ok {
					delete(h.timers, ef.gen)
					h.printf("cancel timer %d", ef.gen)
				}
			case effRemember:
				if ef.add {
					h.printf("remember add %s", ef.entityID)
				} else {
					h.printf("remember remove %s", ef.entityID)
				}
			case effRefuseAsks:
				h.printf("refuse-asks %s: %s (retry after %v: %v)", ef.entityID, strings.Join(ef.msgs, ", "), ef.after, ef.cause)
			case effHandedOff:
				var left []string
				for _, p := range ef.leftover {
					if p.start {
						left = append(left, p.entityID+" start")
					} else {
						left = append(left, p.entityID+" "+p.msg)
					}
				}
				if len(left) == 0 {
					left = []string{"nothing"}
				}
				h.printf("handed off, leftover: %s", strings.Join(left, ", "))
			}
		}
	}
}

var stateNames = map[entityState]string{active: "active", passivating: "passivating", backingOff: "backing-off"}

func (h *shardHarness) printEntities() {
	if len(h.core.entities) == 0 {
		h.printf("none")
	}
	for _, id := range slices.Sorted(maps.Keys(h.core.entities)) {
		e := h.core.entities[id]
		line := fmt.Sprintf("%s %s", e.handle, stateNames[e.state])
		if len(e.buffer) > 0 {
			line += " buffer=" + strings.Join(e.buffer, ",")
		}
		if e.startAgain {
			line += " start-again"
		}
		if e.restarts != nil && e.state == backingOff {
			line += fmt.Sprintf(" until=%v", e.restarts.until.Sub(h.start))
		}
		h.printf("%s", line)
	}
}
