package runtime

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	goruntime "runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/internal/metrics"
	"github.com/shoal-dev/shoal/internal/ring"
	"github.com/shoal-dev/shoal/journal"
	"github.com/shoal-dev/shoal/snapshot"
	"github.com/shoal-dev/shoal/timers"
	"github.com/shoal-dev/shoal/timers/reminder"
	"go.opentelemetry.io/otel/trace"
)

// Config configures a System. The zero value of every field means its default.
type Config struct {
	// NodeID names this node in reply addresses. Default: random.
	NodeID string
	// Incarnation tells this run of the node from its earlier and later
	// ones: reply addresses carry it, and a reply for another incarnation
	// is refused, so a restarted process never receives the replies meant
	// for the one before it. A cluster node passes its
	// cluster.UniqueAddress's incarnation. Default: the wall-clock time of
	// NewSystem in nanoseconds since 1970 (time.Now, not Clock: a test
	// clock would give a restarted process its predecessor's number).
	Incarnation uint64
	// Logger receives runtime logs, each with a node attribute (NodeID).
	// Default: slog.Default().
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
	// Reminders is the node's durable reminder store (docs/DESIGN.md,
	// "Durable reminders"); its journal writes an effect's reminder
	// changes with the effect's events.
	Reminders reminder.Store
	// Workers is how many goroutines run entities at once. Handlers must not
	// block: a blocked handler holds a worker. Default: GOMAXPROCS.
	Workers int
	// Throughput is how many messages an entity handles before yielding its
	// worker to the next entity. Default: 64.
	Throughput int
	// ForceSerialization sends every local message and reply through a
	// codec round trip, so a type that cannot cross the network fails in
	// tests: with ErrNotSerializable when the codec refuses it or when the
	// copy differs from the original. Requires Codec.
	ForceSerialization bool
	// AskTimeout bounds an Ask whose context has no deadline (it fails
	// within an eighth of AskTimeout after it), and an AskFrom without a
	// timeout. Default: DefaultAskTimeout.
	AskTimeout time.Duration
	// DeadLetterLogLimit is how many dead letters and unhandled messages
	// are logged (at Info) per second of Clock time; the others are only
	// counted, and the next line logged says how many were left out.
	// Default 10; negative: none is logged.
	DeadLetterLogLimit int
	// MaxConcurrentRecoveries bounds how many recoveries run at once (see
	// StartRecovery); the others wait their turn, so that starting a
	// million event-sourced entities does not start a million readers, each
	// with a goroutine the runtime keeps for reuse. Default 50, Akka's
	// max-concurrent-recoveries.
	MaxConcurrentRecoveries int
	// Metrics, when set, receives the runtime's Prometheus collectors:
	// messages delivered and dead-lettered, mailbox depth and ask latency,
	// per entity type. Default nil: no metrics, at the cost of a nil check.
	Metrics prometheus.Registerer
	// TracerProvider makes the runtime's spans: an Ask's ("shoal.ask") and
	// the handling of each command that carries a trace context
	// ("shoal.entity.handle"; docs/DESIGN.md, "Tracing"). Default: otel's
	// no-op provider, which records nothing; trace context still travels
	// with messages. Pass otel.GetTracerProvider() to use the global one.
	TracerProvider trace.TracerProvider
}

// DefaultDeadLetterLogLimit is Config.DeadLetterLogLimit's default.
const DefaultDeadLetterLogLimit = 10

