// Package daemon keeps a fixed number of workers running across a cluster,
// each on exactly one node at a time.
//
// Worker i of n is entity i of the daemon's own entity type, alone in shard
// i, so sharding gives each worker one home, spreads the workers over the
// nodes with its allocation strategy, and moves a worker when its node
// leaves (the worker's run is cancelled and waited for before the new home
// starts it) or crashes (after the node's lease expired, like any shard).
// Every node tells every worker to be alive every KeepAliveInterval, which
// starts a worker wherever its shard lives now. This is Akka's sharded
// daemon process; projections run their instances on it (docs/DESIGN.md,
// "Projections").
//
// A worker whose run returns (an error or nil) while it is not being
// stopped is started again after RestartBackoff. A panic in a run is such
// an error.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/sharding"
)

// Config describes a daemon. Zero durations take the defaults.
type Config struct {
	// Name names the daemon; its entity type is "daemon-" + Name. Every
	// node that runs the daemon starts it with the same Name and Workers.
	Name string
	// Workers is the number of workers, indexed 0 … Workers-1.
	Workers int
	// Run is worker i's work. It runs until ctx ends (the worker moves,
	// the node leaves or fences itself) and should return soon after.
	Run func(ctx context.Context, worker int) error
	// Role restricts the workers to members with this role.
	Role string
	// KeepAliveInterval is how often each node tells every worker to be
	// alive. Default 5 s.
	KeepAliveInterval time.Duration
	// RestartBackoff is how long a worker whose run returned on its own
	// waits before it runs again. Default 1 s.
	RestartBackoff time.Duration
	// StopTimeout bounds how long a moving worker's run may take to return
	// after its context ended; then sharding stops it by force. Default
	// 30 s (sharding's).
	StopTimeout time.Duration
}

// ErrInvalidConfig is returned by Start for a config it cannot run.
var ErrInvalidConfig = errors.New("daemon: invalid config")

// command is what a worker entity receives.
type command interface{ isDaemonCommand() }

// keepAlive starts a worker that is not running.
type keepAlive struct{}

// stopWorker is the worker's stop message: it cancels the run and stops
// once the run returned.
type stopWorker struct{}

// runEnded reports, from the run's goroutine, that the run returned.
type runEnded struct{ Err string }

// restart runs the worker again after its back-off.
type restart struct{}

func (keepAlive) isDaemonCommand()  {}
func (stopWorker) isDaemonCommand() {}
func (runEnded) isDaemonCommand()   {}
func (restart) isDaemonCommand()    {}

// node's codec; a program that decodes them elsewhere calls it.
func register(reg *codec.Registry) error {
	return errors.Join(
		codec.Register[keepAlive](reg, "shoal.daemon.KeepAlive"),
		codec.Register[stopWorker](reg, "shoal.daemon.Stop"),
		codec.Register[runEnded](reg, "shoal.daemon.RunEnded"),
		codec.Register[restart](reg, "shoal.daemon.Restart"),
	)
}

