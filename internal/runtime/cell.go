package runtime

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"runtime/debug"
	"sync"
	"time"

	"github.com/shoal-dev/shoal/internal/metrics"
	"github.com/shoal-dev/shoal/internal/ring"
	"github.com/shoal-dev/shoal/stash"
	"github.com/shoal-dev/shoal/timers"
	"go.opentelemetry.io/otel/trace"
)

// Props describes how to run entities of one type. One Props is shared by
// every entity spawned from it, so per-entity memory stays small.
type Props[C any] struct {
	Key TypeKey[C]
	// Create builds the behavior of a new incarnation, on its goroutine.
	Create func(ctx Context[C]) Behavior[C]
	// StashCapacity bounds Context.Stash. Default: stash.DefaultCapacity.
	StashCapacity int
	// MailboxCapacity bounds the mailbox; Tell beyond it fails with
	// ErrMailboxFull. Default 0: unbounded.
	MailboxCapacity int
	// HeldCapacity bounds the mailbox while it is held (Suspend: an
	// event-sourced entity recovering or persisting), so that a slow
	// journal turns into errors for senders rather than unbounded memory:
	// Tell beyond it fails with ErrMailboxFull. Default stash.DefaultCapacity.
	HeldCapacity int
	// Owner, when set, handles passivation requests and learns of stops.
	Owner Owner[C]
	// LocalOnly marks an entity whose messages never cross the network,
	// such as the runtime's own control entities: Config.ForceSerialization
	// does not apply to it.
	LocalOnly bool
}

func (p *Props[C]) heldCapacity() int {
	if p.HeldCapacity > 0 {
		return p.HeldCapacity
	}
	return stash.DefaultCapacity
}

// Owner supervises entities, as a shard does: it decides what passivation
// means and learns when an incarnation has stopped.
type Owner[C any] interface {
	// Passivate is called on the entity's goroutine when it calls Context.Passivate.
	Passivate(c *Cell[C])
	// Stopped is called once, after c has stopped; err is nil for a normal stop.
	Stopped(c *Cell[C], err error)
}

// Cell is one running incarnation of an entity: its mailbox, its behavior
// and its share of the runtime. It implements Ref and, for its own handlers, Context.
type Cell[C any] struct {
	sys   *System
	props *Props[C]
	id    string

	mu     sync.Mutex
	status status
	// capacity is props.MailboxCapacity, 0 for unbounded, kept here (in
	// what was padding) so that tell reads no more than the cell under
	// its lock: an owner with many Props (a shard each) would otherwise
	// wait on one more cache miss per message.
	capacity int32
	mailbox  ring.Queue[envelope[C]]
	mark     uint64              // the greatest mark of TellUnsealed
	control  *ring.Queue[func()] // runtime work that bypasses suspension; allocated on first use
	term     *termination
	// lent holds the mailbox's idle buffer while the mailbox uses a
	// burst's spare, to swap back when the cell goes idle; nil otherwise.
	// It fits the Cell's allocation size class as it was.
	lent *spare[C]

	// Owned by the goroutine running the cell.
	behavior Behavior[C]
	stopping bool // stop after the current message
	dead     bool // terminated; mirrors status&terminated for lock-free reads
	x        *extras[C]

	// Metrics, when on: mailbox depth is reported to the type's gauge
	// where the cell's lock is held anyway, not per message, so reported
	// is the depth the gauge holds for this cell; handled counts the
	// messages delivered in the current run, added once at its end.
	m        *metrics.EntityType // nil when metrics are off
	reported int32
	handled  uint32
	stripe   uint8 // of the type's delivered counter
}

type status uint8

const (
	scheduled status = 1 << iota
	suspended
	terminated
	sealed // TellUnsealed refuses: the owner is stopping this incarnation
)

type termination struct {
	done chan struct{}
	err  error
}

// envelope is a mailbox entry: a command, or a runtime message (timer tick,
// receive timeout, ordered function) that takes its place in the queue. A
// command that carries a trace context has a control record too.
type envelope[C any] struct {
	msg C
	ctl *control
}

