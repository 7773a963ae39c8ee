package reminders_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	shoalcluster "github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/eventsourced"
	"github.com/shoal-dev/shoal/internal/metrics"
	"github.com/shoal-dev/shoal/journal/memory"
	"github.com/shoal-dev/shoal/sharding"
	"github.com/shoal-dev/shoal/sharding/internal/bridge"
	"github.com/shoal-dev/shoal/sharding/reminders"
	"github.com/shoal-dev/shoal/timers/reminder"
	reminderstore "github.com/shoal-dev/shoal/timers/reminder/memory"
)

// The alarm entity sets reminders and records, per node, the deliveries it
// handled.
type alarmCmd interface{ isAlarmCmd() }

type (
	arm struct {
		Name    string
		After   time.Duration
		Every   time.Duration
		ReplyTo entity.ReplyTo[int]
	}
	ring struct {
		reminder.Delivery
		Name string
	}
	sleep struct{}
	count struct{ ReplyTo entity.ReplyTo[int] }
)

func (arm) isAlarmCmd()   {}
func (ring) isAlarmCmd()  {}
func (sleep) isAlarmCmd() {}
func (count) isAlarmCmd() {}

type (
	armed struct{ Name string }
	rang  struct{ Name string }
)

var alarmKey = entity.NewTypeKey[alarmCmd]("Alarm")

func alarmCodec() *codec.Registry {
	r := codec.NewRegistry()
	codec.MustRegister[arm](r, "arm")
	codec.MustRegister[ring](r, "ring")
	codec.MustRegister[sleep](r, "sleep")
	codec.MustRegister[count](r, "count")
	codec.MustRegister[armed](r, "armed")
	codec.MustRegister[rang](r, "rang")
	codec.MustRegister[setPing](r, "setPing")
	codec.MustRegister[pong](r, "pong")
	codec.MustRegister[silentPong](r, "silentPong")
	codec.MustRegister[pingSet](r, "pingSet")
	return r
}

// rings records the deliveries handled: node, entity, generation.
type rings struct {
	mu  sync.Mutex
	got []string
}

func (r *rings) add(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, s)
}

func (r *rings) list() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

func alarmEntity(rec *rings) func(ctx entity.Context[alarmCmd]) entity.Behavior[alarmCmd] {
	return func(ctx entity.Context[alarmCmd]) entity.Behavior[alarmCmd] {
		type E = any
		node := ctx.System().NodeID()
		return eventsourced.New(eventsourced.Config[alarmCmd, E, int]{
			PersistenceID: eventsourced.PersistenceIDOf(alarmKey, ctx.EntityID()),
			OnCommand: func(ctx eventsourced.CommandContext[alarmCmd, E, int], n int, c alarmCmd) eventsourced.Effect[E, int] {
				switch c := c.(type) {
				case arm:
					r := ctx.RemindAfter(c.Name, c.After, ring{Name: c.Name})
					if c.Every > 0 {
						r = ctx.RemindEvery(c.Name, c.After, c.Every, ring{Name: c.Name})
					}
					return ctx.Persist(armed{Name: c.Name}).WithReminders(r).ThenReply(eventsourced.To(c.ReplyTo, n))
				case ring:
					id := ctx.EntityID()
					return ctx.Persist(rang{Name: c.Name}).ThenRun(func(int) { rec.add(node + ":" + id + ":" + c.Name) })
				case sleep:
					ctx.Passivate()
					return ctx.None()
				case count:
					return ctx.Reply(eventsourced.To(c.ReplyTo, n))
				}
				return ctx.Unhandled()
			},
			OnEvent: func(_ eventsourced.Context[alarmCmd], n int, e E) int {
				if _, ok := e.(rang); ok {
					return n + 1
				}
				return n
			},
		})
	}
}

// cluster is nodes in one process sharing a memory journal and reminder
// store, as the nodes of a cluster share Postgres.
type cluster struct {
	t       *testing.T
	members *sharding.InProcessCluster
	systems map[string]*entity.System
	store   *reminderstore.Store
	journal *memory.Journal
	rec     *rings
	holds   atomic.Bool
	metrics *prometheus.Registry

	nodes   map[string]*sharding.Sharding
	regions map[string]*sharding.Region[alarmCmd]
	firers  map[string]*reminders.Service
	pingers map[string]*sharding.Region[pingCmd]
}

func newCluster(t *testing.T) *cluster {
	store := reminderstore.New()
	return restarted(t, store, memory.New(memory.WithSideStore(store)))
}