// Daemon is a daemon's part on one node: its keep-alive loop.
type Daemon struct {
	cfg    Config
	region *sharding.Region[command]
	stop   context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

// Start registers the daemon's entity type on s and starts telling its
// workers to be alive. Call Stop before the node shuts down, or let the
// shutdown hand the workers off.
func Start(s *sharding.Sharding, cfg Config) (*Daemon, error) {
	if cfg.Name == "" || cfg.Workers <= 0 || cfg.Run == nil {
		return nil, fmt.Errorf("%w: want a Name, Workers > 0 and Run (got %q, %d)", ErrInvalidConfig, cfg.Name, cfg.Workers)
	}
	if cfg.KeepAliveInterval <= 0 {
		cfg.KeepAliveInterval = 5 * time.Second
	}
	if cfg.RestartBackoff <= 0 {
		cfg.RestartBackoff = time.Second
	}
	if reg := s.System().Codec(); reg != nil {
		if err := register(reg); err != nil {
			return nil, fmt.Errorf("daemon %s: %w", cfg.Name, err)
		}
	}
	settings := sharding.Settings{
		NumberOfShards:     cfg.Workers,
		ShardID:            func(id string) string { return id },
		PassivateIdleAfter: -1,
		StopTimeout:        cfg.StopTimeout,
	}
	d := &Daemon{cfg: cfg, done: make(chan struct{})}
	region, err := sharding.Init(s, sharding.Entity[command]{
		Key:         entity.NewTypeKey[command]("daemon-" + cfg.Name),
		Create:      d.create,
		StopMessage: stopWorker{},
		Role:        cfg.Role,
		Settings:    settings,
	})
	if err != nil {
		return nil, fmt.Errorf("daemon %s: %w", cfg.Name, err)
	}
	d.region = region
	ctx, cancel := context.WithCancel(context.Background())
	d.stop = cancel
	go d.keepAlive(ctx)
	return d, nil
}

// Stop ends this node's keep-alive loop. Workers running here keep running
// until their shards move or the node stops.
func (d *Daemon) Stop() {
	d.once.Do(func() {
		d.stop()
		<-d.done
	})
}

// keepAlive tells every worker to be alive now and every interval. A Tell
// that fails (no home yet, buffer full) is retried at the next tick.
func (d *Daemon) keepAlive(ctx context.Context) {
	defer close(d.done)
	tick := time.NewTicker(d.cfg.KeepAliveInterval)
	defer tick.Stop()
	for {
		for i := range d.cfg.Workers {
			_ = d.region.EntityRefFor(strconv.Itoa(i)).Tell(keepAlive{})
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// worker is one incarnation of a worker entity.
type worker struct {
	d        *Daemon
	index    int
	cancel   context.CancelFunc // ends the current run; nil when none runs
	stopping bool
	waiting  bool // a restart timer is pending
}

func (d *Daemon) create(ec entity.Context[command]) entity.Behavior[command] {
	index, err := strconv.Atoi(ec.EntityID())
	if err != nil || index < 0 || index >= d.cfg.Workers {
		ec.Log().Error("daemon: no such worker", "daemon", d.cfg.Name, "worker", ec.EntityID())
		return entity.Stopped[command]()
	}
	w := &worker{d: d, index: index}
	w.run(ec)
	return entity.Receive(w.receive)
}

func (w *worker) receive(ec entity.Context[command], msg command) entity.Behavior[command] {
	switch m := msg.(type) {
	case keepAlive:
		// A worker runs from its start; a keep-alive only creates it.
	case restart:
		w.waiting = false
		if !w.stopping && w.cancel == nil {
			w.run(ec)
		}
	case stopWorker:
		if w.cancel == nil {
			return entity.Stopped[command]()
		}
		w.stopping = true
		w.cancel()
	case runEnded:
		w.cancel = nil
		if w.stopping {
			return entity.Stopped[command]()
		}
		ec.Log().Warn("daemon: worker's run returned; restarting it", "daemon", w.d.cfg.Name, "worker", w.index, "error", m.Err, "after", w.d.cfg.RestartBackoff)
		if !w.waiting {
			w.waiting = true
			ec.Timers().StartSingleTimer("restart", restart{}, w.d.cfg.RestartBackoff)
		}
	}
	return entity.Same[command]()
}

// run starts the worker's run on its own goroutine. It ends when the
// worker is told to stop or its incarnation stops, whichever comes first.
func (w *worker) run(ec entity.Context[command]) {
	runCtx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	ec.PipeToSelf(func(ctx context.Context) (reply command) {
		defer context.AfterFunc(ctx, cancel)()
		defer cancel()
		defer func() {
			if p := recover(); p != nil {
				reply = runEnded{Err: (&entity.PanicError{Value: p, Stack: debug.Stack()}).Error()}
			}
		}()
		if err := w.d.cfg.Run(runCtx, w.index); err != nil {
			return runEnded{Err: err.Error()}
		}
		return runEnded{}
	})
}