// command reports whether e is a command, traced or not.
func (e envelope[C]) command() bool { return e.ctl == nil || e.ctl.kind == tracedCommand }

type controlKind uint8

// OwnTick, embedded in a message type, marks the messages an entity's
// owner sends it of its own: the ticks it arms on a clock of its own (a
// sharding region's retry tick, say), the answers of the calls it makes
// for the entity (a sharding coordinator's store calls). One still in the
// mailbox or stash when the entity stops, or told after it stopped, is
// dropped (the Tell still fails), not counted as a dead letter. Nobody
// who could lose it sent it, and a stop racing a tick or an answer is the
// normal end of such an entity, not a loss to report.
type OwnTick struct{}

func (OwnTick) ownTick() {}

type ownTick interface{ ownTick() }

const (
	timerTick controlKind = iota
	receiveTimeoutTick
	orderedFunc
	tracedCommand // msg carries parent, its sender's trace context
)

type control struct {
	kind   controlKind
	tick   timers.Tick
	gen    uint64
	fn     func()
	parent *trace.SpanContext
}

// extras holds what few entities use, so an idle entity does not pay for it.
type extras[C any] struct {
	timers     *timers.Scheduler[C]
	stash      *stash.Buffer[C]
	unstashed  ring.Queue[C]
	timeout    *receiveTimeout[C]
	timeoutGen uint64
	life       context.Context
	cancel     context.CancelFunc
	log        *slog.Logger
	stopErr    error // the reason, when stopping because of a failure
	// span is the trace context of the command being handled (SpanContext).
	span trace.SpanContext
}

type receiveTimeout[C any] struct {
	d       time.Duration
	msg     C
	gen     uint64
	last    time.Time
	pending timers.Timer
}

// Spawn starts an incarnation of the entity id. Its behavior is created on
// its own goroutine before its first message.
func Spawn[C any](sys *System, props *Props[C], id string) *Cell[C] {
	c := &Cell[C]{sys: sys, props: props, id: id, capacity: int32(min(max(props.MailboxCapacity, 0), math.MaxInt32))}
	if sys.metrics != nil {
		c.m = sys.metrics.Type(props.Key.name)
		c.stripe = c.m.Stripe()
	}
	c.behavior = Setup(props.Create)
	c.post(func() { c.become(c.behavior) })
	return c
}

// EntityType is the name of the entity's type.
func (c *Cell[C]) EntityType() string { return c.props.Key.name }

// EntityID implements Context.
func (c *Cell[C]) EntityID() string { return c.id }

// Self implements Context.
func (c *Cell[C]) Self() Ref[C] { return c }

// System implements Ref and Context.
func (c *Cell[C]) System() *System { return c.sys }

// Clock implements Context.
func (c *Cell[C]) Clock() timers.Clock { return c.sys.cfg.Clock }

// Tell implements Ref.
func (c *Cell[C]) Tell(msg C) error {
	_, err := c.tell(msg, false, 0, nil)
	return err
}

// Owner is the props' Owner, nil if none.
func OwnerOf[C any](c *Cell[C]) Owner[C] { return c.props.Owner }

// ShardOwner is an Owner that runs its entities in a shard, as sharding's
// shards do: the entities' reminders belong to that shard, so that the
// node hosting it fires them (docs/DESIGN.md, "Durable reminders").
type ShardOwner interface{ ShardID() string }

// ShardOf is the shard c runs in, "" when its owner is no ShardOwner.
func ShardOf[C any](c *Cell[C]) string {
	if s, ok := c.props.Owner.(ShardOwner); ok {
		return s.ShardID()
	}
	return ""
}

// Seal closes this incarnation to TellUnsealed; Tell still reaches it. An
// owner with a lock-free fast path to its entities (a shard) seals an
// incarnation under its own lock before it sends the stop message or stops
// it by force: a fast sender then either queued its message ahead of the
// stop, or learns it must take the owner's locked path, which holds the
// message for the next incarnation. Safe from any goroutine.
func Seal[C any](c *Cell[C]) {
	c.mu.Lock()
	c.status |= sealed
	c.mu.Unlock()
}

