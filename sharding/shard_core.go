package sharding

import (
	"errors"
	"maps"
	"slices"
	"time"
)

// shardCore is the bookkeeping of one shard as a pure state machine, in
// the style of coordinatorCore and go.etcd.io/raft's Step/Ready: each input
// method changes its state and queues effects (start this entity, send it
// the stop message, arm a timer, write a remember record, report the
// hand-off done) for the runner to carry out in order. It holds no lock,
// starts no goroutine and reads no clock: time comes in with the inputs
// that need it, and the back-off jitter from random.
//
// H is the runner's handle on one incarnation of an entity (its cell). The
// core only stores and compares handles, so that a report about an earlier
// incarnation is told apart from one about the current one.
type shardCore[C any, H comparable] struct {
	cfg    shardCoreConfig
	random func() float64 // back-off jitter, in [0, 1)

	entities map[string]*coreEntity[C, H]

	handingOff    bool
	reportHandOff bool         // the end of the hand-off is still to be reported
	leftover      []pending[C] // messages for the shard's next home
	handOffTimer  uint64       // generation of the armed hand-off timeout; 0 for none

	recovery      []string // remembered entities still to start
	recoveryTimer uint64

	lastGen uint64 // timer generations: a fired timer is acted upon only if still current

	out []shardEffect[C, H]
}

// shardCoreConfig is what a shard's decisions depend on.
type shardCoreConfig struct {
	hasStopMessage                       bool // without one, stopping an entity stops it at once
	remember                             bool
	stopTimeout, handOffTimeout          time.Duration
	restartBackoffMin, restartBackoffMax time.Duration
	recoveryRate                         int // remembered entities started per recoveryInterval; 0 for all at once
	recoveryInterval                     time.Duration
	// bufferLimit bounds the messages held for one entity while it stops
	// or backs off; 0 for no bound. The runner sets it to what a new
	// incarnation's empty mailbox is sure to accept, so that the restart
	// hands the buffer over whole.
	bufferLimit int
}

type entityState uint8

const (
	active      entityState = iota
	passivating             // stop message sent; new messages wait in buffer
	backingOff              // failed; restarts after a back-off
)

// stopReason says why an entity was asked to stop, for logs and timeouts.
type stopReason uint8

const (
	stopForPassivation stopReason = iota
	stopForIdle
	stopForHandOff
)

func (r stopReason) String() string {
	switch r {
	case stopForIdle:
		return "idle passivation"
	case stopForHandOff:
		return "hand-off"
	}
	return "passivation"
}

type coreEntity[C any, H comparable] struct {
	handle     H // the current incarnation; zero until the runner attaches it
	state      entityState
	stopWhy    stopReason
	startAgain bool // StartEntity while passivating: start it again once stopped
	buffer     []C
	asks       []bool    // per message of buffer: it came fail-fast (an ask; see backOff)
	forced     bool      // the current incarnation was stopped by force already
	lastTick   uint64    // idle-passivation tick of the last message
	timer      uint64    // generation of the armed stop timeout or restart; 0 for none
	restarts   *restarts // allocated on the first failure
}

// restarts is the back-off of an entity that failed: exponential from
// restartBackoffMin to restartBackoffMax, multiplier 1.5, randomized by
// ±50% (cenkalti/backoff's defaults, computed here so that the jitter can
// be injected).
type restarts struct {
	interval  time.Duration // the next back-off before jitter
	attempt   int           // back-offs since the last reset, 1 for the first
	restarted time.Time     // when the last back-off ended
	cause     error         // why the entity stopped, while backing off
	until     time.Time     // when the current back-off ends
	refused   bool          // an ask was refused during this back-off
}

const (
	backoffMultiplier    = 1.5
	backoffRandomization = 0.5
)