// System is the per-process runtime: the workers that run entities, the
// routing of replies, and the node's shared services.
type System struct {
	cfg         Config
	log         *slog.Logger
	dispatch    dispatcher
	replies     replyTable
	router      atomic.Pointer[ReplyRouter]
	deadLetters atomic.Uint64
	unhandled   atomic.Uint64
	dlLog       logLimiter
	recoveries  limiter
	inOrder     keyedQueues
	metrics     *metrics.Entity     // nil when Config.Metrics is
	untyped     *metrics.EntityType // dead letters of no entity type
	trace       tracing
	spares      sync.Map // of mailbox buffers, per command type: see sparesOf
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
	if cfg.Incarnation == 0 {
		cfg.Incarnation = uint64(time.Now().UnixNano())
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Clock == nil {
		cfg.Clock = timers.Real{}
	}
	if cfg.Workers <= 0 {
		cfg.Workers = goruntime.GOMAXPROCS(0)
	}
	if cfg.Throughput <= 0 {
		cfg.Throughput = 64
	}
	if cfg.AskTimeout <= 0 {
		cfg.AskTimeout = DefaultAskTimeout
	}
	if cfg.DeadLetterLogLimit == 0 {
		cfg.DeadLetterLogLimit = DefaultDeadLetterLogLimit
	}
	if cfg.MaxConcurrentRecoveries <= 0 {
		cfg.MaxConcurrentRecoveries = 50
	}
	// Every line of the runtime names its node.
	s := &System{cfg: cfg, log: cfg.Logger.With("node", cfg.NodeID), metrics: metrics.NewEntity(cfg.Metrics)}
	s.untyped = s.metrics.Type(metrics.NoEntityType)
	s.trace = newTracing(cfg.TracerProvider)
	s.recoveries.max = cfg.MaxConcurrentRecoveries
	s.dispatch.max = cfg.Workers
	s.replies.pending = make(map[uint64]waiter)
	return s, nil
}

// NodeID names this runtime in reply addresses.
func (s *System) NodeID() string { return s.cfg.NodeID }

// Incarnation tells this run of the node from its others, in reply addresses.
func (s *System) Incarnation() uint64 { return s.cfg.Incarnation }

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

// Reminders is the node's reminder store; nil if none was configured.
func (s *System) Reminders() reminder.Store { return s.cfg.Reminders }

// ForcesSerialization reports whether every local message takes a codec round trip.
func (s *System) ForcesSerialization() bool { return s.cfg.ForceSerialization }

// DeadLetters counts messages that reached no handler: sent to a stopped
// entity, left in its mailbox or stash when it stopped, unhandled, or
// replies nobody waited for.
func (s *System) DeadLetters() uint64 { return s.deadLetters.Load() }

// Stats are the runtime's counters since NewSystem, for metrics.
type Stats struct {
	// DeadLetters is DeadLetters(): every message that reached no handler.
	DeadLetters uint64
	// Unhandled counts the dead letters that a behavior returned Unhandled for.
	Unhandled uint64
	// DeadLettersNotLogged counts the dead letters left out of the log by
	// Config.DeadLetterLogLimit.
	DeadLettersNotLogged uint64
	// AsksWaiting is how many asks of this node wait for a reply now.
	AsksWaiting int
}

// Stats returns the runtime's counters.
func (s *System) Stats() Stats {
	s.dlLog.mu.Lock()
	notLogged := s.dlLog.total
	s.dlLog.mu.Unlock()
	s.replies.mu.Lock()
	waiting := len(s.replies.pending)
	s.replies.mu.Unlock()
	return Stats{DeadLetters: s.deadLetters.Load(), Unhandled: s.unhandled.Load(), DeadLettersNotLogged: notLogged, AsksWaiting: waiting}
}

// DeadLetter records msg, addressed to to, as a dead letter for reason,
// for an owner such as a shard that holds messages on an entity's behalf
// and could not deliver one it had accepted: it is counted in Stats,
// logged within Config.DeadLetterLogLimit, and the asks it carries fail at
// once with cause (when not nil) instead of waiting for their deadline:
// this node's at once, other nodes' by a failure sent on the reply route.
func DeadLetter(s *System, cause error, to, reason string, msg any) {
	s.deadLetter(s.untyped, cause, "", "", to, reason, msg)
}

// EntityDeadLetter is DeadLetter for a message to entity entityID of type
// entityType, counted in that type's metrics.
func EntityDeadLetter(s *System, cause error, entityType, entityID, reason string, msg any) {
	s.deadLetter(s.metrics.Type(entityType), cause, entityType, entityID, entityType+"/"+entityID, reason, msg)
}

// deadLetter records msg, addressed to to (entity entityID of type
// entityType, when it was an entity's), as reaching no handler for
// reason, logs it within the rate limit, and, when cause is not nil, fails
// the asks msg carries with cause (ErrStopped, ErrUnhandled), of this node
// and others: they would otherwise wait for their deadline.
func (s *System) deadLetter(m *metrics.EntityType, cause error, entityType, entityID, to, reason string, msg any) {
	s.deadLetters.Add(1)
	m.DeadLetter()
	unhandled := errors.Is(cause, ErrUnhandled)
	if unhandled {
		s.unhandled.Add(1)
	}
	if cause != nil {
		s.failAsks(msg, fmt.Errorf("entity: ask: %s %s: %w", to, reason, cause))
	}
	if s.cfg.DeadLetterLogLimit < 0 {
		s.dlLog.skip()
		return
	}
	ok, left := s.dlLog.allow(s.cfg.Clock.Now(), s.cfg.DeadLetterLogLimit)
	if !ok {
		return
	}
	title := "dead letter"
	if unhandled {
		title = "unhandled message"
	}
	attrs := []any{"to", to, "type", typeName(msg), "reason", reason}
	if entityType != "" {
		attrs = append(attrs, "entity_type", entityType, "entity_id", entityID)
	}
	if left > 0 {
		attrs = append(attrs, "not_logged_before", left)
	}
	s.log.Info(title, attrs...)
}

// logLimiter lets at most limit log lines through per second of clock time
// and counts the others.
type logLimiter struct {
	mu     sync.Mutex
	window time.Time // start of the current second
	logged int       // lines in it
	left   uint64    // left out since the last line logged
	total  uint64    // left out in all
}

// allow reports whether to log now, and how many lines were left out since
// the last one logged.
func (l *logLimiter) allow(now time.Time, limit int) (bool, uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.window) >= time.Second || now.Before(l.window) {
		l.window, l.logged = now, 0
	}
	if l.logged >= limit {
		l.left++
		l.total++
		return false, 0
	}
	l.logged++
	left := l.left
	l.left = 0
	return true, left
}