// TellUnsealed is Tell for an owner's fast path: when the incarnation is
// sealed or has stopped it reports false and does nothing else (no dead
// letter), for the caller to take its locked path instead. Otherwise it
// reports true and Tell's error, and, once msg is queued, keeps mark if
// it is greater than the marks of earlier calls: an owner's own clock
// (a shard's idle tick), read back with Mark, for which the cell's lock,
// taken anyway, is cheaper than a record of the owner's own. parent is
// the trace context msg carries, nil for none (see TellTraced).
func TellUnsealed[C any](c *Cell[C], msg C, mark uint64, parent *trace.SpanContext) (bool, error) {
	return c.tell(msg, true, mark, parent)
}

// Mark is the greatest mark TellUnsealed queued a message with, 0 if none.
// Safe from any goroutine.
func Mark[C any](c *Cell[C]) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mark
}

// tell queues msg; with unsealed it refuses, reporting false, a sealed or
// stopped incarnation, and keeps mark. A msg with a parent trace context
// takes a control record to carry it, so an untraced one costs nothing.
func (c *Cell[C]) tell(msg C, unsealed bool, mark uint64, parent *trace.SpanContext) (bool, error) {
	if c.sys.cfg.ForceSerialization && !c.props.LocalOnly {
		copied, err := roundTripExact(c.sys.cfg.Codec, msg)
		if err != nil {
			return true, fmt.Errorf("entity: %s/%s: message %w", c.props.Key.name, c.id, err)
		}
		msg = copied
	}
	c.mu.Lock()
	if unsealed && c.status&(sealed|terminated) != 0 {
		c.mu.Unlock()
		return false, nil
	}
	if c.status&terminated != 0 {
		// The stop's own error joins ErrStopped, so that a message sent
		// just after the stop fails as one still in the mailbox would (a
		// failed recovery is ErrUnavailable, say): which comes first is
		// the scheduler's choice, not the sender's.
		cause := ErrStopped
		if err := c.term.err; err != nil {
			cause = fmt.Errorf("%w: %w", ErrStopped, err)
		}
		c.mu.Unlock()
		if _, own := any(msg).(ownTick); !own {
			c.sys.deadLetter(c.m, cause, c.props.Key.name, c.id, c.name(), "sent to a stopped entity", msg)
		}
		return true, fmt.Errorf("%w: %s/%s", cause, c.props.Key.name, c.id)
	}
	if limit := int(c.capacity); limit > 0 && c.mailbox.Len() >= limit {
		c.mu.Unlock()
		return true, fmt.Errorf("%w: %s/%s (capacity %d)", ErrMailboxFull, c.props.Key.name, c.id, limit)
	}
	if c.status&suspended != 0 && c.mailbox.Len() >= c.props.heldCapacity() {
		c.mu.Unlock()
		return true, fmt.Errorf("%w: %s/%s is recovering or persisting and holds %d messages", ErrMailboxFull, c.props.Key.name, c.id, c.props.heldCapacity())
	}
	e := envelope[C]{msg: msg}
	if parent != nil {
		e.ctl = &control{kind: tracedCommand, parent: parent}
	}
	c.push(e)
	if mark > c.mark {
		c.mark = mark
	}
	if c.m != nil && c.status&(scheduled|suspended) == suspended { // held; else its run reports it
		c.reportDepth()
	}
	start := c.status&(scheduled|suspended) == 0
	if start {
		c.status |= scheduled
	}
	c.mu.Unlock()
	if start {
		c.sys.dispatch.submit(c)
	}
	return true, nil
}

// enqueueControl puts a runtime message into the mailbox, in order with
// commands. It reports false when the entity has stopped.
func (c *Cell[C]) enqueueControl(ctl *control) bool {
	c.mu.Lock()
	if c.status&terminated != 0 {
		c.mu.Unlock()
		return false
	}
	c.push(envelope[C]{ctl: ctl})
	if c.m != nil && c.status&(scheduled|suspended) == suspended {
		c.reportDepth()
	}
	start := c.status&(scheduled|suspended) == 0
	if start {
		c.status |= scheduled
	}
	c.mu.Unlock()
	if start {
		c.sys.dispatch.submit(c)
	}
	return true
}

