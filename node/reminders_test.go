package node_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/eventsourced"
	"github.com/shoal-dev/shoal/node"
	"github.com/shoal-dev/shoal/sharding"
	"github.com/shoal-dev/shoal/timers/reminder"
)

// The deadline entity sets a reminder and records where each delivery of
// it was handled.
type deadlineCmd interface{ isDeadlineCmd() }

type (
	setDeadline struct {
		After   time.Duration
		ReplyTo entity.ReplyTo[int]
	}
	deadlineDue struct {
		reminder.Delivery
	}
	readDeadline struct{ ReplyTo entity.ReplyTo[[]string] }
)

func (setDeadline) isDeadlineCmd()  {}
func (deadlineDue) isDeadlineCmd()  {}
func (readDeadline) isDeadlineCmd() {}

type deadlineHit struct{ Node string }

var deadlineKey = entity.NewTypeKey[deadlineCmd]("Deadline")

func registerDeadline(reg *codec.Registry) {
	codec.MustRegister[setDeadline](reg, "test.SetDeadline")
	codec.MustRegister[deadlineDue](reg, "test.DeadlineDue")
	codec.MustRegister[readDeadline](reg, "test.ReadDeadline")
	codec.MustRegister[deadlineHit](reg, "test.DeadlineHit")
}

func deadlineEntity(nodeID string) func(entity.Context[deadlineCmd]) entity.Behavior[deadlineCmd] {
	return func(ec entity.Context[deadlineCmd]) entity.Behavior[deadlineCmd] {
		return eventsourced.New(eventsourced.Config[deadlineCmd, deadlineHit, []string]{
			PersistenceID: eventsourced.PersistenceIDOf(deadlineKey, ec.EntityID()),
			OnCommand: func(ctx eventsourced.CommandContext[deadlineCmd, deadlineHit, []string], s []string, c deadlineCmd) eventsourced.Effect[deadlineHit, []string] {
				switch c := c.(type) {
				case setDeadline:
					return ctx.None().WithReminders(ctx.RemindAfter("deadline", c.After, deadlineDue{})).ThenReply(eventsourced.To(c.ReplyTo, 0))
				case deadlineDue:
					return ctx.Persist(deadlineHit{Node: nodeID})
				case readDeadline:
					return ctx.Reply(eventsourced.To(c.ReplyTo, slices.Clone(s)))
				}
				return ctx.Unhandled()
			},
			OnEvent: func(_ eventsourced.Context[deadlineCmd], s []string, e deadlineHit) []string {
				return append(slices.Clone(s), e.Node)
			},
		})
	}
}

// A reminder due while the node hosting its shard is dead (killed, its
// lease left to expire) fires on the shard's next home, once, and is
// acknowledged there: real Postgres, real sockets.
func TestReminderOfAKilledNodeFiresOnTheNextHome(t *testing.T) {
	dsn := pg.MigratedDSN(t)
	withDeadline := func(c *node.Config) { registerDeadline(c.Codec) }
	a := startNode(t, dsn, "a", nil, withDeadline)
	b := startNode(t, dsn, "b", []string{a.GossipAddr()}, withDeadline)
	nodes := []*testNode{a, b}
	awaitUp(t, nodes)
	regions := map[string]*sharding.Region[deadlineCmd]{}
	for _, n := range nodes {
		r, err := sharding.Init(n.Sharding(), sharding.Entity[deadlineCmd]{
			Key: deadlineKey, Create: deadlineEntity(n.Self().Node), Settings: sharding.Settings{NumberOfShards: 10},
		})
		if err != nil {
			t.Fatal(err)
		}
		regions[n.Self().Node] = r
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// Start entities until one lives on b.
	var onB string
	eventually(t, "an entity on b", func() error {
		for i := range 20 {
			id := fmt.Sprintf("d%d", i)
			if _, err := entity.Ask(ctx, regions["a"].EntityRefFor(id), func(to entity.ReplyTo[[]string]) deadlineCmd { return readDeadline{ReplyTo: to} }); err != nil {
				return err
			}
			if slices.Contains(regions["b"].HostedShards(), regions["b"].ShardID(id)) {
				onB = id
				return nil
			}
		}
		return fmt.Errorf("none of 20 entities on b")
	})
	if _, err := entity.Ask(ctx, regions["a"].EntityRefFor(onB), func(to entity.ReplyTo[int]) deadlineCmd {
		return setDeadline{After: 2 * time.Second, ReplyTo: to}
	}); err != nil {
		t.Fatal(err)
	}
	b.Kill()
	var hits []string
	eventually(t, "the reminder fired on a", func() error {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		var err error
		hits, err = entity.Ask(ctx, regions["a"].EntityRefFor(onB), func(to entity.ReplyTo[[]string]) deadlineCmd { return readDeadline{ReplyTo: to} })
		if err != nil {
			return err
		}
		if len(hits) == 0 {
			return fmt.Errorf("not fired yet")
		}
		return nil
	})
	eventually(t, "the reminder acknowledged", func() error {
		if r, ok, err := a.Reminders().Get(ctx, reminder.Key{EntityType: "Deadline", EntityID: onB, Name: "deadline"}); err != nil || ok {
			return fmt.Errorf("still stored: %+v (%v)", r, err)
		}
		return nil
	})
	hits, err := entity.Ask(ctx, regions["a"].EntityRefFor(onB), func(to entity.ReplyTo[[]string]) deadlineCmd { return readDeadline{ReplyTo: to} })
	if err != nil || fmt.Sprint(hits) != "[a]" {
		t.Fatalf("deliveries handled %v (%v), want one, on a", hits, err)
	}
	if st := a.ReminderFiring()["Deadline"]; st.Delivered == 0 {
		t.Fatalf("a's firing stats %+v, want a delivery", st)
	}
}