// next returns the back-off to wait now and grows the interval.
func (r *restarts) next(random float64, max time.Duration) time.Duration {
	delta := backoffRandomization * float64(r.interval)
	lo, hi := float64(r.interval)-delta, float64(r.interval)+delta
	d := time.Duration(lo + random*(hi-lo+1))
	if float64(r.interval) >= float64(max)/backoffMultiplier {
		r.interval = max
	} else {
		r.interval = time.Duration(float64(r.interval) * backoffMultiplier)
	}
	return d
}

// effectKind names what the runner is to do.
type effectKind uint8

const (
	// effStart: start a new incarnation of entityID, attach its handle,
	// then tell it msgs in order (see undelivered).
	effStart effectKind = iota
	// effSendStop: tell handle the entity type's stop message.
	effSendStop
	// effForceStop: stop handle at once, without its stop message.
	effForceStop
	// effArmTimer: call timerFired(timer, entityID, gen) after after.
	effArmTimer
	// effCancelTimer: the timer of generation gen is not needed any more.
	effCancelTimer
	// effRemember: write that entityID started (add) or stopped.
	effRemember
	// effHandedOff: every entity stopped; leftover goes to the next home.
	effHandedOff
	// effRefuseAsks: fail the asks msgs carry as unavailable (an
	// UnavailableError with cause, retry after after): the entity backs off.
	effRefuseAsks
)

// forceReason says why an entity is stopped by force.
type forceReason uint8

const (
	forceNoStopMessage  forceReason = iota // the type has no stop message
	forceStopTimeout                       // it did not stop within its timeout
	forceHandOffTimeout                    // the shard's hand-off timed out
	forceTerminate                         // the node terminates
)

// timerKind names a timer of the shard.
type timerKind uint8

const (
	timerStopTimeout timerKind = iota // an entity's stop timeout
	timerRestart                      // the end of an entity's back-off
	timerHandOff                      // the shard's hand-off timeout
	timerRecovery                     // the next batch of remembered entities
)

// shardEffect is one thing for the runner to do; which fields matter
// depends on kind.
type shardEffect[C any, H comparable] struct {
	kind     effectKind
	entityID string
	handle   H
	msgs     []C
	why      stopReason
	force    forceReason
	timer    timerKind
	gen      uint64
	after    time.Duration
	add      bool
	attempt  int // effArmTimer of timerRestart: the back-off's attempt
	// effStart: the incarnation follows a failure's back-off.
	afterBackOff bool
	cause        error // and the failure it follows
	leftover     []pending[C]
}

// deliverVerdict tells the runner what became of a message.
type deliverVerdict uint8

const (
	// deliverTell: tell the message to the returned handle.
	deliverTell deliverVerdict = iota
	// deliverTellNew: tell it to the incarnation the effects just started.
	deliverTellNew
	// deliverHeld: the shard keeps it (entity stopping, or shard handed off).
	deliverHeld
	// deliverUnavailable: refused, the entity backs off (see backOffOf).
	deliverUnavailable
	// deliverBufferFull: refused, the entity's buffer is at bufferLimit.
	deliverBufferFull
)

func newShardCore[C any, H comparable](cfg shardCoreConfig, random func() float64) *shardCore[C, H] {
	return &shardCore[C, H]{cfg: cfg, random: random, entities: make(map[string]*coreEntity[C, H])}
}

func (c *shardCore[C, H]) emit(e shardEffect[C, H]) { c.out = append(c.out, e) }

func (c *shardCore[C, H]) arm(kind timerKind, entityID string, after time.Duration) uint64 {
	c.lastGen++
	c.emit(shardEffect[C, H]{kind: effArmTimer, timer: kind, entityID: entityID, gen: c.lastGen, after: after})
	return c.lastGen
}

func (c *shardCore[C, H]) cancel(gen *uint64) {
	if *gen != 0 {
		c.emit(shardEffect[C, H]{kind: effCancelTimer, gen: *gen})
		*gen = 0
	}
}