// post runs fn on the entity's goroutine ahead of the mailbox, even while
// the mailbox is suspended. It reports false when the entity has stopped.
func (c *Cell[C]) post(fn func()) bool {
	c.mu.Lock()
	if c.status&terminated != 0 {
		c.mu.Unlock()
		return false
	}
	if c.control == nil {
		c.control = new(ring.Queue[func()])
	}
	c.control.Push(fn)
	start := c.status&scheduled == 0
	if start {
		c.status |= scheduled
	}
	c.mu.Unlock()
	if start {
		c.sys.dispatch.submit(c)
	}
	return true
}

// run handles up to Throughput messages, then yields the worker.
func (c *Cell[C]) run() {
	// The command being handled: if the handler crashes on it, the asks it
	// carries fail at once instead of waiting for their deadlines.
	var current C
	handling := false
	defer func() {
		if v := recover(); v != nil {
			c.crashed(v, current, handling)
		}
	}()
	for range c.sys.cfg.Throughput {
		handling = false
		c.mu.Lock()
		if c.control != nil && c.control.Len() > 0 {
			fn, _ := c.control.Pop()
			c.mu.Unlock()
			fn()
		} else if c.status&suspended == 0 && c.x != nil && c.x.unstashed.Len() > 0 {
			c.mu.Unlock()
			msg, _ := c.x.unstashed.Pop()
			current, handling = msg, true
			c.deliver(msg)
		} else if e, ok := c.popMailbox(); ok {
			c.mu.Unlock()
			current, handling = e.msg, e.command()
			c.handle(e)
		} else {
			c.status &^= scheduled
			if c.m != nil {
				c.reportRun()
			}
			c.shrinkMailbox()
			c.control = nil // empty here; idle entities keep no control queue
			c.mu.Unlock()
			return
		}
		if c.stopping {
			var err error
			if c.x != nil {
				err = c.x.stopErr
			}
			c.terminate(err)
			if handling && err != nil { // the handler failed the entity on this command
				c.sys.failAsks(current, fmt.Errorf("entity: ask: %s failed handling the command: %w: %w", c.name(), ErrStopped, err))
			}
		}
		if c.dead {
			return
		}
	}
	if c.m != nil {
		c.mu.Lock()
		c.reportRun()
		c.mu.Unlock()
	}
	c.sys.dispatch.submit(c)
}

// idleMailbox is how many entries of its mailbox's buffer an idle entity
// keeps: the buffer's first size.
const idleMailbox = 2

// maxSpare is the largest mailbox buffer, in entries, kept for another
// burst: a bigger one would be held by whichever cell takes it, however
// few messages that cell queues.
const maxSpare = 1 << 12

// push queues e; c.mu is held. A mailbox that outgrows its idle buffer
// swaps it for a spare from an earlier burst, when there is one, rather
// than grow through new buffers of 4, 8, 16... entries.
func (c *Cell[C]) push(e envelope[C]) {
	if c.mailbox.Len() == idleMailbox && c.mailbox.Cap() == idleMailbox && c.lent == nil {
		c.lent = sparesOf[C](c.sys).forBurst(&c.mailbox)
	}
	c.mailbox.Push(e)
}

// shrinkMailbox shrinks the mailbox of a cell going idle; c.mu is held. An
// idle entity keeps a buffer only as small as a message or two
// (docs/DESIGN.md, "Runtime rules"): told one message at a time, it would
// otherwise allocate it anew for each. A burst's larger buffer goes to the
// spares, for the next burst of any entity with the same command type.
func (c *Cell[C]) shrinkMailbox() {
	if c.mailbox.Len() != 0 {
		return
	}
	if c.mailbox.Cap() > idleMailbox {
		sparesOf[C](c.sys).forIdle(&c.mailbox, c.lent)
		c.lent = nil
	}
	c.mailbox.Shrink(idleMailbox)
}