// restarted is a new cluster on the stores of a former one, as a cluster
// restarted whole finds its database.
func restarted(t *testing.T, store *reminderstore.Store, j *memory.Journal) *cluster {
	c := &cluster{t: t, members: sharding.NewInProcessCluster(), systems: map[string]*entity.System{}, store: store, journal: j,
		rec: &rings{}, metrics: prometheus.NewRegistry(), nodes: map[string]*sharding.Sharding{}, regions: map[string]*sharding.Region[alarmCmd]{},
		firers: map[string]*reminders.Service{}, pingers: map[string]*sharding.Region[pingCmd]{}}
	c.holds.Store(true)
	return c
}

func (c *cluster) join(name string) {
	c.t.Helper()
	sys, err := entity.NewSystem(entity.Config{NodeID: name, Metrics: c.metrics, Codec: alarmCodec(), ForceSerialization: true,
		Journal: c.journal, Reminders: c.store, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		c.t.Fatal(err)
	}
	c.systems[name] = sys
	s, err := c.members.Join(sys)
	if err != nil {
		c.t.Fatal(err)
	}
	r, err := sharding.Init(s, sharding.Entity[alarmCmd]{Key: alarmKey, Create: alarmEntity(c.rec),
		Settings: sharding.Settings{NumberOfShards: 8, PassivateIdleAfter: -1}})
	if err != nil {
		c.t.Fatal(err)
	}
	p, err := sharding.Init(s, sharding.Entity[pingCmd]{Key: pingKey, Create: pingEntity(c.rec), Settings: sharding.Settings{NumberOfShards: 4}})
	if err != nil {
		c.t.Fatal(err)
	}
	f, err := reminders.StartAll(s, reminders.Config{Holds: c.holds.Load, Metrics: metrics.WithNode(c.metrics, name), Window: time.Minute, RedeliverAfter: 10 * time.Second})
	if err != nil {
		c.t.Fatal(err)
	}
	c.nodes[name], c.regions[name], c.firers[name], c.pingers[name] = s, r, f, p
}

// leave stops a node gracefully: its shards move to the others.
func (c *cluster) leave(name string) {
	c.t.Helper()
	c.firers[name].Stop()
	if err := c.nodes[name].Shutdown(context.Background()); err != nil {
		c.t.Fatalf("%s left with %v", name, err)
	}
	c.members.Remove(shoalcluster.UniqueAddress{Node: name, Incarnation: c.systems[name].Incarnation()})
	delete(c.nodes, name)
	delete(c.firers, name)
	delete(c.regions, name)
	delete(c.pingers, name)
}

// crash stops a node at once, as a crash would, and drops it from the
// membership (in a cluster with leases: once its lease expired).
func (c *cluster) crash(name string) {
	c.t.Helper()
	c.firers[name].Stop()
	c.nodes[name].Terminate()
	c.members.Remove(shoalcluster.UniqueAddress{Node: name, Incarnation: c.systems[name].Incarnation()})
	delete(c.nodes, name)
	delete(c.firers, name)
	delete(c.regions, name)
	delete(c.pingers, name)
}

// stop crashes what is left, so the bubble ends with no goroutine left.
func (c *cluster) stop() {
	for name := range c.nodes {
		c.firers[name].Stop()
		c.nodes[name].Terminate()
	}
	time.Sleep(time.Second)
	synctest.Wait()
}

func (c *cluster) ask(node, id string, build func(entity.ReplyTo[int]) alarmCmd) int {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := entity.Ask(ctx, c.regions[node].EntityRefFor(id), build)
	if err != nil {
		c.t.Fatalf("ask %s via %s: %v", id, node, err)
	}
	return n
}

// homeOf is the node hosting id's shard.
func (c *cluster) homeOf(id string) string {
	for name, r := range c.regions {
		if slices.Contains(bridge.RegionOf(r).HostedShards(), r.ShardID(id)) {
			return name
		}
	}
	return ""
}

func (c *cluster) stored(id, name string) (reminder.Reminder, bool) {
	r, ok, err := c.store.Get(context.Background(), reminder.Key{EntityType: "Alarm", EntityID: id, Name: name})
	if err != nil {
		c.t.Fatal(err)
	}
	return r, ok
}

// waitFor sleeps, in the bubble's time, until cond holds.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", within, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestAReminderWakesItsPassivatedEntity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		defer c.stop()
		c.join("a")
		c.ask("a", "e1", func(r entity.ReplyTo[int]) alarmCmd { return arm{Name: "wake", After: 10 * time.Minute, ReplyTo: r} })
		_ = c.regions["a"].EntityRefFor("e1").Tell(sleep{})
		waitFor(t, 10*time.Second, "the entity passivated", func() bool {
			for _, ids := range c.regions["a"].State().Shards {
				if len(ids) > 0 {
					return false
				}
			}
			return true
		})
		time.Sleep(9 * time.Minute)
		if got := c.rec.list(); len(got) != 0 {
			t.Fatalf("fired before it was due: %v", got)
		}
		waitFor(t, 2*time.Minute, "the reminder fired", func() bool { return len(c.rec.list()) > 0 })
		synctest.Wait()
		if got := c.rec.list(); fmt.Sprint(got) != "[a:e1:wake]" {
			t.Fatalf("deliveries %v, want one, on a", got)
		}
		if r, ok := c.stored("e1", "wake"); ok {
			t.Fatalf("handled one-shot reminder still stored: %+v", r)
		}
		if n := c.ask("a", "e1", func(r entity.ReplyTo[int]) alarmCmd { return count{ReplyTo: r} }); n != 1 {
			t.Fatalf("the woken entity counts %d rings, want 1", n)
		}
		// Handled and acknowledged: it does not fire again.
		time.Sleep(5 * time.Minute)
		if got := c.rec.list(); len(got) != 1 {
			t.Fatalf("deliveries %v after the acknowledgement, want one", got)
		}
	})
}

