package entity_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/internal/logtest"
	"github.com/shoal-dev/shoal/internal/runtime"
)

func loggedSystem(t *testing.T, mutate func(*entity.Config)) (*entity.System, *logtest.Buffer, *fakeClock) {
	lines := &logtest.Buffer{}
	clock := newFakeClock()
	sys := newSystem(t, func(c *entity.Config) {
		c.Logger = slog.New(slog.NewJSONHandler(lines, nil))
		c.Clock = clock
		if mutate != nil {
			mutate(c)
		}
	})
	return sys, lines, clock
}

// Dead letters are logged at Info with their entity and type, at most
// DeadLetterLogLimit a second of the System's clock; the rest are counted,
// and the next line logged says how many were left out.
func TestDeadLettersLoggedRateLimitedAndCounted(t *testing.T) {
	sys, lines, clock := loggedSystem(t, func(c *entity.Config) { c.DeadLetterLogLimit = 3 })
	c := spawnFunc(sys, "gone", func(entity.Context[string], string) entity.Behavior[string] { return entity.Same[string]() })
	c.StopNow()
	waitDone(t, c)
	for range 5 {
		_ = c.Tell("hello")
	}
	recs := lines.Records(t)
	if len(recs) != 3 {
		t.Fatalf("%d lines logged for 5 dead letters within a second, want 3: %v", len(recs), recs)
	}
	for _, r := range recs {
		if r["level"] != "INFO" || r["msg"] != "dead letter" || r["to"] != "strings/gone" || r["type"] != "string" {
			t.Fatalf("record %v lacks level, entity or type", r)
		}
	}
	if st := sys.Stats(); st.DeadLetters != 5 || st.DeadLettersNotLogged != 2 || st.Unhandled != 0 {
		t.Fatalf("stats %+v, want 5 dead letters, 2 not logged", st)
	}
	clock.Advance(time.Second)
	_ = c.Tell("again")
	recs = lines.Records(t)
	if len(recs) != 4 || recs[3]["not_logged_before"] != 2.0 {
		t.Fatalf("after a second: records %v, want a fourth that reports the 2 left out", recs)
	}
}

// Unhandled messages are dead letters too, logged and counted apart.
func TestUnhandledMessagesLoggedAndCounted(t *testing.T) {
	sys, lines, _ := loggedSystem(t, nil)
	c := entity.Spawn(sys, &entity.Props[cmd]{Key: counterKey, Create: counter}, "u")
	mustTell[cmd](t, c, tick{Key: "k"})
	if got := askGet(t, c); got != 0 { // the tick was handled before the ask
		t.Fatalf("counter %d", got)
	}
	recs := lines.Records(t)
	if len(recs) != 1 || recs[0]["msg"] != "unhandled message" || recs[0]["to"] != "counter/u" || recs[0]["type"] != "entity_test.tick" {
		t.Fatalf("records %v, want one unhandled message line for counter/u", recs)
	}
	if st := sys.Stats(); st.Unhandled != 1 || st.DeadLetters != 1 {
		t.Fatalf("stats %+v, want 1 unhandled, 1 dead letter", st)
	}
}

// A negative limit logs nothing but still counts.
func TestDeadLetterLoggingOff(t *testing.T) {
	sys, lines, _ := loggedSystem(t, func(c *entity.Config) { c.DeadLetterLogLimit = -1 })
	entity.Reply(sys, entity.ReplyTo[int]{}, 1)
	if recs := lines.Records(t); len(recs) != 0 {
		t.Fatalf("logged %v", recs)
	}
	if st := sys.Stats(); st.DeadLetters != 1 || st.DeadLettersNotLogged != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// dropRef stands for an owner that accepted a message and later could not
// deliver it: it records the message with System.DeadLetter.
type dropRef struct {
	sys   *entity.System
	cause error
}

func (r dropRef) Tell(m askString) error {
	runtime.DeadLetter(r.sys, r.cause, "owned/x", "refused by the new incarnation", m)
	return nil
}

func (r dropRef) System() *entity.System { return r.sys }

type askString struct{ ReplyTo entity.ReplyTo[string] }

// An owner's dead letter is counted and logged with its reason like the
// runtime's own, and the ask it carries fails at once with the cause.
func TestOwnerDeadLetterCountedLoggedAndFailsItsAsk(t *testing.T) {
	sys, lines, _ := loggedSystem(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // only stops a broken run hanging
	defer cancel()
	_, err := entity.Ask(ctx, entity.Ref[askString](dropRef{sys, entity.ErrMailboxFull}),
		func(r entity.ReplyTo[string]) askString { return askString{ReplyTo: r} })
	if !errors.Is(err, entity.ErrMailboxFull) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("ask of a dead letter: %v, want ErrMailboxFull at once", err)
	}
	recs := lines.Records(t)
	if len(recs) != 1 || recs[0]["msg"] != "dead letter" || recs[0]["to"] != "owned/x" || recs[0]["reason"] != "refused by the new incarnation" {
		t.Fatalf("records %v, want one dead letter line for owned/x with its reason", recs)
	}
	if st := sys.Stats(); st.DeadLetters != 1 || st.Unhandled != 0 || st.AsksWaiting != 0 {
		t.Fatalf("stats %+v, want 1 dead letter, no ask waiting", st)
	}
}

// Every line the runtime logs names its node; a dead letter to an entity
// names its type and id as attributes of their own.
func TestRuntimeLogLinesNameNodeAndEntity(t *testing.T) {
	sys, lines, _ := loggedSystem(t, func(c *entity.Config) { c.NodeID = "n1" })
	c := spawnFunc(sys, "gone", func(entity.Context[string], string) entity.Behavior[string] { return entity.Same[string]() })
	c.StopNow()
	waitDone(t, c)
	_ = c.Tell("hello")
	entity.Reply(sys, entity.ReplyTo[int]{}, 1) // a reply to nobody: no entity
	recs := lines.Records(t)
	if len(recs) != 2 {
		t.Fatalf("records %v, want 2 dead letters", recs)
	}
	if r := recs[0]; r["node"] != "n1" || r["entity_type"] != "strings" || r["entity_id"] != "gone" {
		t.Fatalf("dead letter to an entity: %v, want node n1, entity_type strings, entity_id gone", r)
	}
	if r := recs[1]; r["node"] != "n1" || r["entity_type"] != nil {
		t.Fatalf("dead reply: %v, want node n1 and no entity", r)
	}
}