func (l *logLimiter) skip() {
	l.mu.Lock()
	l.total++
	l.mu.Unlock()
}

// StartRecovery runs recover on a goroutine of its own once every job
// given to RunInOrder under key has returned and fewer than
// Config.MaxConcurrentRecoveries recoveries are running; until then it
// waits in line. key names what recover reads (a persistence id), so an
// incarnation never reads the store while its predecessor's writes to it
// are still running. recover may block on IO but must end. Safe from any
// goroutine.
func StartRecovery(s *System, key string, recover func()) {
	s.inOrder.runOrCall(key, func() { s.recoveries.start(recover) })
}

// RunInOrder runs job on a goroutine of its own after every job given
// earlier under the same key has returned, one at a time, for store work
// an entity leaves running in the background (a snapshot and its
// retention). Two such jobs finishing out of order could delete what the
// later one must keep; a recovery under key (StartRecovery) waits for them.
// job may block on IO but must end. Safe from any goroutine.
func RunInOrder(s *System, key string, job func()) { s.inOrder.enqueue(key, job) }

// keyedQueues runs jobs one at a time per key. A key is in the map only
// while a goroutine is running its jobs, so an idle System keeps nothing.
type keyedQueues struct {
	mu     sync.Mutex
	queues map[string][]func()
}

func (k *keyedQueues) enqueue(key string, job func()) {
	if !k.queue(key, job, true) {
		go k.drain(key, job)
	}
}

// runOrCall calls fn at once when nothing runs under key, else queues it.
func (k *keyedQueues) runOrCall(key string, fn func()) {
	if !k.queue(key, fn, false) {
		fn()
	}
}

// queue puts job behind the jobs running under key and reports true, or,
// when none run, reports false, making the caller key's runner if claim.
func (k *keyedQueues) queue(key string, job func(), claim bool) (queued bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if q, busy := k.queues[key]; busy {
		k.queues[key] = append(q, job)
		return true
	}
	if claim {
		if k.queues == nil {
			k.queues = make(map[string][]func())
		}
		k.queues[key] = nil
	}
	return false
}

func (k *keyedQueues) drain(key string, job func()) {
	for {
		job()
		k.mu.Lock()
		q := k.queues[key]
		if len(q) == 0 {
			delete(k.queues, key)
			k.mu.Unlock()
			return
		}
		job, q[0] = q[0], nil
		k.queues[key] = q[1:]
		k.mu.Unlock()
	}
}

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
// Short, because a spinning worker is always runnable, and the scheduler
// polls the network only when nothing else is: 16 yields held back the
// reader of a cross-node ask's reply by some 8 µs, where 4 keep steady
// streams as fast.
const spins = 4

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
	growStack()
	for {
		r, ok := d.next()
		if !ok {
			return
		}
		r.run()
	}
}

// growStack grows a new worker's stack to 8 KiB before it runs anything.
// A goroutine starts with a small stack and doubles it, copying it, each
// time a call goes past its end, and the copy walks every frame on the
// stack. A handler that replies across the network runs deep (the reply's
// encoding, the transport's write): it made each new worker's stack grow
// twice, deep in that call chain, a fifth of a cross-node ask's CPU.
// Grown here, the stack is copied with two frames on it. 8 KiB holds that
// chain; a worker that needs more grows further, as any goroutine does.
//
//go:noinline
func growStack() {
	var frame [6 << 10]byte // with the frames below it, past 4 KiB: one copy, to 8
	keep(frame[:])
}

// keep keeps its argument alive, for growStack.
//
//go:noinline
func keep([]byte) {}

func (d *dispatcher) next() (runnable, bool) {
	d.mu.Lock()
	if r, ok := d.queue.Pop(); ok {
		d.mu.Unlock()
		return r, true
	}
	d.spinning++
	d.mu.Unlock()
	for range spins {
		goruntime.Gosched()
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
