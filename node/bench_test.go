package node_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/cluster/lease"
	"github.com/shoal-dev/shoal/cluster/memberlist"
	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/node"
	"github.com/shoal-dev/shoal/sharding"
)

// Ping is answered at once by an echo entity, which persists nothing.
type Ping struct{ ReplyTo entity.ReplyTo[int] }

func (Ping) isCommand() {}

// Count is told, not asked: the echo entity counts it.
type Count struct{}

func (Count) isCommand() {}

var echoKey = entity.NewTypeKey[Command]("Echo")

// newEcho returns the echo entity: it answers Pings and adds each Count
// to counted.
func newEcho(counted *atomic.Int64) func(entity.Context[Command]) entity.Behavior[Command] {
	return func(entity.Context[Command]) entity.Behavior[Command] {
		return entity.Receive(func(ctx entity.Context[Command], c Command) entity.Behavior[Command] {
			switch c := c.(type) {
			case Ping:
				_ = entity.Reply(ctx, c.ReplyTo, 1)
			case Count:
				counted.Add(1)
			}
			return entity.Same[Command]()
		})
	}
}

func withEcho(c *node.Config) {
	codec.MustRegister[Ping](c.Codec, "test.Ping")
	codec.MustRegister[Count](c.Codec, "test.Count")
}

// echoCluster is nodes hosting the echo entity, each with its region.
type echoCluster struct {
	nodes   []*testNode
	regions []*sharding.Region[Command]
	counted atomic.Int64
}

// startEchoCluster starts n nodes hosting the echo entity with settings
// (MinMembers n), the first the oldest, and waits until all are Up.
func startEchoCluster(b *testing.B, n int, settings sharding.Settings, tune ...func(*node.Config)) *echoCluster {
	b.Helper()
	dsn := pg.MigratedDSN(b)
	c := &echoCluster{}
	settings.MinMembers = n
	for i := range n {
		var seeds []string
		if i > 0 {
			seeds = []string{c.nodes[0].GossipAddr()}
		}
		c.nodes = append(c.nodes, startNode(b, dsn, fmt.Sprintf("bench-%d", i), seeds, append([]func(*node.Config){withEcho}, tune...)...))
	}
	awaitUp(b, c.nodes)
	for _, nd := range c.nodes {
		r, err := sharding.Init(nd.Sharding(), sharding.Entity[Command]{Key: echoKey, Create: newEcho(&c.counted), Settings: settings})
		if err != nil {
			b.Fatal(err)
		}
		c.regions = append(c.regions, r)
	}
	return c
}

func ping(ctx context.Context, r *sharding.Region[Command], id string) error {
	_, err := entity.Ask(ctx, r.EntityRefFor(id), func(to entity.ReplyTo[int]) Command { return Ping{ReplyTo: to} })
	return err
}

// entitiesByHome pings "echo-0" … "echo-<count-1>" through c's region on
// node i and returns their ids by the node that hosts their shard, as
// node i knows it.
func entitiesByHome(b *testing.B, c *echoCluster, i, count int) map[cluster.UniqueAddress][]string {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	via := c.regions[i]
	for k := range count {
		if err := ping(ctx, via, fmt.Sprintf("echo-%d", k)); err != nil {
			b.Fatalf("ping echo-%d: %v", k, err)
		}
	}
	st, err := c.nodes[i].Sharding().TypeState(ctx, echoKey.Name())
	if err != nil {
		b.Fatal(err)
	}
	homes := map[string]cluster.UniqueAddress{}
	for _, sh := range st.Shards {
		homes[sh.ID] = sh.Home
	}
	out := map[cluster.UniqueAddress][]string{}
	for k := range count {
		id := fmt.Sprintf("echo-%d", k)
		home := homes[via.ShardID(id)]
		out[home] = append(out[home], id)
	}
	return out
}

// percentiles returns the nearest-rank p50 and p99 of lat, sorting it.
func percentiles(lat []time.Duration) (p50, p99 time.Duration) {
	if len(lat) == 0 {
		return 0, 0
	}
	slices.Sort(lat)
	at := func(p float64) time.Duration {
		return lat[min(len(lat)-1, max(0, int(math.Ceil(p*float64(len(lat))))-1))]
	}
	return at(0.50), at(0.99)
}

// BenchmarkAsk asks an echo entity through sharding from node a: one that
// lives on a ("local", the baseline) and one that lives on b ("remote":
// the command and the reply cross the loopback TCP transport). Besides
// ns/op it reports the median and 99th percentile of single asks.
//
//	go test -run '^$' -bench Ask -count 3 ./node
func BenchmarkAsk(b *testing.B) {
	c := startEchoCluster(b, 2, sharding.Settings{NumberOfShards: 10})
	byHome := entitiesByHome(b, c, 0, 100)
	ids := map[string]string{}
	for home, es := range byHome {
		where := "remote"
		if home == c.nodes[0].Self() {
			where = "local"
		}
		ids[where] = es[0]
	}
	ctx := context.Background()
	for _, where := range []string{"local", "remote"} {
		b.Run(where, func(b *testing.B) {
			id := ids[where]
			if id == "" {
				b.Skipf("no %s entity found", where)
			}
			var lat []time.Duration
			for b.Loop() {
				t0 := time.Now()
				if err := ping(ctx, c.regions[0], id); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
			}
			p50, p99 := percentiles(lat)
			b.ReportMetric(float64(p50.Nanoseconds()), "p50-ns")
			b.ReportMetric(float64(p99.Nanoseconds()), "p99-ns")
		})
	}
}