func TestAReminderFiresOnTheShardsNextHomeAfterItsNodeLeaves(t *testing.T) {
	testNextHome(t, (*cluster).leave)
}

func TestAReminderFiresOnTheShardsNextHomeAfterItsNodeCrashed(t *testing.T) {
	testNextHome(t, (*cluster).crash)
}

func testNextHome(t *testing.T, stop func(*cluster, string)) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		defer c.stop()
		c.join("a")
		c.join("b")
		// An entity on each node, so that one of them is on the leaver.
		ids := []string{}
		for i := range 16 {
			ids = append(ids, fmt.Sprintf("e%d", i))
		}
		waitFor(t, time.Minute, "shards on both nodes", func() bool {
			for _, id := range ids {
				c.ask("a", id, func(r entity.ReplyTo[int]) alarmCmd { return count{ReplyTo: r} })
			}
			return len(bridge.RegionOf(c.regions["a"]).HostedShards()) > 0 && len(bridge.RegionOf(c.regions["b"]).HostedShards()) > 0
		})
		var onB string
		for _, id := range ids {
			if c.homeOf(id) == "b" {
				onB = id
				break
			}
		}
		if onB == "" {
			t.Fatal("no entity on b")
		}
		c.ask("a", onB, func(r entity.ReplyTo[int]) alarmCmd { return arm{Name: "wake", After: 5 * time.Minute, ReplyTo: r} })
		stop(c, "b")
		waitFor(t, 10*time.Minute, "the reminder fired on a", func() bool { return len(c.rec.list()) > 0 })
		synctest.Wait()
		if got, want := fmt.Sprint(c.rec.list()), "[a:"+onB+":wake]"; got != want {
			t.Fatalf("deliveries %v, want %v", got, want)
		}
		if r, ok := c.stored(onB, "wake"); ok {
			t.Fatalf("handled reminder still stored: %+v", r)
		}
	})
}

func TestNothingFiresWhileTheLeaseIsNotHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		defer c.stop()
		c.join("a")
		c.ask("a", "e1", func(r entity.ReplyTo[int]) alarmCmd { return arm{Name: "wake", After: time.Minute, ReplyTo: r} })
		c.holds.Store(false)
		time.Sleep(10 * time.Minute)
		if got := c.rec.list(); len(got) != 0 {
			t.Fatalf("fired while the node's lease was not held: %v", got)
		}
		if st := c.firers["a"].Stats()["Alarm"]; st.Held != 0 {
			t.Fatalf("holds %d reminders without its lease, want none", st.Held)
		}
		c.holds.Store(true)
		waitFor(t, time.Minute, "the reminder fired once the lease was held", func() bool { return len(c.rec.list()) > 0 })
	})
}

// A reminder set for "in a minute" is due a minute after its commit, even
// when the Firer learns of the commit much later (here: it did not hold its
// lease then): the due time is the store's, not the Firer's moment.
func TestARelativeDueCountsFromItsCommit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		defer c.stop()
		c.join("a")
		c.holds.Store(false)
		synctest.Wait()
		c.ask("a", "e1", func(r entity.ReplyTo[int]) alarmCmd { return arm{Name: "wake", After: time.Minute, ReplyTo: r} })
		time.Sleep(10 * time.Minute)
		c.holds.Store(true)
		waitFor(t, time.Second, "the reminder, due nine minutes ago, fired once the lease was held", func() bool { return len(c.rec.list()) > 0 })
	})
}

