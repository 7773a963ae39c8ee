package entity_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/entity/codec"
)

type lossyCmd interface{ isLossy() }

// hidden has an unexported field: JSON drops it.
type hidden struct{ n int }

// boxed has a field of interface type: JSON brings it back as a map.
type boxed struct{ V any }

type inner struct{ X int }

// stamped carries a time with a monotonic reading and a location, which a
// codec drops without changing the instant.
type stamped struct{ At time.Time }

// askHidden asks for a reply that loses its unexported field.
type askHidden struct{ ReplyTo entity.ReplyTo[hidden] }

func (hidden) isLossy()    {}
func (boxed) isLossy()     {}
func (stamped) isLossy()   {}
func (askHidden) isLossy() {}

var lossyKey = entity.NewTypeKey[lossyCmd]("lossy")

func lossySystem(t *testing.T) (*entity.System, *entity.Cell[lossyCmd], *recorder[lossyCmd]) {
	reg := codec.NewRegistry()
	codec.MustRegister[hidden](reg, "hidden")
	codec.MustRegister[boxed](reg, "boxed")
	codec.MustRegister[stamped](reg, "stamped")
	codec.MustRegister[askHidden](reg, "askHidden")
	sys := newSystem(t, func(c *entity.Config) { c.Codec, c.ForceSerialization = reg, true })
	seen := &recorder[lossyCmd]{}
	c := entity.Spawn(sys, &entity.Props[lossyCmd]{Key: lossyKey, Create: func(entity.Context[lossyCmd]) entity.Behavior[lossyCmd] {
		return entity.Receive(func(ctx entity.Context[lossyCmd], m lossyCmd) entity.Behavior[lossyCmd] {
			seen.add(m)
			if m, ok := m.(askHidden); ok {
				entity.Reply(ctx, m.ReplyTo, hidden{n: 42})
			}
			return entity.Same[lossyCmd]()
		})
	}}, "l")
	return sys, c, seen
}

// A message the codec copies differently from the original is refused, not
// delivered changed.
func TestForceSerializationRefusesLossyCopies(t *testing.T) {
	synctest.Test(t, testRefusesLossyCopies)
}

func testRefusesLossyCopies(t *testing.T) {
	sys, c, seen := lossySystem(t)
	for _, msg := range []lossyCmd{hidden{n: 42}, boxed{V: inner{X: 1}}, boxed{V: 3}} {
		err := c.Tell(msg)
		if !errors.Is(err, entity.ErrNotSerializable) || !errors.Is(err, entity.ErrLossyRoundTrip) {
			t.Errorf("Tell(%#v) = %v, want ErrNotSerializable wrapping ErrLossyRoundTrip", msg, err)
		}
	}
	// What survives the copy goes through; times compare by instant.
	ok := []lossyCmd{boxed{V: "text"}, boxed{}, stamped{At: time.Now()}, hidden{}}
	for _, msg := range ok {
		if err := c.Tell(msg); err != nil {
			t.Errorf("Tell(%#v) = %v", msg, err)
		}
	}
	synctest.Wait()
	if got := seen.len(); got != len(ok) {
		t.Fatalf("the entity saw %d messages, want the %d accepted ones", got, len(ok))
	}
	if n := sys.DeadLetters(); n != 0 {
		t.Fatalf("%d dead letters for refused sends", n)
	}
}

// A reply the codec copies differently fails its Ask with the same error.
func TestForceSerializationRefusesLossyReplies(t *testing.T) {
	_, c, _ := lossySystem(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := entity.Ask(ctx, c, func(r entity.ReplyTo[hidden]) lossyCmd { return askHidden{ReplyTo: r} })
	if !errors.Is(err, entity.ErrLossyRoundTrip) {
		t.Fatalf("err = %v, want ErrLossyRoundTrip", err)
	}
}