// BenchmarkTell tells Count to echo entities from node a, round-robin
// over 20 of them, and counts their arrival: entities on a ("local", the
// baseline) or on b ("remote": every tell crosses the loopback
// transport). tells/s runs from the first tell to the last one counted;
// remote also reports its ratio to local in the same run. At most
// tellWindow tells are outstanding: a sender that outran the receiver
// would measure its own queue.
//
//	go test -run '^$' -bench Tell -count 3 ./node
func BenchmarkTell(b *testing.B) {
	const tellWindow = 10_000
	c := startEchoCluster(b, 2, sharding.Settings{NumberOfShards: 10})
	byHome := entitiesByHome(b, c, 0, 200)
	local := c.nodes[0].Self()
	ids := map[string][]string{}
	for home, es := range byHome {
		where := "remote"
		if home == local {
			where = "local"
		}
		ids[where] = append(ids[where], es...)
	}
	var localRate float64
	for _, where := range []string{"local", "remote"} {
		b.Run(where, func(b *testing.B) {
			es := ids[where]
			if len(es) == 0 {
				b.Skipf("no %s entity found", where)
			}
			es = es[:min(len(es), 20)]
			refs := make([]sharding.EntityRef[Command], len(es))
			for i, id := range es {
				refs[i] = c.regions[0].EntityRefFor(id)
			}
			base := c.counted.Load()
			sent, refused := int64(0), 0
			t0 := time.Now()
			for b.Loop() {
				for sent-(c.counted.Load()-base) >= tellWindow {
					runtime.Gosched()
				}
				for {
					err := refs[sent%int64(len(refs))].Tell(Count{})
					if err == nil {
						break
					}
					if !errors.Is(err, cluster.ErrQueueFull) && !errors.Is(err, sharding.ErrBufferFull) {
						b.Fatal(err)
					}
					refused++
					runtime.Gosched()
				}
				sent++
			}
			deadline := time.Now().Add(30 * time.Second)
			for c.counted.Load()-base < sent {
				if time.Now().After(deadline) {
					b.Fatalf("%d of %d tells arrived within 30 s", c.counted.Load()-base, sent)
				}
				time.Sleep(time.Millisecond)
			}
			rate := float64(sent) / time.Since(t0).Seconds()
			b.ReportMetric(rate, "tells/s")
			b.ReportMetric(float64(refused)/float64(sent), "refused/tell")
			if where == "local" {
				localRate = rate
			} else if localRate > 0 {
				b.ReportMetric(rate/localRate, "ratio-to-local")
			}
		})
	}
}

// failoverSetups are BenchmarkKillFailover's configurations: "15s" is the
// lease default before failover read expiries in the store (15 s, renewed
// every 5 s, 3 s margin) with the sharding settings the benchmark used
// then: the baseline; "default" is every default of node.DefaultConfig
// and sharding.Settings, memberlist's LAN timing included.
var failoverSetups = []struct {
	name     string
	leases   lease.Settings
	settings sharding.Settings
	lan      bool // memberlist.DefaultTiming, not the tests' faster one
}{
	{name: "15s", leases: lease.Settings{
		Node:        lease.Timing{Length: 15 * time.Second, RenewEvery: 5 * time.Second, Margin: 3 * time.Second},
		Coordinator: lease.Timing{Length: 15 * time.Second, RenewEvery: 5 * time.Second, Margin: 3 * time.Second},
	}, settings: sharding.Settings{NumberOfShards: 30, RetryInterval: 500 * time.Millisecond}},
	{name: "default", leases: lease.DefaultSettings(), settings: sharding.Settings{NumberOfShards: 30}, lan: true},
}

