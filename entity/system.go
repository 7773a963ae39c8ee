package entity

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/internal/ring"
	"github.com/shoal-dev/shoal/journal"
	"github.com/shoal-dev/shoal/snapshot"
	"github.com/shoal-dev/shoal/timers"
)

// Config configures a System. The zero value of every field means its default.
type Config struct {
	// NodeID names this process incarnation in reply addresses. Default: random.
	NodeID string
	// Logger receives runtime logs. Default: slog.Default().
	Logger *slog.Logger
	// Clock is the time source for timers and timeouts. Default: timers.Real.
	Clock timers.Clock
	// Codec serializes messages that leave the process, and every message
	// when ForceSerialization is set.
	Codec *codec.Registry
	// Journal and Snapshots are the stores event-sourced entities use unless
	// their own configuration names others.
	Journal   journal.Journal
	Snapshots snapshot.Store
	// Workers is how many goroutines run entities at once. Handlers must not
	// block: a blocked handler holds a worker. Default: GOMAXPROCS.
	Workers int
	// Throughput is how many messages an entity handles before yielding its
	// worker to the next entity. Default: 64.
	Throughput int
	// ForceSerialization sends every local message and reply through a
	// codec round trip, so a type that cannot cross the network fails in
	// tests. Requires Codec.
	ForceSerialization bool
	// MaxConcurrentRecoveries bounds how many recoveries run at once (see
	// System.StartRecovery); the others wait their turn, so that starting a
	// million event-sourced entities does not start a million readers, each
	// with a goroutine the runtime keeps for reuse. Default 50, Akka's
	// max-concurrent-recoveries.
	MaxConcurrentRecoveries int
}

// System is the per-process runtime: the workers that run entities, the
// routing of replies, and the node's shared services.
type System struct {
	cfg         Config
	log         *slog.Logger
	dispatch    dispatcher
	replies     replyTable
	router      atomic.Pointer[ReplyRouter]
	deadLetters atomic.Uint64
	recoveries  limiter
}

// NewSystem returns a runtime configured by cfg.
func NewSystem(cfg Config) (*System, error) {
	if cfg.ForceSerialization && cfg.Codec == nil {
		return nil, errors.New("entity: ForceSerialization requires a Codec")
	}
	if cfg.NodeID == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		cfg.NodeID = hex.EncodeToString(b[:])
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Clock == nil {
		cfg.Clock = timers.Real{}
	}
	if cfg.Workers <= 0 {
		cfg.Workers = runtime.GOMAXPROCS(0)
	}
	if cfg.Throughput <= 0 {
		cfg.Throughput = 64
	}
	if cfg.MaxConcurrentRecoveries <= 0 {
		cfg.MaxConcurrentRecoveries = 50
	}
	s := &System{cfg: cfg, log: cfg.Logger}
	s.recoveries.max = cfg.MaxConcurrentRecoveries
	s.dispatch.max = cfg.Workers
	s.replies.pending = make(map[uint64]chan any)
	return s, nil
}

// NodeID names this runtime in reply addresses.
func (s *System) NodeID() string { return s.cfg.NodeID }

// Logger is the runtime's logger.
func (s *System) Logger() *slog.Logger { return s.log }

// Clock is the runtime's time source.
func (s *System) Clock() timers.Clock { return s.cfg.Clock }

// Codec is the runtime's codec; nil if none was configured.
func (s *System) Codec() *codec.Registry { return s.cfg.Codec }

// Journal is the node's default event journal; nil if none was configured.
func (s *System) Journal() journal.Journal { return s.cfg.Journal }

// Snapshots is the node's default snapshot store; nil if none was configured.
func (s *System) Snapshots() snapshot.Store { return s.cfg.Snapshots }

// ForcesSerialization reports whether every local message takes a codec round trip.
func (s *System) ForcesSerialization() bool { return s.cfg.ForceSerialization }

// DeadLetters counts messages that reached no handler: sent to a stopped
// entity, left in its mailbox when it stopped, unhandled, or replies nobody
// waited for.
func (s *System) DeadLetters() uint64 { return s.deadLetters.Load() }

func (s *System) deadLetter(reason string, msg any) {
	s.deadLetters.Add(1)
	if s.log.Enabled(nil, slog.LevelDebug) {
		s.log.Debug("dead letter", "reason", reason, "type", typeName(msg))
	}
}

// StartRecovery runs recover on a goroutine of its own once fewer than
// Config.MaxConcurrentRecoveries recoveries are running; until then it
// waits in line. recover may block on IO but must end. Safe from any goroutine.
func (s *System) StartRecovery(recover func()) { s.recoveries.start(recover) }

// limiter runs queued functions on at most max goroutines, in order.
type limiter struct {
	mu      sync.Mutex
	queue   ring.Queue[func()]
	running int
	max     int
}

func (l *limiter) start(fn func()) {
	l.mu.Lock()
	if l.running >= l.max {
		l.queue.Push(fn)
		l.mu.Unlock()
		return
	}
	l.running++
	l.mu.Unlock()
	go l.run(fn)
}

// run runs fn, then whatever waits in line, and exits when nothing does.
func (l *limiter) run(fn func()) {
	for {
		fn()
		l.mu.Lock()
		next, ok := l.queue.Pop()
		if !ok {
			l.running--
			l.queue.Release()
			l.mu.Unlock()
			return
		}
		l.mu.Unlock()
		fn = next
	}
}

// runnable is a mailbox with work, as the dispatcher sees it.
type runnable interface{ run() }

// dispatcher runs scheduled mailboxes on at most max goroutines. Workers
// exist only while there is work: when the run queue stays empty a worker
// exits, so an idle System owns no goroutine at all.
type dispatcher struct {
	mu       sync.Mutex
	queue    ring.Queue[runnable]
	workers  int
	spinning int
	max      int
}

// spins is how many times an idle worker yields and looks again before it
// exits; a short spin keeps a worker through the gaps of a steady stream.
const spins = 16

func (d *dispatcher) submit(r runnable) {
	d.mu.Lock()
	d.queue.Push(r)
	start := d.workers < d.max && d.spinning == 0
	if start {
		d.workers++
	}
	d.mu.Unlock()
	if start {
		go d.work()
	}
}

func (d *dispatcher) work() {
	for {
		r, ok := d.next()
		if !ok {
			return
		}
		r.run()
	}
}

func (d *dispatcher) next() (runnable, bool) {
	d.mu.Lock()
	if r, ok := d.queue.Pop(); ok {
		d.mu.Unlock()
		return r, true
	}
	d.spinning++
	d.mu.Unlock()
	for range spins {
		runtime.Gosched()
		d.mu.Lock()
		if r, ok := d.queue.Pop(); ok {
			d.spinning--
			d.mu.Unlock()
			return r, true
		}
		d.mu.Unlock()
	}
	d.mu.Lock()
	d.spinning--
	r, ok := d.queue.Pop()
	if !ok {
		d.workers--
		d.queue.Release()
	}
	d.mu.Unlock()
	return r, ok
}
