package sharding_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/eventsourced"
	"github.com/shoal-dev/shoal/internal/runtime"
	shoaljournal "github.com/shoal-dev/shoal/journal"
	"github.com/shoal-dev/shoal/journal/memory"
	"github.com/shoal-dev/shoal/sharding"
)

// The tests in this file ask an entity on another node that will never
// answer: each ask must fail as it would on the entity's own node, at
// once and with the same sentinel error, where it used to wait for its
// deadline (docs/DESIGN.md, Delivery). Every ask has a deadline an hour
// away, in a synctest bubble: on the old code it ends with ErrAskTimeout.

// Commands an entity that fails its asks takes.
type (
	// Ignore is returned Unhandled.
	Ignore struct{ ReplyTo entity.ReplyTo[Count] }
	// Boom makes the handler panic.
	Boom struct{ ReplyTo entity.ReplyTo[Count] }
	// Wait is stashed, and never unstashed.
	Wait struct{ ReplyTo entity.ReplyTo[Count] }
	// Halt stops the entity.
	Halt struct{}
	// Save persists an event, then replies.
	Save struct{ ReplyTo entity.ReplyTo[Count] }
	// Saved is Save's event.
	Saved struct{}
)

func (Ignore) isCmd() {}
func (Boom) isCmd()   {}
func (Wait) isCmd()   {}
func (Halt) isCmd()   {}
func (Save) isCmd()   {}

func registerFailureTypes(reg *codec.Registry) {
	codec.MustRegister[Ignore](reg, "test.Ignore")
	codec.MustRegister[Boom](reg, "test.Boom")
	codec.MustRegister[Wait](reg, "test.Wait")
	codec.MustRegister[Halt](reg, "test.Halt")
	codec.MustRegister[Save](reg, "test.Save")
	codec.MustRegister[Saved](reg, "test.Saved")
}

// troubled answers Get like counter, and fails the other commands' asks.
func troubled(node string) func(entity.Context[cmd]) entity.Behavior[cmd] {
	return func(entity.Context[cmd]) entity.Behavior[cmd] {
		return entity.Receive(func(ctx entity.Context[cmd], m cmd) entity.Behavior[cmd] {
			switch m := m.(type) {
			case Get:
				_ = entity.Reply(ctx, m.ReplyTo, Count{Node: node})
			case Ignore:
				return entity.Unhandled[cmd]()
			case Boom:
				panic("boom")
			case Wait:
				if err := ctx.Stash().Stash(m); err != nil {
					panic(err)
				}
			case Halt:
				ctx.Stop()
			}
			return entity.Same[cmd]()
		})
	}
}

// brokenJournal fails every write, as a journal whose database is down.
type brokenJournal struct{ shoaljournal.Journal }

var errJournalDown = errors.New("test: journal down")

func (brokenJournal) Write(context.Context, []shoaljournal.Event) error { return errJournalDown }

// stuckJournal's writes fail once released is closed.
type stuckJournal struct {
	shoaljournal.Journal
	released chan struct{}
}

func (j stuckJournal) Write(ctx context.Context, _ []shoaljournal.Event) error {
	select {
	case <-j.released:
		return errJournalDown
	case <-ctx.Done():
		return ctx.Err()
	}
}

// saver is an event-sourced entity whose writes all fail.
func saver(node string) func(entity.Context[cmd]) entity.Behavior[cmd] {
	return saverOn(brokenJournal{memory.New()})(node)
}

// saverOn is saver on journal j.
func saverOn(j shoaljournal.Journal) func(node string) func(entity.Context[cmd]) entity.Behavior[cmd] {
	return func(node string) func(entity.Context[cmd]) entity.Behavior[cmd] { return saverOf(node, j) }
}

func saverOf(node string, j shoaljournal.Journal) func(entity.Context[cmd]) entity.Behavior[cmd] {
	reg := codec.NewRegistry()
	registerFailureTypes(reg)
	return func(ec entity.Context[cmd]) entity.Behavior[cmd] {
		return eventsourced.New(eventsourced.Config[cmd, Saved, int]{
			PersistenceID: eventsourced.PersistenceIDOf(counters, ec.EntityID()),
			Journal:       j,
			Codec:         reg,
			WriteTimeout:  time.Hour,
			OnCommand: func(ctx eventsourced.CommandContext[cmd, Saved, int], n int, c cmd) eventsourced.Effect[Saved, int] {
				switch c := c.(type) {
				case Get:
					return ctx.Reply(eventsourced.To(c.ReplyTo, Count{N: n, Node: node}))
				case Save:
					return ctx.Persist(Saved{}).ThenReply(eventsourced.To(c.ReplyTo, Count{N: n + 1, Node: node}))
				}
				return ctx.Unhandled()
			},
			OnEvent: func(_ eventsourced.Context[cmd], n int, _ Saved) int { return n + 1 },
		})
	}
}