// spares keeps the buffers cells grew for bursts, each in a holder, for
// the next burst of another cell. A cell that takes one keeps the holder,
// with its own idle buffer in it, and swaps back when it goes idle: two
// pool operations a burst, and in a steady state nothing is allocated, not
// even a holder or an idle buffer. burst is a sync.Pool, which the garbage
// collector empties: spares outlive no burst by long, and a quiet System
// keeps none.
type spares[C any] struct {
	burst sync.Pool // of *spare[C]
}

// sparesOf returns the spares of the mailboxes of entities with command
// type C. They are shared by every entity type with that command type, not
// kept per Props: sharding makes a Props per shard, and a pool that few
// cells share mostly misses, since a sync.Pool's Get does not find what
// another P Put last.
func sparesOf[C any](s *System) *spares[C] {
	key := any((*C)(nil)) // one per type C
	if v, ok := s.spares.Load(key); ok {
		return v.(*spares[C])
	}
	v, _ := s.spares.LoadOrStore(key, new(spares[C]))
	return v.(*spares[C])
}

type spare[C any] struct{ buf []envelope[C] }

// forBurst swaps the full idle buffer of q for a burst's spare, if any,
// and returns the spare's holder, which now holds the idle buffer, or nil.
func (s *spares[C]) forBurst(q *ring.Queue[envelope[C]]) *spare[C] {
	h, _ := s.burst.Get().(*spare[C])
	if h == nil {
		return nil
	}
	h.buf = q.Adopt(h.buf)
	return h
}

// forIdle takes the empty burst buffer of q, giving q the idle buffer
// lent holds, if any, and spares the burst buffer in lent's holder unless
// it is too big to be worth holding. The cell keeps no holder after it.
func (s *spares[C]) forIdle(q *ring.Queue[envelope[C]], lent *spare[C]) {
	buf := q.Take()
	if lent != nil && lent.buf != nil {
		q.Adopt(lent.buf)
	}
	if len(buf) > maxSpare {
		return // dropped, and lent's holder with it
	}
	if lent == nil {
		lent = new(spare[C])
	}
	lent.buf = buf
	s.burst.Put(lent)
}

// popMailbox is called with c.mu held.
func (c *Cell[C]) popMailbox() (envelope[C], bool) {
	if c.status&suspended != 0 {
		return envelope[C]{}, false
	}
	return c.mailbox.Pop()
}

// reportDepth brings the type's mailbox gauge up to date with this cell;
// c.mu is held.
func (c *Cell[C]) reportDepth() {
	if d := int32(c.mailbox.Len()); d != c.reported {
		c.m.Queued(int(d - c.reported))
		c.reported = d
	}
}

// reportRun adds what the run delivered and the mailbox's depth to the
// type's metrics; c.mu is held.
func (c *Cell[C]) reportRun() {
	c.m.Delivered(c.stripe, int(c.handled))
	c.handled = 0
	c.reportDepth()
}

func (c *Cell[C]) handle(e envelope[C]) {
	if e.ctl == nil {
		c.deliver(e.msg)
		return
	}
	switch e.ctl.kind {
	case timerTick:
		if c.x != nil && c.x.timers != nil {
			if msg, ok := c.x.timers.Accept(e.ctl.tick); ok {
				c.deliverAs(msg, e.ctl.tick.ResetsReceiveTimeout())
			}
		}
	case receiveTimeoutTick:
		c.receiveTimeoutFired(e.ctl.gen)
	case orderedFunc:
		e.ctl.fn()
	case tracedCommand:
		c.deliverTraced(e.msg, *e.ctl.parent)
	}
}

func (c *Cell[C]) deliver(msg C) { c.deliverAs(msg, true) }