// deliver takes a message for entityID. With failFast an entity that is
// backing off refuses it; with accepted (the message was accepted
// elsewhere already, and must not be refused now) bufferLimit does not
// apply. A message the core holds counts at idle tick tick; one to tell,
// only once the incarnation took it (see told).
func (c *shardCore[C, H]) deliver(entityID string, msg C, failFast, accepted bool, tick uint64) (deliverVerdict, H) {
	var none H
	e := c.entities[entityID]
	verdict := deliverTell
	if e == nil {
		if c.handingOff { // the region buffers during hand-offs; this is a late straggler
			c.leftover = append(c.leftover, pending[C]{entityID: entityID, msg: msg})
			return deliverHeld, none
		}
		e = c.spawn(entityID, nil)
		verdict = deliverTellNew
	}
	if failFast && e.state == backingOff && e.restarts != nil {
		e.restarts.refused = true // its caller comes back: restart it then
		return deliverUnavailable, none
	}
	if e.state != active {
		if !c.hold(e, msg, accepted, failFast) {
			return deliverBufferFull, none
		}
		e.lastTick = tick
		return deliverHeld, none
	}
	return verdict, e.handle
}

// hold buffers msg for the entity's next incarnation, unless the buffer is
// at bufferLimit and msg was not accepted elsewhere already. ask: msg came
// fail-fast, so that a failure refuses it instead (see backOff).
func (c *shardCore[C, H]) hold(e *coreEntity[C, H], msg C, accepted, ask bool) bool {
	if !accepted && c.cfg.bufferLimit > 0 && len(e.buffer) >= c.cfg.bufferLimit {
		return false
	}
	e.buffer, e.asks = append(e.buffer, msg), append(e.asks, ask)
	return true
}

// told reports that the incarnation deliver named took the message: it
// counts at idle tick tick (an earlier tick than one it knows changes
// nothing: the runner also reports what it told without the core). A
// message the mailbox refused does not keep an entity from passivating.
func (c *shardCore[C, H]) told(entityID string, tick uint64) {
	if e := c.entities[entityID]; e != nil && tick > e.lastTick {
		e.lastTick = tick
	}
}

// undelivered takes back a message the runner could not tell because the
// incarnation had stopped (its Stopped report is still to come): it waits
// for the next incarnation. It reports false, keeping nothing, when the
// buffer is at bufferLimit and msg was not accepted before (accepted: a
// message of the buffer the restart handed over). ask is deliver's
// failFast.
func (c *shardCore[C, H]) undelivered(entityID string, msg C, accepted, ask bool) bool {
	e := c.entities[entityID]
	return e == nil || c.hold(e, msg, accepted, ask)
}

// startEntity makes sure entityID runs (Region.StartEntity): an entity on
// its way out comes back, as in Akka's StartEntitySpec.
func (c *shardCore[C, H]) startEntity(entityID string, now time.Time) {
	e := c.entities[entityID]
	if e == nil {
		if c.handingOff {
			c.leftover = append(c.leftover, pending[C]{entityID: entityID, start: true})
			return
		}
		c.spawn(entityID, nil)
		return
	}
	switch e.state {
	case passivating:
		e.startAgain = true
	case backingOff:
		c.cancel(&e.timer)
		e.restarts.restarted = now // the back-off ends here
		c.restartAfterBackOff(entityID, e)
	}
}

// attach records the handle of the incarnation an effStart started.
func (c *shardCore[C, H]) attach(entityID string, h H) {
	if e := c.entities[entityID]; e != nil {
		e.handle = h
	}
}

// handle is the current incarnation of entityID.
func (c *shardCore[C, H]) handle(entityID string) H {
	if e := c.entities[entityID]; e != nil {
		return e.handle
	}
	var none H
	return none
}

// backOffOf reports when entityID's back-off ends and why it failed.
func (c *shardCore[C, H]) backOffOf(entityID string) (until time.Time, cause error) {
	if e := c.entities[entityID]; e != nil && e.restarts != nil {
		return e.restarts.until, e.restarts.cause
	}
	return time.Time{}, nil
}

