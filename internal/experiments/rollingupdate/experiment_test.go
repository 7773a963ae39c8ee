package rollingupdate_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/cluster/memberlist"
	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/internal/experiments/rollingupdate"
	"github.com/shoal-dev/shoal/internal/pgtest"
	"github.com/shoal-dev/shoal/node"
	"github.com/shoal-dev/shoal/sharding"
	"github.com/shoal-dev/shoal/sharding/allocation"
)

var pg = pgtest.New()

func TestMain(m *testing.M) { os.Exit(pg.Run(m)) }

// The experiment's entity answers a Ping at once and persists nothing, so
// that the latencies measure routing: shard homes, hand-offs and the
// coordinator.
type Command interface{ isCommand() }

type Ping struct{ ReplyTo entity.ReplyTo[int] }

func (Ping) isCommand() {}

var echoKey = entity.NewTypeKey[Command]("Echo")

func echo(entity.Context[Command]) entity.Behavior[Command] {
	return entity.Receive(func(ctx entity.Context[Command], c Command) entity.Behavior[Command] {
		if p, ok := c.(Ping); ok {
			_ = entity.Reply(ctx, p.ReplyTo, 1)
		}
		return entity.Same[Command]()
	})
}

// params are the experiment's knobs, from the environment. The defaults
// compress the proposal's schedule (events a minute apart, rebalance every
// 10 s) six-fold and five-fold so both strategies run in minutes;
// SHOAL_EXPERIMENT_STEP=60s SHOAL_EXPERIMENT_REBALANCE=10s
// SHOAL_EXPERIMENT_WARMUP=120s gives the proposal's timing.
type params struct {
	out        string
	step       time.Duration // between scheduled events
	warmup     time.Duration // steady load before the first event
	rebalance  time.Duration // the coordinator's rebalance interval
	rate       int           // asks per second
	entities   int
	shards     int
	strategies []string
}