// A periodic reminder fires every period; after the node was down for
// several periods it fires once for the ticks it missed, then goes on.
func TestAPeriodicReminderFiresOnceForMissedTicks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		defer c.stop()
		c.join("a")
		c.ask("a", "e1", func(r entity.ReplyTo[int]) alarmCmd {
			return arm{Name: "tick", After: time.Minute, Every: time.Minute, ReplyTo: r}
		})
		time.Sleep(3*time.Minute + 30*time.Second)
		synctest.Wait()
		if got := len(c.rec.list()); got != 3 {
			t.Fatalf("%d ticks in 3.5 minutes, want 3", got)
		}
		// Down for five periods: nothing fires.
		c.holds.Store(false)
		time.Sleep(5 * time.Minute)
		c.holds.Store(true) // at 8:30
		time.Sleep(20 * time.Second)
		synctest.Wait()
		if got := len(c.rec.list()); got != 4 {
			t.Fatalf("%d ticks after the downtime, want one more (4)", got)
		}
		// Then on the reminder's own schedule: 9:00, 10:00.
		time.Sleep(time.Minute + 20*time.Second)
		synctest.Wait()
		if got := len(c.rec.list()); got != 6 {
			t.Fatalf("%d ticks by 10:10, want 6", got)
		}
	})
}

// The pinger is a plain entity: it sets its reminder and acknowledges its
// deliveries with a reminders.Handle, off its handler.
type pingCmd interface{ isPingCmd() }

type (
	setPing struct {
		Silent  bool // the reminder delivers silentPong
		ReplyTo entity.ReplyTo[int]
	}
	pong struct{ reminder.Delivery }
	// silentPong is handled and never acknowledged.
	silentPong struct{ reminder.Delivery }
	pingSet    struct {
		Err     string
		ReplyTo entity.ReplyTo[int]
	}
)

func (setPing) isPingCmd()    {}
func (pong) isPingCmd()       {}
func (silentPong) isPingCmd() {}
func (pingSet) isPingCmd()    {}

var pingKey = entity.NewTypeKey[pingCmd]("Pinger")

func pingEntity(rec *rings) func(ctx entity.Context[pingCmd]) entity.Behavior[pingCmd] {
	return func(ctx entity.Context[pingCmd]) entity.Behavior[pingCmd] {
		return entity.Receive(func(ctx entity.Context[pingCmd], c pingCmd) entity.Behavior[pingCmd] {
			h, err := reminders.For(ctx)
			if err != nil {
				panic(err)
			}
			switch c := c.(type) {
			case setPing:
				ctx.PipeToSelf(func(bg context.Context) pingCmd {
					err := h.RemindEvery(bg, "ping", time.Minute, time.Minute, pong{})
					if c.Silent {
						err = h.RemindAfter(bg, "ping", time.Minute, silentPong{})
					}
					msg := ""
					if err != nil {
						msg = err.Error()
					}
					return pingSet{Err: msg, ReplyTo: c.ReplyTo}
				})
			case pingSet:
				if c.Err != "" {
					panic(c.Err)
				}
				_ = entity.Reply(ctx.System(), c.ReplyTo, 0)
			case silentPong:
				rec.add(ctx.System().NodeID() + ":" + ctx.EntityID() + ":silent")
			case pong:
				rec.add(ctx.System().NodeID() + ":" + ctx.EntityID() + ":pong")
				ctx.PipeToSelf(func(bg context.Context) pingCmd {
					if err := h.Acknowledge(bg, c.Delivery); err != nil {
						panic(err)
					}
					return nil
				})
			}
			return entity.Same[pingCmd]()
		})
	}
}

func TestAPlainEntitySetsAndAcknowledgesItsReminderDirectly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		defer c.stop()
		c.join("a")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := entity.Ask(ctx, c.pingers["a"].EntityRefFor("p1"), func(r entity.ReplyTo[int]) pingCmd { return setPing{ReplyTo: r} }); err != nil {
			t.Fatal(err)
		}
		r, ok, _ := c.store.Get(context.Background(), reminder.Key{EntityType: "Pinger", EntityID: "p1", Name: "ping"})
		if !ok || r.Period != time.Minute {
			t.Fatalf("stored %+v %v, want the periodic ping", r, ok)
		}
		time.Sleep(3*time.Minute + 30*time.Second)
		synctest.Wait()
		if got := fmt.Sprint(c.rec.list()); got != "[a:p1:pong a:p1:pong a:p1:pong]" {
			t.Fatalf("deliveries %s, want three pongs (each acknowledged, so none twice)", got)
		}
	})
}

