package eventsourced_test

import (
	"io"
	"log/slog"
	"sync"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/eventsourced"
	"github.com/shoal-dev/shoal/journal"
)

// The fixture entity keeps a list of strings. Its commands exercise every
// kind of effect.
type cmd interface{ isCmd() }

type (
	add         struct{ Item string }
	addMany     struct{ Items []string }
	addAndReply struct {
		Item    string
		ReplyTo entity.ReplyTo[int]
	}
	getItems   struct{ ReplyTo entity.ReplyTo[[]string] }
	stashCmd   struct{ Item string } // stashed while "locked"
	lock       struct{}
	unlock     struct{} // persists Unlocked, then unstashes all
	addAndStop struct{ Item string }
	stopCmd    struct{}
	unknownCmd struct{}
	noop       struct{ ReplyTo entity.ReplyTo[string] }
)

func (add) isCmd()         {}
func (addMany) isCmd()     {}
func (addAndReply) isCmd() {}
func (getItems) isCmd()    {}
func (stashCmd) isCmd()    {}
func (lock) isCmd()        {}
func (unlock) isCmd()      {}
func (addAndStop) isCmd()  {}
func (stopCmd) isCmd()     {}
func (unknownCmd) isCmd()  {}
func (noop) isCmd()        {}

type event interface{ isEvent() }

type (
	added    struct{ Item string }
	locked   struct{}
	unlocked struct{}
)

func (added) isEvent()    {}
func (locked) isEvent()   {}
func (unlocked) isEvent() {}

type state struct {
	Items  []string
	Locked bool
}

var listKey = entity.NewTypeKey[cmd]("List")

func newRegistry() *codec.Registry {
	r := codec.NewRegistry()
	codec.MustRegister[add](r, "add")
	codec.MustRegister[addMany](r, "addMany")
	codec.MustRegister[addAndReply](r, "addAndReply")
	codec.MustRegister[getItems](r, "getItems")
	codec.MustRegister[stashCmd](r, "stashCmd")
	codec.MustRegister[lock](r, "lock")
	codec.MustRegister[unlock](r, "unlock")
	codec.MustRegister[addAndStop](r, "addAndStop")
	codec.MustRegister[stopCmd](r, "stopCmd")
	codec.MustRegister[unknownCmd](r, "unknownCmd")
	codec.MustRegister[noop](r, "noop")
	codec.MustRegister[added](r, "added")
	codec.MustRegister[locked](r, "locked")
	codec.MustRegister[unlocked](r, "unlocked")
	codec.MustRegister[state](r, "state")
	return r
}

// recorder collects what side effects and signals observed, in order.
type recorder struct {
	mu  sync.Mutex
	log []string
	sig []eventsourced.Signal
}

func (r *recorder) note(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.log = append(r.log, s)
}

func (r *recorder) signal(s eventsourced.Signal) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sig = append(r.sig, s)
}

func (r *recorder) notes() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.log...)
}

func (r *recorder) signals() []eventsourced.Signal {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]eventsourced.Signal(nil), r.sig...)
}

type listOptions struct {
	rec       *recorder
	retention eventsourced.Retention
	when      func(state, event, uint64) bool
	pid       func(id string) eventsourced.PersistenceID
	// replayBatch is Config.ReplayBatch; 0 keeps the default.
	replayBatch int
	// journal is Config.Journal; nil takes the System's.
	journal journal.Journal
	// snapshotIsOptional is Config.SnapshotIsOptional.
	snapshotIsOptional bool
}

func listEntity(o listOptions) func(entity.Context[cmd]) entity.Behavior[cmd] {
	if o.rec == nil {
		o.rec = &recorder{}
	}
	return func(ec entity.Context[cmd]) entity.Behavior[cmd] {
		pid := eventsourced.PersistenceIDOf(listKey, ec.EntityID())
		if o.pid != nil {
			pid = o.pid(ec.EntityID())
		}
		return eventsourced.New(eventsourced.Config[cmd, event, state]{
			PersistenceID: pid,
			OnCommand:     listCommand(o.rec),
			OnEvent: func(ctx eventsourced.Context[cmd], s state, e event) state {
				switch e := e.(type) {
				case added:
					s.Items = append(append([]string(nil), s.Items...), e.Item)
				case locked:
					s.Locked = true
				case unlocked:
					s.Locked = false
				}
				return s
			},
			OnSignal: func(ctx eventsourced.Context[cmd], s state, sig eventsourced.Signal) {
				o.rec.signal(sig)
			},
			Retention:    o.retention,
			SnapshotWhen: o.when,
			ReplayBatch:  o.replayBatch,
			Journal:      o.journal,

			SnapshotIsOptional: o.snapshotIsOptional,
		})
	}
}

func listCommand(rec *recorder) func(eventsourced.CommandContext[cmd, event, state], state, cmd) eventsourced.Effect[event, state] {
	type eff = eventsourced.Effect[event, state]
	return func(ctx eventsourced.CommandContext[cmd, event, state], s state, c cmd) eff {
		switch c := c.(type) {
		case add:
			return ctx.Persist(added{Item: c.Item}).
				ThenRun(func(s state) { rec.note("ran with " + itemsOf(s)) })
		case addMany:
			evs := make([]event, len(c.Items))
			for i, it := range c.Items {
				evs[i] = added{Item: it}
			}
			return ctx.Persist(evs...)
		case addAndReply:
			return ctx.Persist(added{Item: c.Item}).
				ThenReplyFrom(func(s state) eventsourced.Answer { return eventsourced.To(c.ReplyTo, len(s.Items)) })
		case getItems:
			return ctx.Reply(eventsourced.To(c.ReplyTo, s.Items))
		case stashCmd:
			if s.Locked {
				return ctx.Stash()
			}
			return ctx.Persist(added{Item: c.Item})
		case lock:
			return ctx.Persist(locked{})
		case unlock:
			return ctx.Persist(unlocked{}).
				ThenRun(func(state) { rec.note("before unstash") }).
				ThenUnstashAll()
		case addAndStop:
			return ctx.Persist(added{Item: c.Item}).
				ThenRun(func(state) { rec.note("before stop") }).
				ThenStop()
		case stopCmd:
			return ctx.Stop()
		case noop:
			return ctx.None().ThenRun(func(state) { rec.note("noop") })
		}
		return ctx.Unhandled()
	}
}

func itemsOf(s state) string {
	out := ""
	for i, it := range s.Items {
		if i > 0 {
			out += ","
		}
		out += it
	}
	return out
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// counterEntity persists like the list entity but keeps only a count, so
// benchmarks measure the runtime rather than a growing state.
func counterEntity(ec entity.Context[cmd]) entity.Behavior[cmd] {
	return eventsourced.New(eventsourced.Config[cmd, event, int]{
		PersistenceID: eventsourced.PersistenceIDOf(listKey, ec.EntityID()),
		OnCommand: func(ctx eventsourced.CommandContext[cmd, event, int], n int, c cmd) eventsourced.Effect[event, int] {
			if c, ok := c.(addAndReply); ok {
				return ctx.Persist(added{Item: c.Item}).ThenReplyFrom(func(n int) eventsourced.Answer { return eventsourced.To(c.ReplyTo, n) })
			}
			return ctx.Unhandled()
		},
		OnEvent: func(_ eventsourced.Context[cmd], n int, _ event) int { return n + 1 },
	})
}