// spawn starts an incarnation, handing it msgs.
func (c *shardCore[C, H]) spawn(entityID string, msgs []C) *coreEntity[C, H] {
	e := c.entities[entityID]
	if e == nil {
		e = &coreEntity[C, H]{}
		c.entities[entityID] = e
		if c.cfg.remember {
			c.emit(shardEffect[C, H]{kind: effRemember, entityID: entityID, add: true})
		}
	}
	var none H
	e.handle, e.state, e.forced = none, active, false
	c.emit(shardEffect[C, H]{kind: effStart, entityID: entityID, msgs: msgs})
	return e
}

// restart starts a new incarnation and hands it the buffered messages in order.
func (c *shardCore[C, H]) restart(entityID string, e *coreEntity[C, H]) {
	buf := e.buffer
	e.buffer, e.asks, e.startAgain = nil, nil, false
	c.spawn(entityID, buf)
}

// restartAfterBackOff is restart at the end of a failure's back-off; its
// effStart says so.
func (c *shardCore[C, H]) restartAfterBackOff(entityID string, e *coreEntity[C, H]) {
	c.restart(entityID, e)
	c.out[len(c.out)-1].afterBackOff = true
}

// passivate is the entity's own request to stop (ctx.Passivate()).
func (c *shardCore[C, H]) passivate(entityID string, h H) {
	if e := c.entities[entityID]; e != nil && e.handle == h && e.state == active {
		c.stopEntity(entityID, e, stopForPassivation)
	}
}

// stopEntity sends the stop message and arms the stop timeout.
func (c *shardCore[C, H]) stopEntity(entityID string, e *coreEntity[C, H], why stopReason) {
	e.state, e.stopWhy = passivating, why
	if !c.cfg.hasStopMessage {
		c.forceStop(entityID, e, forceNoStopMessage)
		return
	}
	c.emit(shardEffect[C, H]{kind: effSendStop, entityID: entityID, handle: e.handle, why: why})
	c.cancel(&e.timer)
	if why != stopForHandOff { // the shard's hand-off timeout bounds a hand-off
		e.timer = c.arm(timerStopTimeout, entityID, c.cfg.stopTimeout)
	}
}

// forceStop stops the current incarnation at once, unless it was already.
func (c *shardCore[C, H]) forceStop(entityID string, e *coreEntity[C, H], force forceReason) {
	c.cancel(&e.timer)
	if e.forced {
		return
	}
	e.forced = true
	c.emit(shardEffect[C, H]{kind: effForceStop, entityID: entityID, handle: e.handle, why: e.stopWhy, force: force,
		after: c.cfg.stopTimeout})
}

// errStoppedItself is the cause of a remembered entity's back-off when it
// stopped by itself, without passivating.
var errStoppedItself = errors.New("sharding: remembered entity stopped without passivating")

// stopped reports that incarnation h of entityID stopped, with err if it failed.
func (c *shardCore[C, H]) stopped(entityID string, h H, err error, now time.Time) {
	e := c.entities[entityID]
	if e == nil || e.handle != h {
		return // an earlier incarnation
	}
	c.cancel(&e.timer)
	if c.handingOff {
		c.drop(entityID, e)
		c.maybeHandedOff()
		return
	}
	switch {
	case err != nil:
		c.backOff(entityID, e, err, now)
	case e.state == passivating && (len(e.buffer) > 0 || e.startAgain):
		c.restart(entityID, e)
	case e.state == passivating:
		c.drop(entityID, e)
		if c.cfg.remember {
			c.emit(shardEffect[C, H]{kind: effRemember, entityID: entityID, add: false})
		}
	case c.cfg.remember:
		c.backOff(entityID, e, errStoppedItself, now) // stopped without passivating: remembered entities come back
	case len(e.buffer) > 0:
		c.restart(entityID, e)
	default:
		c.drop(entityID, e)
	}
}