// deliverAs hands msg to the behavior; active says whether it counts as
// activity for the receive timeout (timer messages do not, by default).
func (c *Cell[C]) deliverAs(msg C, active bool) {
	c.handled++
	next := c.behavior.Receive(c, msg)
	if active && c.x != nil && c.x.timeout != nil { // idle time starts when the handler returns
		c.x.timeout.last = c.sys.cfg.Clock.Now()
	}
	if _, ok := next.(unhandled[C]); ok {
		c.sys.deadLetter(c.m, ErrUnhandled, c.props.Key.name, c.id, c.name(), "unhandled", msg)
		return
	}
	c.become(next)
}

// become installs next as the behavior for the following message.
func (c *Cell[C]) become(next Behavior[C]) {
	for {
		switch b := next.(type) {
		case same[C]:
			return
		case unhandled[C]:
			panic("entity: Unhandled is a reply to a message, not an initial behavior")
		case stopped[C]:
			c.stopping = true
			return
		case setup[C]:
			next = b.f(c)
			if _, ok := next.(same[C]); ok {
				panic("entity: Setup returned Same")
			}
		case nil:
			panic("entity: behavior returned nil; use Same")
		default:
			c.behavior = next
			return
		}
	}
}

// crashed stops the entity whose handler panicked with v; handling says
// whether it was handling the command current.
func (c *Cell[C]) crashed(v any, current C, handling bool) {
	err := &PanicError{Value: v, Stack: debug.Stack()}
	c.Log().Error("entity handler panicked; stopping it", "panic", v, "stack", string(err.Stack))
	c.terminate(err)
	if handling {
		c.sys.failAsks(current, fmt.Errorf("entity: ask: %s crashed handling the command: %w: %w", c.name(), ErrStopped, err))
	}
}

// name is the entity's type and id, for logs and errors.
func (c *Cell[C]) name() string { return c.props.Key.name + "/" + c.id }

// terminate ends this incarnation: PostStop, timers off, mailbox to dead
// letters, owner told. It runs on the entity's goroutine.
func (c *Cell[C]) terminate(err error) {
	if c.dead {
		return
	}
	c.dead, c.stopping = true, false
	if h, ok := c.behavior.(SignalHandler[C]); ok {
		c.signalPostStop(h, err)
	}
	if x := c.x; x != nil {
		if x.timers != nil {
			x.timers.CancelAll()
		}
		if x.timeout != nil {
			x.timeout.pending.Stop()
			x.timeout = nil
		}
		if x.cancel != nil {
			x.cancel()
		}
	}
	c.mu.Lock()
	c.status = terminated
	left := c.mailbox
	c.mailbox = ring.Queue[envelope[C]]{}
	if c.m != nil {
		c.m.Delivered(c.stripe, int(c.handled))
		c.m.Queued(-int(c.reported))
		c.handled, c.reported = 0, 0
	}
	c.control = nil
	if c.term == nil {
		c.term = &termination{done: make(chan struct{})}
	}
	c.term.err = err
	done := c.term.done
	c.mu.Unlock()
	// What the incarnation leaves is counted as dead letters before Done
	// closes, so Done means all is settled; the asks those messages carry
	// fail after it, so an asker told ErrStopped finds Done closed.
	type leftover struct {
		reason string
		msg    C
	}
	var lost []leftover
	deadLetter := func(reason string, m C) {
		if _, own := any(m).(ownTick); own {
			return
		}
		c.sys.deadLetter(c.m, nil, c.props.Key.name, c.id, c.name(), reason, m)
		lost = append(lost, leftover{reason, m})
	}
	if x := c.x; x != nil {
		x.unstashed.Drain(func(m C) { deadLetter("unstashed, not handled before stop", m) })
		if x.stash != nil {
			for _, m := range x.stash.Clear() {
				deadLetter("stashed when the entity stopped", m)
			}
		}
	}
	left.Drain(func(e envelope[C]) {
		if e.command() {
			deadLetter("left in mailbox of stopped entity", e.msg)
		}
	})
	close(done)
	cause := ErrStopped
	if err != nil {
		cause = fmt.Errorf("%w: %w", ErrStopped, err)
	}
	for _, l := range lost {
		c.sys.failAsks(l.msg, fmt.Errorf("entity: ask: %s %s: %w", c.name(), l.reason, cause))
	}
	if c.props.Owner != nil {
		c.props.Owner.Stopped(c, err)
	}
}

