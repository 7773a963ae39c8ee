package daemon_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/sharding"
	"github.com/shoal-dev/shoal/sharding/daemon"
)

// runs records which node runs which worker, and fails the test the moment
// a worker runs twice at once.
type runs struct {
	t       *testing.T
	mu      sync.Mutex
	active  map[int]string // worker -> node running it
	started map[int]int    // worker -> runs started
	fail    map[int]int    // worker -> runs still to fail at once
	panics  map[int]int    // worker -> runs still to panic
}

func newRuns(t *testing.T) *runs {
	return &runs{t: t, active: map[int]string{}, started: map[int]int{}, fail: map[int]int{}, panics: map[int]int{}}
}

func (r *runs) run(node string) func(ctx context.Context, worker int) error {
	return func(ctx context.Context, worker int) error {
		r.mu.Lock()
		if other, ok := r.active[worker]; ok {
			r.mu.Unlock()
			r.t.Errorf("worker %d runs on %s and %s at once", worker, other, node)
			return errors.New("two at once")
		}
		r.active[worker] = node
		r.started[worker]++
		fail, panics := r.fail[worker] > 0, r.panics[worker] > 0
		if fail {
			r.fail[worker]--
		}
		if panics {
			r.panics[worker]--
		}
		r.mu.Unlock()
		defer func() {
			r.mu.Lock()
			delete(r.active, worker)
			r.mu.Unlock()
		}()
		if panics {
			panic("worker panicked")
		}
		if fail {
			return errors.New("worker failed")
		}
		<-ctx.Done()
		time.Sleep(100 * time.Millisecond) // a run takes a while to wind down
		return nil
	}
}

func (r *runs) snapshot() (active map[int]string, started map[int]int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	active, started = map[int]string{}, map[int]int{}
	for k, v := range r.active {
		active[k] = v
	}
	for k, v := range r.started {
		started[k] = v
	}
	return active, started
}

type cluster struct {
	t       *testing.T
	members *sharding.InProcessCluster
	runs    *runs
	nodes   map[string]*sharding.Sharding
	daemons map[string]*daemon.Daemon
}

func newCluster(t *testing.T) *cluster {
	return &cluster{t: t, members: sharding.NewInProcessCluster(), runs: newRuns(t),
		nodes: map[string]*sharding.Sharding{}, daemons: map[string]*daemon.Daemon{}}
}

const workers = 6

