package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/eventsourced"
	"github.com/shoal-dev/shoal/internal/pgtest"
	"github.com/shoal-dev/shoal/node"
	"github.com/shoal-dev/shoal/node/admin"
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
			if _, hosted := regions["b"].State().Shards[regions["b"].ShardID(id)]; hosted {
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

// A memory-mode node fires reminders too, and its admin API lists them
// per type and shard and shows one.
func TestMemoryModeFiresRemindersAndTheAdminAPIShowsThem(t *testing.T) {
	withDeadline := func(c *node.Config) {
		c.Memory = node.NewMemoryStores()
		c.AdminAddr = "127.0.0.1:0"
		registerDeadline(c.Codec)
	}
	a := startNodeWith(t, "", "mem-r", nil, sharding.Settings{NumberOfShards: 10}, withDeadline)
	awaitUp(t, []*testNode{a})
	r, err := sharding.Init(a.Sharding(), sharding.Entity[deadlineCmd]{Key: deadlineKey, Create: deadlineEntity("mem-r")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for id, after := range map[string]time.Duration{"later": time.Hour, "soon": 100 * time.Millisecond} {
		if _, err := entity.Ask(ctx, r.EntityRefFor(id), func(to entity.ReplyTo[int]) deadlineCmd { return setDeadline{After: after, ReplyTo: to} }); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "soon fired", func() error {
		hits, err := entity.Ask(ctx, r.EntityRefFor("soon"), func(to entity.ReplyTo[[]string]) deadlineCmd { return readDeadline{ReplyTo: to} })
		if err == nil && len(hits) == 0 {
			err = fmt.Errorf("not yet")
		}
		return err
	})
	var list admin.ReminderList
	getJSON(t, "http://"+a.AdminAddr()+"/admin/v1/reminders", http.StatusOK, &list)
	var deadline *admin.ReminderType
	for i := range list.Types {
		if list.Types[i].Type == "Deadline" {
			deadline = &list.Types[i]
		}
	}
	if deadline == nil || len(deadline.Shards) != 1 || deadline.Shards[0].Stored != 1 || deadline.Firing.Delivered < 1 {
		t.Fatalf("reminders listed %+v, want Deadline with one stored (later) and a delivery", list)
	}
	var one admin.Reminder
	getJSON(t, "http://"+a.AdminAddr()+"/admin/v1/reminders/Deadline/later/deadline", http.StatusOK, &one)
	if one.Command != "test.DeadlineDue" || one.Shard != deadline.Shards[0].Shard || one.Generation == 0 {
		t.Fatalf("one reminder: %+v", one)
	}
	getJSON(t, "http://"+a.AdminAddr()+"/admin/v1/reminders/Deadline/soon/deadline", http.StatusNotFound, nil)
}

func getJSON(t *testing.T, url string, status int, into any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != status {
		t.Fatalf("GET %s: %s, want %d", url, resp.Status, status)
	}
	if into != nil {
		if err := json.NewDecoder(resp.Body).Decode(into); err != nil {
			t.Fatal(err)
		}
	}
}

// Postgres restarts while reminders are due: the node, unable to renew its
// lease, fences itself and fires nothing; once the database is back, the
// node started in its place (a supervisor's restart) fires every reminder,
// once, and none is left stored.
func TestRemindersSurviveAPostgresRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("restarts a container")
	}
	srv := pgtest.Start(t) // its own container: the others' keep running
	dsn := srv.MigratedDSN(t)
	withDeadline := func(c *node.Config) { registerDeadline(c.Codec) }
	a := startNode(t, dsn, "pg-a", nil, withDeadline)
	awaitUp(t, []*testNode{a})
	ra, err := sharding.Init(a.Sharding(), sharding.Entity[deadlineCmd]{Key: deadlineKey, Create: deadlineEntity("pg-a")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ids := []string{"r0", "r1", "r2", "r3", "r4"}
	for _, id := range ids {
		if _, err := entity.Ask(ctx, ra.EntityRefFor(id), func(to entity.ReplyTo[int]) deadlineCmd { return setDeadline{After: 3 * time.Second, ReplyTo: to} }); err != nil {
			t.Fatal(err)
		}
	}
	c := srv.Container(t)
	if err := c.Stop(ctx, nil); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a fenced itself", func() error {
		if err := a.Alive(); !errors.Is(err, node.ErrFenced) {
			return fmt.Errorf("Alive: %v", err)
		}
		return nil
	})
	time.Sleep(3 * time.Second) // the reminders fall due while the database is down
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	srv.WaitReady(t, ctx)
	b := startNode(t, dsn, "pg-b", nil, withDeadline)
	awaitUp(t, []*testNode{b})
	rb, err := sharding.Init(b.Sharding(), sharding.Entity[deadlineCmd]{Key: deadlineKey, Create: deadlineEntity("pg-b")})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		eventually(t, "reminder of "+id+" handled on b", func() error {
			ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			hits, err := entity.Ask(ctx, rb.EntityRefFor(id), func(to entity.ReplyTo[[]string]) deadlineCmd { return readDeadline{ReplyTo: to} })
			switch {
			case err != nil:
				return err
			case fmt.Sprint(hits) != "[pg-b]":
				return fmt.Errorf("deliveries handled %v, want one on pg-b", hits)
			}
			return nil
		})
	}
	eventually(t, "no reminder left", func() error {
		st, err := b.Reminders().Stats(ctx, "Deadline", 0)
		if err != nil || len(st) != 0 {
			return fmt.Errorf("stored %v (%v)", st, err)
		}
		return nil
	})
}