func paramsFromEnv(t *testing.T) params {
	p := params{
		out: os.Getenv("SHOAL_EXPERIMENT_OUT"), step: 10 * time.Second, warmup: 20 * time.Second,
		rebalance: 2 * time.Second, rate: 200, entities: 3000, shards: 300,
		strategies: []string{"least-shard", "coordinator-avoidance"},
	}
	dur := func(name string, d *time.Duration) {
		if v := os.Getenv(name); v != "" {
			var err error
			if *d, err = time.ParseDuration(v); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		}
	}
	dur("SHOAL_EXPERIMENT_STEP", &p.step)
	dur("SHOAL_EXPERIMENT_WARMUP", &p.warmup)
	dur("SHOAL_EXPERIMENT_REBALANCE", &p.rebalance)
	if v := os.Getenv("SHOAL_EXPERIMENT_RATE"); v != "" {
		var err error
		if p.rate, err = strconv.Atoi(v); err != nil || p.rate <= 0 {
			t.Fatalf("SHOAL_EXPERIMENT_RATE %q: want a positive integer", v)
		}
	}
	if v := os.Getenv("SHOAL_EXPERIMENT_STRATEGIES"); v != "" {
		p.strategies = strings.Split(v, ",")
	}
	if p.out == "" {
		p.out = t.TempDir()
	}
	if err := os.MkdirAll(p.out, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func strategyNamed(name string) (allocation.Strategy, error) {
	switch name {
	case "least-shard":
		return allocation.NewLeastShard(allocation.LeastShardConfig{AbsoluteLimit: 30, RelativeLimit: 0.1}), nil
	case "coordinator-avoidance":
		return allocation.NewCoordinatorAvoidance(allocation.CoordinatorAvoidanceConfig{
			OldestExcluded: 1, MinAllocationNodes: 1, AbsoluteLimit: 30, RelativeLimit: 0.1}), nil
	}
	return nil, fmt.Errorf("unknown strategy %q (least-shard, coordinator-avoidance)", name)
}

// TestRollingUpdateExperiment runs the proposal's experiment once per
// strategy: 4 nodes (in this process, over real loopback sockets, with a
// Postgres in a container), 300 shards, a steady open-loop load of asks,
// then the rolling update. It writes, per strategy, the samples, the
// events and a PNG plot, and a table of every stop window to
// results.md in $SHOAL_EXPERIMENT_OUT. It asserts nothing about timings:
// it is a measurement.
func TestRollingUpdateExperiment(t *testing.T) {
	if os.Getenv("SHOAL_EXPERIMENT") != "1" {
		t.Skip("set SHOAL_EXPERIMENT=1 (or run scripts/rolling-update-experiment.sh)")
	}
	p := paramsFromEnv(t)
	var table strings.Builder
	fmt.Fprintf(&table, "step %v, warm-up %v, rebalance every %v, %d asks/s over %d entities, %d shards\n\n",
		p.step, p.warmup, p.rebalance, p.rate, p.entities, p.shards)
	table.WriteString("| strategy | window | requests | failed | p50 ms | p99 ms | max ms | shards on the stopped node | stop took | max ms, its shards | max ms, other shards |\n")
	table.WriteString("|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, name := range p.strategies {
		strategy, err := strategyNamed(name)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(name, func(t *testing.T) {
			r := runOnce(t, p, name, strategy)
			samples, events := r.rec.Results()
			if err := writeCSV(p.out, name, samples, events); err != nil {
				t.Fatal(err)
			}
			png := filepath.Join(p.out, name+"-latency.png")
			if err := rollingupdate.WritePNG(png, "Shoal rolling update, "+name+" strategy", samples, events); err != nil {
				t.Fatal(err)
			}
			for _, w := range rollingupdate.Windows(samples, events, r.end) {
				info, shards, split := r.stops[w.Label], "", " | "
				if info.moved != nil {
					shards = strconv.Itoa(len(info.moved))
					// Requests for the shards the stopping node handed off,
					// and for all the others: where the time went.
					its := rollingupdate.WindowWhere(w.Label, samples, w.From, w.To, func(s rollingupdate.Sample) bool { return info.moved[r.shardOf(s.Entity)] })
					others := rollingupdate.WindowWhere(w.Label, samples, w.From, w.To, func(s rollingupdate.Sample) bool { return !info.moved[r.shardOf(s.Entity)] })
					split = fmt.Sprintf("%.1f (%d req) | %.1f", ms(its.Max), its.Requests, ms(others.Max))
				}
				fmt.Fprintf(&table, "| %s | %s | %d | %d | %.1f | %.1f | %.1f | %s | %s | %s |\n", name, w.Label, w.Requests, w.Failed,
					ms(w.P50), ms(w.P99), ms(w.Max), shards, info.took, split)
			}
		})
	}
	if err := os.WriteFile(filepath.Join(p.out, "results.md"), []byte(table.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("results in %s:\n%s", p.out, table.String())
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// run is one strategy's run: its recording, when it ended, what each
// stop found, and the shard of an entity.
type run struct {
	rec     *rollingupdate.Recorder
	end     time.Duration
	stops   map[string]stopInfo
	shardOf func(entityID string) string
}

// stopInfo is the shards a stopping node hosted when its stop began, and
// how long its Shutdown took.
type stopInfo struct {
	moved map[string]bool
	took  string
}

// member is a running node and its region, and the asks in flight through it.
type member struct {
	name     string
	node     *node.Node
	region   *sharding.Region[Command]
	inFlight atomic.Int64
}

// knownHomes counts the shards of Command that have a home in m's view,
// as its admin API reports them.
func knownHomes(m *member) int {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := m.node.Sharding().TypeState(ctx, m.region.EntityRefFor("_").EntityType())
	if err != nil {
		return 0
	}
	n := 0
	for _, sh := range st.Shards {
		if !sh.Home.IsZero() {
			n++
		}
	}
	return n
}

// gateways are the members the client sends through, like a load balancer
// in front of the nodes: a node is taken out before it stops.
type gateways struct {
	mu   sync.Mutex
	list []*member
	next int
}

func (g *gateways) add(m *member) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.list = append(g.list, m)
}

func (g *gateways) remove(m *member) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, x := range g.list {
		if x == m {
			g.list = append(g.list[:i], g.list[i+1:]...)
			return
		}
	}
}

// pick returns the next gateway round-robin, with its in-flight count
// raised (the caller lowers it).
func (g *gateways) pick() *member {
	g.mu.Lock()
	defer g.mu.Unlock()
	m := g.list[g.next%len(g.list)]
	g.next++
	m.inFlight.Add(1)
	return m
}

func nodeTiming() memberlist.Timing {
	// As the node package's tests: fast gossip, a failure detector lenient
	// enough for a busy 2-core machine.
	t := memberlist.FastTiming()
	t.ProbeInterval, t.ProbeTimeout = time.Second, 500*time.Millisecond
	t.SuspicionMult, t.SuspicionMaxTimeoutMult = 4, 6
	t.TCPTimeout = 5 * time.Second
	t.ReconnectTimeout = 5 * time.Minute
	return t
}

func runOnce(t *testing.T, p params, name string, strategy allocation.Strategy) run {
	dsn := pg.MigratedDSN(t)
	logFile, err := os.Create(filepath.Join(p.out, name+"-nodes.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	logger := slog.New(slog.NewTextHandler(logFile, &slog.HandlerOptions{Level: slog.LevelInfo}))
	settings := sharding.Settings{
		NumberOfShards: p.shards, MinMembers: 4, RebalanceInterval: p.rebalance,
		PassivateIdleAfter: -1, Strategy: strategy,
	}
	var all []*member
	t.Cleanup(func() {
		for _, m := range all {
			m.node.Kill()
		}
	})
	start := func(id, version string, seeds []string) *member {
		t.Helper()
		cfg := node.DefaultConfig(id)
		cfg.PostgresDSN, cfg.Seeds, cfg.AppVersion = dsn, seeds, version
		cfg.Timing, cfg.Logger = nodeTiming(), logger.With("member", id)
		codec.MustRegister[Ping](cfg.Codec, "experiment.Ping")
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		n, err := node.Start(ctx, cfg)
		if err != nil {
			t.Fatalf("start %s: %v", id, err)
		}
		r, err := sharding.Init(n.Sharding(), sharding.Entity[Command]{Key: echoKey, Create: echo, Settings: settings})
		if err != nil {
			t.Fatalf("init %s: %v", id, err)
		}
		m := &member{name: id, node: n, region: r}
		all = append(all, m)
		return m
	}
	awaitReady := func(m *member) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for m.node.Ready() != nil {
			if time.Now().After(deadline) {
				t.Fatalf("%s not ready within a minute: %v", m.name, m.node.Ready())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	// The old cluster: old-4 first, so that it is the oldest (it hosts the
	// coordinator and stops last), as in the proposal's table.
	old := map[int]*member{4: start("old-4", "1.0.0", nil)}
	seeds := []string{old[4].node.GossipAddr()}
	for i := 1; i <= 3; i++ {
		old[i] = start(fmt.Sprintf("old-%d", i), "1.0.0", seeds)
	}
	gw := &gateways{}
	for i := 4; i >= 1; i-- {
		awaitReady(old[i])
		gw.add(old[i])
	}
	ids := make([]string, p.entities)
	for i := range ids {
		ids[i] = fmt.Sprintf("user-%d", i)
	}
	ask := func(ctx context.Context, m *member, id string) error {
		_, err := entity.Ask(ctx, m.region.EntityRefFor(id), func(to entity.ReplyTo[int]) Command { return Ping{ReplyTo: to} })
		return err
	}
	// Every entity once, so every shard is allocated; then every region
	// must know every home: the proposal's precondition.
	for i, id := range ids {
		m := gw.pick()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := ask(ctx, m, id)
		cancel()
		m.inFlight.Add(-1)
		if err != nil {
			t.Fatalf("warm-up ask %d (%s via %s): %v", i, id, m.name, err)
		}
	}
	deadline := time.Now().Add(time.Minute)
	for _, m := range old {
		for known := knownHomes(m); known < p.shards; known = knownHomes(m) {
			if time.Now().After(deadline) {
				t.Fatalf("%s knows %d of %d homes after a minute", m.name, known, p.shards)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	for i := 4; i >= 1; i-- {
		t.Logf("%s hosts %d shards", old[i].name, len(old[i].region.State().Shards))
	}

	// The load: an open loop at a fixed rate, so that a stall shows as
	// latency instead of slowing the client down.
	rec := rollingupdate.NewRecorder(time.Now())
	loadCtx, stopLoad := context.WithCancel(context.Background())
	var requests sync.WaitGroup
	loadDone := make(chan struct{})
	go func() {
		defer close(loadDone)
		tick := time.NewTicker(time.Second / time.Duration(p.rate))
		defer tick.Stop()
		for k := 0; ; k++ {
			select {
			case <-loadCtx.Done():
				return
			case <-tick.C:
			}
			m, id := gw.pick(), ids[(k*7919)%len(ids)]
			requests.Go(func() {
				defer m.inFlight.Add(-1)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				sent := time.Now()
				err := ask(ctx, m, id)
				rec.Request(id, sent, time.Now(), err != nil)
				if err != nil && !errors.Is(err, context.DeadlineExceeded) {
					logger.Warn("experiment: ask failed", "entity", id, "via", m.name, "err", err)
				}
			})
		}
	}()

	stops := map[string]stopInfo{}
	var newest []string
	at := func(k int) { // sleep until the k-th step of the schedule
		time.Sleep(time.Until(rec.Start().Add(p.warmup + time.Duration(k)*p.step)))
	}
	startNew := func(i int) {
		label := fmt.Sprintf("start new-%d", i)
		rec.Event(time.Now(), rollingupdate.Event{Label: label})
		live := seeds
		if len(newest) > 0 {
			live = newest
		}
		m := start(fmt.Sprintf("new-%d", i), "2.0.0", live)
		awaitReady(m)
		gw.add(m)
		newest = []string{m.node.GossipAddr()}
		rec.Event(time.Now(), rollingupdate.Event{Label: fmt.Sprintf("new-%d ready", i), Note: true})
	}
	stopOld := func(i int) {
		m := old[i]
		label := fmt.Sprintf("stop old-%d", i)
		if i == 4 {
			label += " (oldest)"
		}
		// Drained as a load balancer would: no new asks, and those in
		// flight through it finish (their replies come back to it).
		gw.remove(m)
		for d := time.Now().Add(5 * time.Second); m.inFlight.Load() > 0 && time.Now().Before(d); {
			time.Sleep(5 * time.Millisecond)
		}
		moved := map[string]bool{}
		for shard := range m.region.State().Shards {
			moved[shard] = true
		}
		began := time.Now()
		rec.Event(began, rollingupdate.Event{Label: label, Stop: true})
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err := m.node.Shutdown(ctx)
		cancel()
		took := time.Since(began)
		if err != nil {
			t.Errorf("%s shutdown: %v", m.name, err)
		}
		rec.Event(time.Now(), rollingupdate.Event{Label: fmt.Sprintf("old-%d stopped", i), Note: true})
		stops[label] = stopInfo{moved: moved, took: took.Round(time.Millisecond).String()}
	}
	for i := 1; i <= 3; i++ {
		at(2 * (i - 1))
		startNew(i)
		at(2*(i-1) + 1)
		stopOld(i)
	}
	at(6)
	startNew(4)
	at(8) // the proposal waits two steps before stopping the oldest
	stopOld(4)
	at(9)
	stopLoad()
	<-loadDone // no request starts after this: Wait may begin
	requests.Wait()
	end := rec.Since(time.Now())
	for _, m := range all[4:] {
		t.Logf("%s hosts %d shards at the end", m.name, len(m.region.State().Shards))
	}
	return run{rec: rec, end: end, stops: stops, shardOf: old[4].region.ShardID}
}

// writeCSV writes the samples and the events of a run as CSV files.
func writeCSV(dir, name string, samples []rollingupdate.Sample, events []rollingupdate.Event) error {
	var b strings.Builder
	b.WriteString("sent_ms,latency_ms,failed,entity\n")
	for _, s := range samples {
		fmt.Fprintf(&b, "%.3f,%.3f,%t,%s\n", ms(s.At), ms(s.Latency), s.Failed, s.Entity)
	}
	if err := os.WriteFile(filepath.Join(dir, name+"-samples.csv"), []byte(b.String()), 0o644); err != nil {
		return err
	}
	b.Reset()
	b.WriteString("at_ms,event,stop,note\n")
	for _, e := range events {
		fmt.Fprintf(&b, "%.3f,%q,%t,%t\n", ms(e.At), e.Label, e.Stop, e.Note)
	}
	return os.WriteFile(filepath.Join(dir, name+"-events.csv"), []byte(b.String()), 0o644)
}