func (c *cluster) join(name string) {
	c.t.Helper()
	sys, err := entity.NewSystem(entity.Config{NodeID: name, Codec: codec.NewRegistry(), ForceSerialization: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		c.t.Fatal(err)
	}
	s, err := c.members.Join(sys)
	if err != nil {
		c.t.Fatal(err)
	}
	d, err := daemon.Start(s, daemon.Config{Name: "test", Workers: workers, Run: c.runs.run(name), KeepAliveInterval: time.Second})
	if err != nil {
		c.t.Fatal(err)
	}
	c.nodes[name], c.daemons[name] = s, d
}

func (c *cluster) leave(name string) {
	c.t.Helper()
	c.daemons[name].Stop()
	if err := c.nodes[name].Shutdown(context.Background()); err != nil {
		c.t.Fatalf("%s left with %v", name, err)
	}
	delete(c.nodes, name)
}

// stop crashes what is left of the cluster and lets the runs wind down,
// so the bubble ends with no goroutine left.
func (c *cluster) stop() {
	for name := range c.nodes {
		c.daemons[name].Stop()
		c.nodes[name].Terminate()
	}
	time.Sleep(time.Second)
	synctest.Wait()
}

// wantAllRunning waits (in the bubble's time) until every worker runs, and
// returns the node of each.
func (c *cluster) wantAllRunning(within time.Duration) map[int]string {
	c.t.Helper()
	deadline := time.Now().Add(within)
	for {
		active, _ := c.runs.snapshot()
		if len(active) == workers {
			return active
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("after %v only workers %v run", within, active)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// settled waits until every worker runs and the coordinator has stopped
// moving them (it rebalances the workers the first node took, a few per
// round), and returns the node of each.
func (c *cluster) settled() map[int]string {
	c.t.Helper()
	active := c.wantAllRunning(30 * time.Second)
	for range 20 {
		time.Sleep(20 * time.Second)
		now := c.wantAllRunning(30 * time.Second)
		if maps.Equal(now, active) {
			return now
		}
		active = now
	}
	c.t.Fatalf("workers still move after 400 s: %v", active)
	return nil
}

func TestWorkersRunOnceEachSpreadOverTheNodes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		defer c.stop()
		for _, n := range []string{"a", "b", "c"} {
			c.join(n)
		}
		active := c.settled()
		_, before := c.runs.snapshot()
		time.Sleep(60 * time.Second) // many keep-alives and rebalance rounds later
		_, after := c.runs.snapshot()
		for w := range workers {
			if before[w] != after[w] {
				t.Errorf("worker %d started again in a settled cluster: %d runs, then %d", w, before[w], after[w])
			}
		}
		perNode := map[string]int{}
		for _, n := range active {
			perNode[n]++
		}
		if len(perNode) < 2 {
			t.Errorf("workers not spread: %v", active)
		}
	})
}

func TestWorkersOfALeavingNodeMoveAndNeverRunTwice(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		defer c.stop()
		for _, n := range []string{"a", "b", "c"} {
			c.join(n)
		}
		active := c.settled()
		var leaver string
		for _, n := range active {
			if n != "a" { // keep the coordinator's node
				leaver = n
				break
			}
		}
		if leaver == "" {
			t.Fatalf("every worker runs on a: %v", active)
		}
		c.leave(leaver)
		after := c.wantAllRunning(30 * time.Second)
		for w, n := range after {
			if n == leaver {
				t.Errorf("worker %d still runs on %s, which left", w, leaver)
			}
		}
	})
}

func TestAFailingOrPanickingRunIsRestarted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		defer c.stop()
		c.runs.fail[1] = 2
		c.runs.panics[2] = 1
		c.join("a")
		c.wantAllRunning(30 * time.Second)
		_, started := c.runs.snapshot()
		if started[1] != 3 || started[2] != 2 || started[0] != 1 {
			t.Fatalf("runs started %v: want worker 1 three times, 2 twice, 0 once", started)
		}
	})
}

func TestInvalidConfigIsRefused(t *testing.T) {
	sys, err := entity.NewSystem(entity.Config{NodeID: "a"})
	if err != nil {
		t.Fatal(err)
	}
	s, err := sharding.New(sys, sharding.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Terminate()
	for _, cfg := range []daemon.Config{
		{Workers: 1, Run: func(context.Context, int) error { return nil }},
		{Name: "x", Run: func(context.Context, int) error { return nil }},
		{Name: "x", Workers: 1},
	} {
		if _, err := daemon.Start(s, cfg); !errors.Is(err, daemon.ErrInvalidConfig) {
			t.Errorf("%s: err %v, want ErrInvalidConfig", fmt.Sprint(cfg.Name, cfg.Workers), err)
		}
	}
}

func TestWorkersOfACrashedNodeRunElsewhere(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		defer c.stop()
		for _, n := range []string{"a", "b", "c"} {
			c.join(n)
		}
		active := c.settled()
		crashed := active[0]
		if crashed == "a" {
			crashed = active[workers-1]
		}
		if crashed == "a" {
			t.Fatalf("every worker runs on a: %v", active)
		}
		c.daemons[crashed].Stop()
		c.nodes[crashed].Terminate() // its runs are cancelled without a hand-off, as in a crash
		c.members.Remove(c.nodes[crashed].Node())
		delete(c.nodes, crashed)
		time.Sleep(time.Second) // the crashed node's runs see their contexts end
		for w, n := range c.wantAllRunning(60 * time.Second) {
			if n == crashed {
				t.Errorf("worker %d still runs on %s, which crashed", w, crashed)
			}
		}
	})
}