// A delivery nobody acknowledges is sent again every RedeliverAfter, and
// shows as due, then late, in the metrics.
func TestAnUnacknowledgedDeliveryIsRedeliveredAndLate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		defer c.stop()
		c.join("a")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := entity.Ask(ctx, c.pingers["a"].EntityRefFor("p1"), func(r entity.ReplyTo[int]) pingCmd { return setPing{Silent: true, ReplyTo: r} }); err != nil {
			t.Fatal(err)
		}
		gauge := func(name string) float64 {
			return sumOf(t, c.metrics, name, "Pinger")
		}
		time.Sleep(time.Minute + 5*time.Second)
		synctest.Wait()
		if got := len(c.rec.list()); got != 1 {
			t.Fatalf("%d deliveries 5 s after due, want 1", got)
		}
		if d, l := gauge("shoal_reminders_due"), gauge("shoal_reminders_late"); d != 1 || l != 0 {
			t.Fatalf("due %v late %v 5 s after due, want 1 and 0", d, l)
		}
		time.Sleep(20 * time.Second) // two redeliveries
		synctest.Wait()
		if got := len(c.rec.list()); got != 3 {
			t.Fatalf("%d deliveries 25 s after due, want 3 (every RedeliverAfter until acknowledged)", got)
		}
		if l := gauge("shoal_reminders_late"); l != 1 {
			t.Fatalf("late %v 25 s after due, want 1", l)
		}
		if d := gauge("shoal_reminders_delivered_total"); d != 3 {
			t.Fatalf("delivered_total %v, want 3", d)
		}
	})
}

// sumOf sums the series of name for entity type typ (over shards).
func sumOf(t *testing.T, reg *prometheus.Registry, name, typ string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "type" && l.GetValue() == typ {
					sum += m.GetGauge().GetValue() + m.GetCounter().GetValue()
				}
			}
		}
	}
	return sum
}

// After the whole cluster stopped, the reminders of shards nobody asks for
// fire: a node starts an entity of each shard with due reminders, which
// places the shard, and its home fires them.
func TestRemindersFireAfterAFullClusterRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		c.join("a")
		c.ask("a", "e1", func(r entity.ReplyTo[int]) alarmCmd { return arm{Name: "wake", After: 5 * time.Minute, ReplyTo: r} })
		c.crash("a")
		c.stop()
		time.Sleep(10 * time.Minute) // everything down past the due time

		c2 := restarted(t, c.store, c.journal)
		c2.rec = c.rec
		defer c2.stop()
		c2.join("b")
		waitFor(t, time.Minute, "the reminder fired after the restart", func() bool { return len(c.rec.list()) > 0 })
		synctest.Wait()
		if got := fmt.Sprint(c.rec.list()); got != "[b:e1:wake]" {
			t.Fatalf("deliveries %s, want one on b", got)
		}
		if r, ok := c2.stored("e1", "wake"); ok {
			t.Fatalf("handled reminder still stored: %+v", r)
		}
	})
}

// Due times are on the store's clock (the database's): a node whose clock
// is an hour behind fires a reminder when it is due, not an hour late.
func TestFiringFollowsTheStoresClockNotTheNodes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := reminderstore.New(reminderstore.WithClock(func() time.Time { return time.Now().Add(time.Hour) }))
		c := restarted(t, store, memory.New(memory.WithSideStore(store)))
		defer c.stop()
		c.join("a")
		c.ask("a", "e1", func(r entity.ReplyTo[int]) alarmCmd { return arm{Name: "wake", After: 5 * time.Minute, ReplyTo: r} })
		r, _ := c.stored("e1", "wake")
		if want := time.Now().Add(time.Hour + 5*time.Minute); !r.Due.Equal(want) {
			t.Fatalf("due %v, want %v: five minutes on the store's clock", r.Due, want)
		}
		time.Sleep(4 * time.Minute)
		if got := c.rec.list(); len(got) != 0 {
			t.Fatalf("fired a minute early: %v", got)
		}
		time.Sleep(90 * time.Second)
		synctest.Wait()
		if got := fmt.Sprint(c.rec.list()); got != "[a:e1:wake]" {
			t.Fatalf("deliveries %s 30 s after due, want one", got)
		}
	})
}