// drop forgets an entity. Only a hand-off drops one with waiting
// messages; they go to the shard's next home.
func (c *shardCore[C, H]) drop(entityID string, e *coreEntity[C, H]) {
	for _, m := range e.buffer {
		c.leftover = append(c.leftover, pending[C]{entityID: entityID, msg: m})
	}
	if e.startAgain && len(e.buffer) == 0 {
		c.leftover = append(c.leftover, pending[C]{entityID: entityID, start: true})
	}
	delete(c.entities, entityID)
}

// backOff schedules the restart of a failed entity.
func (c *shardCore[C, H]) backOff(entityID string, e *coreEntity[C, H], cause error, now time.Time) {
	switch {
	case e.restarts == nil:
		e.restarts = &restarts{interval: c.cfg.restartBackoffMin}
	case now.Sub(e.restarts.restarted) > c.cfg.restartBackoffMax:
		// It ran longer than the longest back-off: a new failure, not a crash loop.
		e.restarts.interval, e.restarts.attempt = c.cfg.restartBackoffMin, 0
	}
	e.state = backingOff
	e.restarts.attempt++
	delay := e.restarts.next(c.random(), c.cfg.restartBackoffMax)
	e.restarts.cause, e.restarts.until, e.restarts.refused = cause, now.Add(delay), false
	c.lastGen++
	e.timer = c.lastGen
	c.emit(shardEffect[C, H]{kind: effArmTimer, timer: timerRestart, entityID: entityID, gen: e.timer, after: delay,
		attempt: e.restarts.attempt, cause: cause})
	// Asks held while the failed incarnation stopped (told to it after it
	// stopped, before its failure was reported) are refused now, as they
	// would be had they come a moment later: kept for the restart, their
	// callers would wait out the back-off, and the restart may fail again
	// (docs/DESIGN.md, Cluster and leases). Tells stay for the restart.
	if refused := e.takeAsks(); len(refused) > 0 {
		e.restarts.refused = true // their callers come back: restart it then
		c.emit(shardEffect[C, H]{kind: effRefuseAsks, entityID: entityID, msgs: refused, after: delay, cause: cause})
	}
}

// takeAsks removes the fail-fast messages from the buffer and returns them.
func (e *coreEntity[C, H]) takeAsks() []C {
	var asks []C
	kept := 0
	for i, m := range e.buffer {
		if e.asks[i] {
			asks = append(asks, m)
			continue
		}
		e.buffer[kept], e.asks[kept] = m, false
		kept++
	}
	clear(e.buffer[kept:])
	e.buffer, e.asks = e.buffer[:kept], e.asks[:kept]
	return asks
}

// timerFired steps the core with a timer the runner armed; a timer that
// was cancelled or replaced meanwhile does nothing.
func (c *shardCore[C, H]) timerFired(kind timerKind, entityID string, gen uint64, now time.Time) {
	switch kind {
	case timerStopTimeout:
		e := c.entities[entityID]
		if e == nil || e.timer != gen {
			return
		}
		e.timer = 0
		c.forceStop(entityID, e, forceStopTimeout)
	case timerRestart:
		e := c.entities[entityID]
		if e == nil || e.timer != gen || e.state != backingOff || c.handingOff {
			return
		}
		e.timer = 0
		e.restarts.restarted = now
		if len(e.buffer) == 0 && !c.cfg.remember && !e.restarts.refused {
			delete(c.entities, entityID) // nobody waits; the next message starts it
			return
		}
		c.restartAfterBackOff(entityID, e)
	case timerHandOff:
		if c.handOffTimer != gen {
			return
		}
		c.handOffTimer = 0
		for _, id := range slices.Sorted(maps.Keys(c.entities)) {
			c.forceStop(id, c.entities[id], forceHandOffTimeout)
		}
	case timerRecovery:
		if c.recoveryTimer != gen {
			return
		}
		c.recoveryTimer = 0
		c.recoverBatch()
	}
}