func (c *Cell[C]) signalPostStop(h SignalHandler[C], err error) {
	defer func() {
		if v := recover(); v != nil {
			c.Log().Error("PostStop handler panicked", "panic", v)
		}
	}()
	h.OnSignal(c, PostStop{Err: err})
}

// Done is closed when this incarnation has stopped. Safe from any goroutine.
func (c *Cell[C]) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.term == nil {
		c.term = &termination{done: make(chan struct{})}
	}
	return c.term.done
}

// Err is why the incarnation stopped: nil while running or after a normal stop.
func (c *Cell[C]) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.status&terminated == 0 {
		return nil
	}
	return c.term.err
}

// StopNow stops the incarnation from outside, ahead of its queued mail,
// which becomes dead letters. Safe from any goroutine.
func (c *Cell[C]) StopNow() { c.post(func() { c.stopping = true }) }

// Stop implements Context.
func (c *Cell[C]) Stop() { c.stopping = true }

// Fail stops the entity after the current message with err as the reason
// its owner sees, so a supervisor can tell a crash from a normal stop. Call
// it from the entity's goroutine.
func Fail[C any](c *Cell[C], err error) {
	c.stopping = true
	if x := c.extras(); x.stopErr == nil {
		x.stopErr = err
	}
}

// Behavior is the behavior that will handle the next message. Call it from
// the entity's goroutine (PostOrdered), or after Done.
func BehaviorOf[C any](c *Cell[C]) Behavior[C] { return c.behavior }

// Passivate implements Context.
func (c *Cell[C]) Passivate() {
	if c.props.Owner == nil {
		c.stopping = true
		return
	}
	c.props.Owner.Passivate(c)
}

func (c *Cell[C]) extras() *extras[C] {
	if c.x == nil {
		c.x = &extras[C]{}
	}
	return c.x
}

// Log implements Context. Its records carry entity_type and entity_id.
func (c *Cell[C]) Log() *slog.Logger {
	x := c.extras()
	if x.log == nil {
		x.log = slog.New(&entityLogHandler{parent: c.sys.log.Handler(), typ: c.props.Key.name, id: c.id})
	}
	return x.log
}

// entityLogHandler is the parent handler with an entity's type and id
// added, as Logger.With would add them, except that it asks the parent for
// that handler only when the entity first logs: most incarnations take
// their logger and never log, and a text or JSON handler formats the
// attributes as it is made.
type entityLogHandler struct {
	parent  slog.Handler
	typ, id string
	once    sync.Once
	with    slog.Handler
}

func (h *entityLogHandler) handler() slog.Handler {
	h.once.Do(func() {
		h.with = h.parent.WithAttrs([]slog.Attr{slog.String("entity_type", h.typ), slog.String("entity_id", h.id)})
	})
	return h.with
}

func (h *entityLogHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.parent.Enabled(ctx, l)
}

func (h *entityLogHandler) Handle(ctx context.Context, r slog.Record) error {
	return h.handler().Handle(ctx, r)
}

func (h *entityLogHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return h.handler().WithAttrs(attrs)
}

func (h *entityLogHandler) WithGroup(name string) slog.Handler { return h.handler().WithGroup(name) }

// Timers implements Context.
func (c *Cell[C]) Timers() *timers.Scheduler[C] {
	x := c.extras()
	if x.timers == nil {
		x.timers = timers.New[C](c.sys.cfg.Clock, func(t timers.Tick) {
			c.enqueueControl(&control{kind: timerTick, tick: t})
		})
	}
	return x.timers
}

// Stash implements Context.
func (c *Cell[C]) Stash() *stash.Buffer[C] {
	x := c.extras()
	if x.stash == nil {
		x.stash = stash.New(c.props.StashCapacity, func(items []C) {
			// Ahead of anything unstashed earlier and still waiting: these
			// were stashed before it was handed back.
			x.unstashed.PushFront(items)
		})
	}
	return x.stash
}