// BenchmarkKillFailover kills one of three nodes (Kill: no hand-off, no
// leave, its leases left to expire) and measures, per iteration, the time
// from the kill until an entity of every shard the victim hosted answers
// again through each survivor (kill-to-serving-ms). Each probe is an ask
// with a 1 s deadline, sent again 10 ms after it failed; an ask forwarded
// to the dead node before the survivors knew is lost, so the figure is
// the end of the first ask sent after the shard serves again. It is set
// against the lease length (ratio-to-lease) and the "15s" setup's run
// just before (ratio-to-15s). Meanwhile asks to entities on the survivors run on:
// others-max-ms and others-p99-ms are their latencies during the
// failover, others-failed how many failed (want 0). The victim is the
// newest node, or the oldest, which hosts the coordinator as well. Each
// iteration starts a new cluster; ns/op is not meaningful. The clock
// starts as Kill is called; Kill stops the node lease's renewals last, so
// a renewal may still land during it (a real kill -9 stops them at once).
//
//	go test -run '^$' -bench KillFailover -benchtime 1x -count 3 ./node
func BenchmarkKillFailover(b *testing.B) {
	baseline := map[string]float64{} // victim → the 15s setup's kill-to-serving
	for _, setup := range failoverSetups {
		for _, victim := range []struct {
			name  string
			index int
		}{{"newest", 2}, {"oldest", 0}} {
			b.Run(setup.name+"/"+victim.name, func(b *testing.B) {
				var sum failoverResult
				for range b.N {
					r := killFailover(b, victim.index, setup.leases, setup.settings, setup.lan)
					sum.serving += r.serving
					sum.othersMax += r.othersMax
					sum.othersP99 += r.othersP99
					sum.othersFailed += r.othersFailed
				}
				n := float64(b.N)
				serving := float64(sum.serving.Milliseconds()) / n
				b.ReportMetric(serving, "kill-to-serving-ms")
				b.ReportMetric(float64(setup.leases.Node.Length.Milliseconds()), "lease-ms")
				b.ReportMetric(sum.serving.Seconds()/setup.leases.Node.Length.Seconds()/n, "ratio-to-lease")
				if base, ok := baseline[victim.name]; setup.name != "15s" && ok && base > 0 {
					b.ReportMetric(serving/base, "ratio-to-15s")
				} else if setup.name == "15s" {
					baseline[victim.name] = serving
				}
				b.ReportMetric(float64(sum.othersMax.Milliseconds())/n, "others-max-ms")
				b.ReportMetric(float64(sum.othersP99.Microseconds())/1000/n, "others-p99-ms")
				b.ReportMetric(float64(sum.othersFailed)/n, "others-failed")
			})
		}
	}
}

type failoverResult struct {
	serving, othersMax, othersP99 time.Duration
	othersFailed                  int
}

func killFailover(b *testing.B, victim int, leases lease.Settings, settings sharding.Settings, lan bool) failoverResult {
	b.StopTimer()
	defer b.StartTimer()
	c := startEchoCluster(b, 3, settings,
		func(cfg *node.Config) {
			cfg.Leases = leases
			if lan {
				cfg.Timing = memberlist.DefaultTiming()
			}
			// The survivors' complaints about the dead node would break
			// up the benchmark's output lines.
			cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError + 4}))
		})
	survivor := c.regions[(victim+1)%3]
	gone := c.nodes[victim].Self()
	byHome := entitiesByHome(b, c, (victim+1)%3, 300)
	// One entity per shard of the victim; the others' entities.
	var victims, others []string
	seen := map[string]bool{}
	for home, es := range byHome {
		for _, id := range es {
			switch sh := survivor.ShardID(id); {
			case home != gone:
				others = append(others, id)
			case !seen[sh]:
				seen[sh] = true
				victims = append(victims, id)
			}
		}
	}
	if len(victims) == 0 || len(others) == 0 {
		b.Fatalf("victim hosts %d shards, the others %d entities", len(victims), len(others))
	}

	done := make(chan struct{})
	var res failoverResult
	var othersDone sync.WaitGroup
	var lat []time.Duration
	othersDone.Go(func() { // asks to the survivors' entities, one at a time
		for k := 0; ; k++ {
			select {
			case <-done:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			t0 := time.Now()
			err := ping(ctx, survivor, others[k%len(others)])
			cancel()
			lat = append(lat, time.Since(t0))
			if err != nil {
				res.othersFailed++
			}
		}
	})
	killedAt := time.Now()
	c.nodes[victim].Kill()
	var back sync.WaitGroup
	var mu sync.Mutex
	for _, id := range victims {
		// Through both survivors: one of them hosts the new coordinator
		// when the oldest died, and the other's region must find it too.
		for _, via := range []*sharding.Region[Command]{c.regions[(victim+1)%3], c.regions[(victim+2)%3]} {
			back.Go(func() {
				for time.Since(killedAt) < 2*time.Minute {
					ctx, cancel := context.WithTimeout(context.Background(), time.Second)
					err := ping(ctx, via, id)
					cancel()
					if err == nil {
						mu.Lock()
						res.serving = max(res.serving, time.Since(killedAt))
						mu.Unlock()
						return
					}
					time.Sleep(10 * time.Millisecond) // an ask may fail fast: no busy loop
				}
				b.Errorf("%s not served again within 2 minutes of the kill", id)
			})
		}
	}
	back.Wait()
	close(done)
	othersDone.Wait()
	res.othersMax = slices.Max(lat)
	_, res.othersP99 = percentiles(lat)
	return res
}