// remembered starts the entities the remember store lists for the shard,
// recoveryRate at a time.
func (c *shardCore[C, H]) remembered(ids []string) {
	if c.handingOff {
		return
	}
	c.recovery = append(c.recovery, ids...)
	if c.recoveryTimer == 0 {
		c.recoverBatch()
	}
}

func (c *shardCore[C, H]) recoverBatch() {
	if c.handingOff {
		c.recovery = nil
		return
	}
	n := len(c.recovery)
	if c.cfg.recoveryRate > 0 {
		n = min(n, c.cfg.recoveryRate)
	}
	for _, id := range c.recovery[:n] {
		if c.entities[id] == nil {
			c.spawn(id, nil)
		}
	}
	c.recovery = c.recovery[n:]
	if len(c.recovery) == 0 {
		c.recovery = nil
		return
	}
	c.recoveryTimer = c.arm(timerRecovery, "", c.cfg.recoveryInterval)
}

// passivateIdle stops entities that received nothing through sharding for
// more than ticks ticks: a message came after tick lastTick, so after tick
// lastTick+ticks+1 it is at least ticks intervals old.
func (c *shardCore[C, H]) passivateIdle(now, ticks uint64) {
	if c.handingOff {
		return
	}
	var idle []string
	for id, e := range c.entities {
		if e.state == active && now-e.lastTick > ticks {
			idle = append(idle, id)
		}
	}
	slices.Sort(idle)
	for _, id := range idle {
		c.stopEntity(id, c.entities[id], stopForIdle)
	}
}

// handOff stops every entity through its stop message; effHandedOff
// follows, with the messages that were waiting for entities in order, once
// all have stopped or the hand-off timeout stopped them by force.
func (c *shardCore[C, H]) handOff() {
	c.handingOff, c.reportHandOff = true, true
	c.recovery = nil
	c.cancel(&c.recoveryTimer)
	for _, id := range slices.Sorted(maps.Keys(c.entities)) {
		e := c.entities[id]
		switch e.state {
		case active:
			c.stopEntity(id, e, stopForHandOff)
		case backingOff:
			c.cancel(&e.timer)
			c.drop(id, e)
		}
	}
	c.handOffTimer = c.arm(timerHandOff, "", c.cfg.handOffTimeout)
	c.maybeHandedOff()
}

// maybeHandedOff completes the hand-off when no entity is left.
func (c *shardCore[C, H]) maybeHandedOff() {
	if !c.handingOff || len(c.entities) > 0 || !c.reportHandOff {
		return
	}
	c.cancel(&c.handOffTimer)
	c.emit(shardEffect[C, H]{kind: effHandedOff, leftover: c.leftover})
	c.reportHandOff, c.leftover = false, nil
}

// terminate stops every entity at once, as a crash would: the shard stays
// handed off with nobody to tell, so nothing restarts and nothing is
// reported. The runner waits for the incarnations it force-stops, then
// calls forgetAll. dropped counts the messages the shard held and now
// loses: those buffered for entities that were stopping or backing off,
// and a hand-off's leftover for the next home.
func (c *shardCore[C, H]) terminate() (dropped int) {
	for _, p := range c.leftover {
		if !p.start {
			dropped++
		}
	}
	c.handingOff, c.reportHandOff, c.leftover, c.recovery = true, false, nil, nil
	c.cancel(&c.handOffTimer)
	c.cancel(&c.recoveryTimer)
	for _, id := range slices.Sorted(maps.Keys(c.entities)) {
		e := c.entities[id]
		c.cancel(&e.timer)
		dropped += len(e.buffer)
		e.buffer, e.asks = nil, nil
		c.emit(shardEffect[C, H]{kind: effForceStop, entityID: id, handle: e.handle, force: forceTerminate})
	}
	return dropped
}

// forgetAll empties a terminated shard.
func (c *shardCore[C, H]) forgetAll() { clear(c.entities) }

// entityIDs lists the shard's entities, sorted.
func (c *shardCore[C, H]) entityIDs() []string { return slices.Sorted(maps.Keys(c.entities)) }