// farAsk asks the entity id through node a's region, with a deadline an
// hour away, and returns the ask's error.
func farAsk(t *testing.T, via *remoteNode, id string, build func(entity.ReplyTo[Count]) cmd) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	got, err := entity.Ask(ctx, via.counters.EntityRefFor(id), build)
	if err == nil {
		t.Fatalf("ask of %s answered %+v, want it to fail", id, got)
	}
	return err
}

// wantFailed checks that err is an ask failure from another node that
// matches want, and not a timeout.
func wantFailed(t *testing.T, err error, want ...error) *entity.AskFailedError {
	t.Helper()
	var failed *entity.AskFailedError
	if !errors.As(err, &failed) || !errors.Is(err, entity.ErrAskFailed) {
		t.Fatalf("ask: %v, want an *entity.AskFailedError", err)
	}
	for _, w := range want {
		if !errors.Is(err, w) {
			t.Fatalf("ask: %v, want it to match %v", err, w)
		}
	}
	if errors.Is(err, entity.ErrAskTimeout) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("ask: %v: timed out", err)
	}
	return failed
}

// twoNodes starts two nodes whose counters entities create builds, and
// returns them with an entity id that a's region knows to live on b.
func twoNodes(t *testing.T, create func(string) func(entity.Context[cmd]) entity.Behavior[cmd], settings sharding.Settings) (c *remoteCluster, a, b *remoteNode, id string) {
	t.Helper()
	c = startRemoteCluster(t, 2, remoteOpts{log: quiet(), create: create, settings: settings})
	a, b = c.nodes[0], c.nodes[1]
	return c, a, b, onNode(t, c, a, b)
}

// The failure takes the route replies take: the transport, the runtime's
// ReplyRouter.
func TestRemoteAskUnhandledFailsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, a, _, id := twoNodes(t, troubled, sharding.Settings{})
		defer c.stop()
		err := farAsk(t, a, id, func(to entity.ReplyTo[Count]) cmd { return Ignore{ReplyTo: to} })
		f := wantFailed(t, err, entity.ErrUnhandled)
		if f.Code != runtime.FailureUnhandled || errors.Is(err, entity.ErrStopped) {
			t.Fatalf("ask: %v (code %d), want FailureUnhandled alone", err, f.Code)
		}
		if st := a.tr.Stats(); st.Replies == 0 || st.ReplyRefused != 0 {
			t.Fatalf("asker's transport stats %+v: want the failure counted as a reply", st)
		}
	})
}

func TestRemoteAskCrashFailsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, a, _, id := twoNodes(t, troubled, sharding.Settings{})
		defer c.stop()
		err := farAsk(t, a, id, func(to entity.ReplyTo[Count]) cmd { return Boom{ReplyTo: to} })
		f := wantFailed(t, err, entity.ErrStopped)
		var pe *entity.PanicError
		if f.Code != runtime.FailureCrashed || !errors.As(err, &pe) {
			t.Fatalf("ask: %v (code %d), want FailureCrashed with a *PanicError", err, f.Code)
		}
	})
}

// The ask's command is stashed; the entity stops (ctx.Stop) with it still
// in the stash.
func TestRemoteAskStoppedFailsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, a, _, id := twoNodes(t, troubled, sharding.Settings{})
		defer c.stop()
		ref := a.counters.EntityRefFor(id)
		res := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
			defer cancel()
			_, err := entity.Ask(ctx, ref, func(to entity.ReplyTo[Count]) cmd { return Wait{ReplyTo: to} })
			res <- err
		}()
		synctest.Wait() // the Wait is on its way (one link: it arrives first)
		if err := ref.Tell(Halt{}); err != nil {
			t.Fatal(err)
		}
		err := <-res
		f := wantFailed(t, err, entity.ErrStopped)
		if f.Code != runtime.FailureStopped {
			t.Fatalf("ask: %v (code %d), want FailureStopped", err, f.Code)
		}
	})
}

func TestRemoteAskPersistFailedFailsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, a, _, id := twoNodes(t, saver, sharding.Settings{})
		defer c.stop()
		err := farAsk(t, a, id, func(to entity.ReplyTo[Count]) cmd { return Save{ReplyTo: to} })
		f := wantFailed(t, err, eventsourced.ErrPersistFailed)
		if f.Code != runtime.FailurePersistFailed || errors.Is(err, eventsourced.ErrWriteConflict) {
			t.Fatalf("ask: %v (code %d), want FailurePersistFailed", err, f.Code)
		}
	})
}