// PipeToSelf implements Context.
func (c *Cell[C]) PipeToSelf(work func(context.Context) C) {
	x := c.extras()
	if x.life == nil {
		x.life, x.cancel = context.WithCancel(context.Background())
	}
	life := x.life
	go func() {
		defer func() {
			if v := recover(); v != nil {
				err := &PanicError{Value: v, Stack: debug.Stack()}
				c.post(func() {
					c.Log().Error("PipeToSelf work panicked; stopping entity", "panic", v)
					c.terminate(err)
				})
			}
		}()
		msg := work(life)
		if err := c.Tell(msg); err != nil && life.Err() == nil {
			c.sys.log.Warn("PipeToSelf result not delivered", "entity_type", c.props.Key.name, "entity_id", c.id, "err", err)
		}
	}()
}

// SetReceiveTimeout implements Context.
func (c *Cell[C]) SetReceiveTimeout(d time.Duration, msg C) {
	x := c.extras()
	if x.timeout != nil {
		x.timeout.pending.Stop()
	}
	x.timeoutGen++ // never reused, so a tick of a cancelled timeout stays stale
	x.timeout = &receiveTimeout[C]{d: d, msg: msg, gen: x.timeoutGen, last: c.sys.cfg.Clock.Now()}
	c.armReceiveTimeout(d)
}

func (c *Cell[C]) armReceiveTimeout(delay time.Duration) {
	rt := c.x.timeout
	gen := rt.gen
	rt.pending = c.sys.cfg.Clock.AfterFunc(delay, func() {
		c.enqueueControl(&control{kind: receiveTimeoutTick, gen: gen})
	})
}

// CancelReceiveTimeout implements Context.
func (c *Cell[C]) CancelReceiveTimeout() {
	if c.x == nil || c.x.timeout == nil {
		return
	}
	c.x.timeout.pending.Stop()
	c.x.timeout = nil
}

func (c *Cell[C]) receiveTimeoutFired(gen uint64) {
	rt := c.x.timeout
	if rt == nil || rt.gen != gen {
		return // cancelled or replaced
	}
	idle := c.sys.cfg.Clock.Now().Sub(rt.last)
	if idle < rt.d {
		c.armReceiveTimeout(rt.d - idle)
		return
	}
	c.armReceiveTimeout(rt.d)
	c.deliver(rt.msg)
}

// Suspend holds the mailbox: until Resume, only runtime work posted with
// Post runs. Event-sourced behaviors suspend while they recover or persist,
// so commands wait in order in the mailbox. Call it from the entity's goroutine.
func Suspend[C any](c *Cell[C]) {
	c.mu.Lock()
	c.status |= suspended
	c.mu.Unlock()
}

// Resume releases the mailbox held by Suspend. Call it from the entity's goroutine.
func Resume[C any](c *Cell[C]) {
	c.mu.Lock()
	c.status &^= suspended
	c.mu.Unlock()
}

// Post runs fn on the entity's goroutine, ahead of its mailbox and even while
// it is suspended. It reports false, and fn never runs, when the entity has
// stopped. Safe from any goroutine.
func Post[C any](c *Cell[C], fn func()) bool { return c.post(fn) }

// PostOrdered runs fn on the entity's goroutine in mailbox order: after every
// message already queued, and not while the mailbox is suspended. It reports
// false when the entity has stopped. Safe from any goroutine.
func PostOrdered[C any](c *Cell[C], fn func()) bool {
	return c.enqueueControl(&control{kind: orderedFunc, fn: fn})
}

// TellOwn tells c msg, in mailbox order, as a message of its owner's own
// (a shard's stop message), as OwnTick marks a type's: left in the
// mailbox when the incarnation stops, it is dropped, not counted as a dead
// letter, and it reports false, with no dead letter either, when the
// incarnation has stopped. The mailbox's capacity does not refuse it: an
// owner sends an incarnation few of these, never a stream. Safe from any
// goroutine.
func TellOwn[C any](c *Cell[C], msg C) bool {
	return c.enqueueControl(&control{kind: orderedFunc, fn: func() { c.deliver(msg) }})
}