// backingOff starts two nodes with an entity of b whose write failed an
// ask from a, so that its shard backs off. The back-off outlasts an ask's
// deadline: a test that waited for the restart would fail.
func backingOff(t *testing.T) (c *remoteCluster, a, b *remoteNode, id string) {
	t.Helper()
	c, a, b, id = twoNodes(t, saver, sharding.Settings{RestartBackoffMin: 2 * time.Hour, RestartBackoffMax: 4 * time.Hour})
	wantFailed(t, farAsk(t, a, id, func(to entity.ReplyTo[Count]) cmd { return Save{ReplyTo: to} }), eventsourced.ErrPersistFailed)
	synctest.Wait() // the entity has stopped; its shard backs off
	return c, a, b, id
}

// getCount asks for the count.
func getCount(to entity.ReplyTo[Count]) cmd { return Get{ReplyTo: to} }

// An entity whose write failed is backing off on its node: an ask from
// another node is refused there at once, as on that node itself, with
// ErrEntityUnavailable and the cause, instead of waiting for the restart.
func TestRemoteAskOfBackingOffEntityFailsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, a, b, id := backingOff(t)
		defer c.stop()
		err := farAsk(t, a, id, getCount)
		f := wantFailed(t, err, sharding.ErrEntityUnavailable, eventsourced.ErrPersistFailed)
		if f.Code != runtime.FailureUnavailable {
			t.Fatalf("ask: %v (code %d), want FailureUnavailable", err, f.Code)
		}
		// On b itself the same ask fails the same way.
		_, err = entity.Ask(context.Background(), b.counters.EntityRefFor(id), getCount)
		if !errors.Is(err, sharding.ErrEntityUnavailable) || !errors.Is(err, eventsourced.ErrPersistFailed) {
			t.Fatalf("local ask on the home node: %v, want ErrEntityUnavailable", err)
		}
		// A Tell still waits for the restart, on either node.
		if err := a.counters.EntityRefFor(id).Tell(Add{N: 1}); err != nil {
			t.Fatalf("tell: %v", err)
		}
	})
}

// The ask from another node learns what a local one does of the back-off:
// the *sharding.UnavailableError inside its failure carries the same
// RetryAfter, so a caller can say when to come back (a 503's Retry-After)
// wherever the entity lives.
func TestRemoteAskOfBackingOffEntityCarriesRetryAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, a, b, id := backingOff(t)
		defer c.stop()
		time.Sleep(time.Minute)
		asked := time.Now()
		remote := farAsk(t, a, id, getCount)
		trip := time.Since(asked) // b refused the remote ask up to this long before the local one
		_, local := entity.Ask(context.Background(), b.counters.EntityRefFor(id), getCount)
		want, ok := errors.AsType[*sharding.UnavailableError](local)
		if !ok || want.RetryAfter <= 0 {
			t.Fatalf("local ask on the home node: %v, want an *UnavailableError with the back-off left", local)
		}
		got, ok := errors.AsType[*sharding.UnavailableError](remote)
		if !ok {
			t.Fatalf("remote ask: %v, want an *UnavailableError inside", remote)
		}
		if d := got.RetryAfter - want.RetryAfter; d < 0 || d > trip || got.Type != want.Type || got.EntityID != want.EntityID {
			t.Fatalf("remote ask's UnavailableError %+v, the home node's %+v (%v later): want the same entity and restart time", got, want, trip)
		}
		wantFailed(t, remote, sharding.ErrEntityUnavailable, eventsourced.ErrPersistFailed)
	})
}

// The entity's mailbox is full on its node (it persists, and holds what
// comes meanwhile up to HeldCapacity): the region there refuses the ask's
// command, and the ask fails at once with ErrMailboxFull, as it would on
// that node.
func TestRemoteAskRefusedByFullMailboxFailsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		j := stuckJournal{memory.New(), make(chan struct{})}
		c, a, _, id := twoNodes(t, saverOn(j), sharding.Settings{HeldCapacity: 1})
		defer c.stop()
		defer close(j.released)
		ref := a.counters.EntityRefFor(id)
		if err := ref.Tell(Save{}); err != nil { // its write never ends: the entity holds its mail
			t.Fatal(err)
		}
		settleRemote()
		if err := ref.Tell(Add{N: 1}); err != nil { // held: the mailbox is full
			t.Fatal(err)
		}
		settleRemote()
		err := farAsk(t, a, id, getCount)
		f := wantFailed(t, err, entity.ErrMailboxFull)
		if f.Code != runtime.FailureMailboxFull {
			t.Fatalf("ask: %v (code %d), want FailureMailboxFull", err, f.Code)
		}
	})
}
