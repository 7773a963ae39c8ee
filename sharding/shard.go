package sharding

import (
	"context"
	"errors"
	"maps"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/timers"
)

// shard runs the entities of one shard on this node. It is the Owner of
// their cells: it decides what passivation means and what happens when an
// incarnation stops.
type shard[C any] struct {
	r     *Region[C]
	id    string
	props *entity.Props[C]

	mu         sync.Mutex
	entities   map[string]*entityEntry[C]
	handingOff bool
	handedOff  func(leftover []pending[C])
	leftover   []pending[C]
	forceStop  timers.Timer

	// Remember-entities writes, applied one at a time in the order the
	// shard made them, so that a stop never overtakes its start.
	wmu        sync.Mutex
	writes     []rememberWrite
	writing    bool
	terminated bool // by Terminate: pending writes are abandoned
}

type rememberWrite struct {
	entityID string
	add      bool
}

type entityState uint8

const (
	active      entityState = iota
	passivating             // stop message sent; new messages wait in buffer
	backingOff              // failed; restarts after a back-off
)

type entityEntry[C any] struct {
	cell       *entity.Cell[C]
	state      entityState
	startAgain bool // StartEntity while passivating: start it again once stopped
	buffer     []C
	lastTick   uint64
	restarts   *restarts    // allocated on the first failure
	timer      timers.Timer // stop timeout or restart back-off
}

// restarts is the back-off of an entity that failed.
type restarts struct {
	backoff   *backoff.ExponentialBackOff
	attempt   int       // back-offs since the last reset, 1 for the first
	restarted time.Time // when the last back-off ended
	cause     error     // why the entity stopped, while backing off
	until     time.Time // when the current back-off ends
	refused   bool      // an ask was refused during this back-off
}

func newShard[C any](r *Region[C], id string) *shard[C] {
	sh := &shard[C]{r: r, id: id, entities: make(map[string]*entityEntry[C])}
	sh.props = &entity.Props[C]{
		Key: r.ent.Key, Create: r.ent.Create, Owner: sh,
		StashCapacity: r.settings.StashCapacity, MailboxCapacity: r.settings.MailboxCapacity,
		HeldCapacity: r.settings.HeldCapacity,
	}
	if r.settings.RememberEntities {
		go sh.restartRemembered()
	}
	return sh
}

// deliver hands msg to the entity, starting it if needed; with start it
// only makes sure the entity runs. With failFast an entity backing off
// refuses msg at once with an UnavailableError (see Ask); otherwise msg
// waits for the next incarnation.
func (sh *shard[C]) deliver(entityID string, msg C, start, failFast bool) error {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.entities[entityID]
	if e == nil {
		if sh.handingOff { // the region buffers during hand-offs; this is a late straggler
			sh.leftover = append(sh.leftover, pending[C]{entityID, msg, start})
			return nil
		}
		e = sh.spawn(entityID)
	}
	if start {
		// Akka's StartEntitySpec: an entity on its way out comes back.
		switch e.state {
		case passivating:
			e.startAgain = true
		case backingOff:
			if e.timer != nil {
				e.timer.Stop()
				e.timer = nil
			}
			e.restarts.restarted = sh.r.clock.Now() // the back-off ends here
			sh.restart(e)
		}
		return nil
	}
	if failFast && e.state == backingOff && e.restarts != nil {
		e.restarts.refused = true // its caller comes back: restart it then
		return &UnavailableError{Type: sh.r.typ, EntityID: entityID,
			RetryAfter: max(0, e.restarts.until.Sub(sh.r.clock.Now())), Cause: e.restarts.cause}
	}
	e.lastTick = sh.r.idleTickNow()
	if e.state != active {
		e.buffer = append(e.buffer, msg)
		return nil
	}
	if err := e.cell.Tell(msg); err != nil {
		if !errors.Is(err, entity.ErrStopped) {
			return err // the message itself is refused: a full mailbox, no codec
		}
		// Stopped but not yet reported: keep msg for the next incarnation.
		e.buffer = append(e.buffer, msg)
	}
	return nil
}

// spawn starts an incarnation; sh.mu is held.
func (sh *shard[C]) spawn(entityID string) *entityEntry[C] {
	e := sh.entities[entityID]
	if e == nil {
		e = &entityEntry[C]{}
		sh.entities[entityID] = e
		if sh.r.settings.RememberEntities {
			sh.remember(entityID, true)
		}
	}
	e.cell = entity.Spawn(sh.r.s.sys, sh.props, entityID)
	e.state = active
	return e
}

// remember records that entityID started (add) or stopped. Writes go to
// the store in call order, from one goroutine per shard that lives only
// while writes wait.
func (sh *shard[C]) remember(entityID string, add bool) {
	sh.wmu.Lock()
	sh.writes = append(sh.writes, rememberWrite{entityID, add})
	start := !sh.writing
	sh.writing = true
	sh.wmu.Unlock()
	if start {
		go sh.writeRemembered()
	}
}

func (sh *shard[C]) writeRemembered() {
	store, typ, id := sh.r.s.cfg.RememberStore, sh.r.typ, sh.id
	// One back-off and timer for every write: each retry loop resets them.
	bo, timer := sh.newBackOff(), &clockTimer{clock: sh.r.clock}
	for {
		sh.wmu.Lock()
		if len(sh.writes) == 0 {
			sh.writing, sh.writes = false, nil
			sh.wmu.Unlock()
			return
		}
		w := sh.writes[0]
		sh.writes = sh.writes[1:]
		sh.wmu.Unlock()
		write := func() error {
			if sh.isTerminated() {
				return backoff.Permanent(errTerminated)
			}
			ctx, cancel := context.WithTimeout(context.Background(), sh.r.settings.StoreTimeout)
			defer cancel()
			if w.add {
				return store.Add(ctx, typ, id, w.entityID)
			}
			return store.Remove(ctx, typ, id, w.entityID)
		}
		// Until the store takes it: a lost write would bring a stopped
		// entity back, or leave a running one behind, after the shard moves.
		err := backoff.RetryNotifyWithTimer(write, bo, func(err error, next time.Duration) {
			sh.r.s.log.Warn("sharding: remember-entities store write failed; retrying", "type", typ, "shard", id,
				"entity", w.entityID, "add", w.add, "retry_in", next, "err", err)
		}, timer)
		if err != nil {
			return // terminated: the writes die with the node
		}
	}
}

var errTerminated = errors.New("sharding: shard handed off or terminated")

func (sh *shard[C]) isTerminated() bool {
	sh.wmu.Lock()
	defer sh.wmu.Unlock()
	return sh.terminated
}

// clockTimer runs backoff's retry timer on the region's clock.
type clockTimer struct {
	clock timers.Clock
	t     timers.Timer
	c     chan time.Time
}

func (t *clockTimer) Start(d time.Duration) {
	t.c = make(chan time.Time, 1)
	c, clock := t.c, t.clock
	t.t = t.clock.AfterFunc(d, func() { c <- clock.Now() })
}

func (t *clockTimer) Stop() {
	if t.t != nil {
		t.t.Stop()
	}
}

func (t *clockTimer) C() <-chan time.Time { return t.c }

func (sh *shard[C]) restartRemembered() {
	var ids []string
	read := func() error {
		sh.mu.Lock()
		gone := sh.handingOff
		sh.mu.Unlock()
		if gone {
			return backoff.Permanent(errTerminated)
		}
		ctx, cancel := context.WithTimeout(context.Background(), sh.r.settings.StoreTimeout)
		defer cancel()
		var err error
		ids, err = sh.r.s.cfg.RememberStore.Entities(ctx, sh.r.typ, sh.id)
		return err
	}
	// Until the store answers: giving up would leave remembered entities
	// stopped for good.
	err := backoff.RetryNotifyWithTimer(read, sh.newBackOff(), func(err error, next time.Duration) {
		sh.r.s.log.Warn("sharding: cannot read remembered entities; retrying", "type", sh.r.typ, "shard", sh.id,
			"retry_in", next, "err", err)
	}, &clockTimer{clock: sh.r.clock})
	if err != nil {
		return // the shard is handed off or terminated
	}
	rate := sh.r.settings.RecoveryRate
	for i := 0; i < len(ids); {
		n := len(ids) - i
		if rate > 0 {
			n = min(n, rate)
		}
		sh.mu.Lock()
		if sh.handingOff {
			sh.mu.Unlock()
			return
		}
		for _, id := range ids[i : i+n] {
			if sh.entities[id] == nil {
				sh.spawn(id)
			}
		}
		sh.mu.Unlock()
		i += n
		if i < len(ids) {
			done := make(chan struct{})
			sh.r.clock.AfterFunc(sh.r.settings.RecoveryInterval, func() { close(done) })
			<-done
		}
	}
}

// Passivate implements entity.Owner: buffer the entity's new messages and
// send it the stop message.
func (sh *shard[C]) Passivate(c *entity.Cell[C]) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e := sh.entities[c.EntityID()]; e != nil && e.cell == c && e.state == active {
		sh.stopEntity(e, sh.r.settings.StopTimeout, "passivation")
	}
}

// stopEntity sends the stop message and arms the force-stop; sh.mu is held.
func (sh *shard[C]) stopEntity(e *entityEntry[C], timeout time.Duration, why string) {
	e.state = passivating
	cell := e.cell
	if isNil(sh.r.ent.StopMessage) {
		cell.StopNow()
		return
	}
	if err := cell.Tell(sh.r.ent.StopMessage); errors.Is(err, entity.ErrStopped) {
		return // already stopping; Stopped follows
	} else if err != nil {
		// A full mailbox: the timeout below stops it by force.
		sh.r.s.log.Warn("sharding: stop message refused", "type", sh.r.typ, "entity", cell.EntityID(), "during", why, "err", err)
	}
	e.timer = sh.r.clock.AfterFunc(timeout, func() {
		sh.r.s.log.Warn("sharding: entity did not stop in time; stopping it by force",
			"type", sh.r.typ, "entity", cell.EntityID(), "during", why, "after", timeout)
		cell.StopNow()
	})
}

func isNil[C any](v C) bool {
	rv := reflect.ValueOf(any(v))
	if !rv.IsValid() {
		return true
	}
	switch rv.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan:
		return rv.IsNil()
	}
	return false
}

// Stopped implements entity.Owner.
func (sh *shard[C]) Stopped(c *entity.Cell[C], err error) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	id := c.EntityID()
	e := sh.entities[id]
	if e == nil || e.cell != c {
		return // an earlier incarnation
	}
	if e.timer != nil {
		e.timer.Stop()
		e.timer = nil
	}
	if sh.handingOff {
		sh.drop(id, e)
		sh.maybeHandedOff()
		return
	}
	switch {
	case err != nil:
		delay, attempt := sh.backOff(id, e, err)
		sh.r.s.log.Warn("sharding: entity failed; restarting after back-off", "type", sh.r.typ, "entity", id,
			"err", err, "attempt", attempt, "backoff", delay)
	case e.state == passivating && (len(e.buffer) > 0 || e.startAgain):
		sh.restart(e)
	case e.state == passivating:
		sh.drop(id, e)
		if sh.r.settings.RememberEntities {
			sh.remember(id, false)
		}
	case sh.r.settings.RememberEntities:
		sh.backOff(id, e, errStoppedItself) // stopped without passivating: remembered entities come back
	case len(e.buffer) > 0:
		sh.restart(e)
	default:
		sh.drop(id, e)
	}
}

func (sh *shard[C]) drop(id string, e *entityEntry[C]) {
	// Only a hand-off drops an entity with waiting messages; the region
	// delivers them at the shard's next home.
	for _, m := range e.buffer {
		sh.leftover = append(sh.leftover, pending[C]{entityID: id, msg: m})
	}
	if e.startAgain && len(e.buffer) == 0 {
		sh.leftover = append(sh.leftover, pending[C]{entityID: id, start: true})
	}

	delete(sh.entities, id)
}

// restart starts a new incarnation and hands it the buffered messages in
// order; sh.mu is held.
func (sh *shard[C]) restart(e *entityEntry[C]) {
	buf := e.buffer
	e.buffer, e.startAgain = nil, false
	sh.spawn(e.cell.EntityID())
	for _, m := range buf {
		switch err := e.cell.Tell(m); {
		case errors.Is(err, entity.ErrStopped):
			e.buffer = append(e.buffer, m)
		case err != nil:
			sh.r.s.log.Warn("sharding: buffered message refused by the new incarnation; dropped",
				"type", sh.r.typ, "entity", e.cell.EntityID(), "err", err)
		}
	}
}

// errStoppedItself is the cause of a remembered entity's back-off when it
// stopped by itself, without passivating.
var errStoppedItself = errors.New("sharding: remembered entity stopped without passivating")

// backOff schedules the restart of a stopped entity and returns the delay
// the back-off policy chose and its attempt number (1 after a reset).
func (sh *shard[C]) backOff(id string, e *entityEntry[C], cause error) (time.Duration, int) {
	switch {
	case e.restarts == nil:
		e.restarts = &restarts{backoff: sh.newBackOff()}
	case sh.r.clock.Now().Sub(e.restarts.restarted) > sh.r.settings.RestartBackoffMax:
		// It ran longer than the longest back-off: a new failure, not a crash loop.
		e.restarts.backoff.Reset()
		e.restarts.attempt = 0
	}
	e.state = backingOff
	e.restarts.attempt++
	failed := e.cell
	delay := e.restarts.backoff.NextBackOff()
	e.restarts.cause, e.restarts.until, e.restarts.refused = cause, sh.r.clock.Now().Add(delay), false
	e.timer = sh.r.clock.AfterFunc(delay, func() {
		sh.mu.Lock()
		defer sh.mu.Unlock()
		if cur := sh.entities[id]; cur != e || e.cell != failed || e.state != backingOff || sh.handingOff {
			return
		}
		e.timer = nil
		e.restarts.restarted = sh.r.clock.Now()
		if len(e.buffer) == 0 && !sh.r.settings.RememberEntities && !e.restarts.refused {
			delete(sh.entities, id) // nobody waits; the next message starts it
			return
		}
		sh.restart(e)
	})
	return delay, e.restarts.attempt
}

func (sh *shard[C]) newBackOff() *backoff.ExponentialBackOff {
	return backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(sh.r.settings.RestartBackoffMin),
		backoff.WithMaxInterval(sh.r.settings.RestartBackoffMax),
		backoff.WithMaxElapsedTime(0))
}

// passivateIdle stops entities that received nothing through sharding for
// more than ticks region ticks: a message came after tick lastTick, so
// after tick lastTick+ticks+1 it is at least ticks intervals old.
func (sh *shard[C]) passivateIdle(now, ticks uint64) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.handingOff {
		return
	}
	for _, e := range sh.entities {
		if e.state == active && now-e.lastTick > ticks {
			sh.stopEntity(e, sh.r.settings.StopTimeout, "idle passivation")
		}
	}
}

// handOff stops every entity through its stop message; done gets the
// messages that were waiting for entities, in order, once all have stopped.
func (sh *shard[C]) handOff(done func(leftover []pending[C])) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.handingOff, sh.handedOff = true, done
	for _, id := range slices.Sorted(maps.Keys(sh.entities)) {
		e := sh.entities[id]
		switch e.state {
		case active:
			sh.stopEntity(e, sh.r.settings.HandOffTimeout, "hand-off")
		case backingOff:
			if e.timer != nil {
				e.timer.Stop()
			}
			sh.drop(id, e)
		}
	}
	sh.forceStop = sh.r.clock.AfterFunc(sh.r.settings.HandOffTimeout, func() {
		sh.mu.Lock()
		defer sh.mu.Unlock()
		for id, e := range sh.entities {
			sh.r.s.log.Warn("sharding: hand-off timeout; stopping entity by force", "type", sh.r.typ, "shard", sh.id, "entity", id)
			e.cell.StopNow()
		}
	})
	sh.maybeHandedOff()
}

// maybeHandedOff completes the hand-off when no entity is left; sh.mu is held.
func (sh *shard[C]) maybeHandedOff() {
	if !sh.handingOff || len(sh.entities) > 0 || sh.handedOff == nil {
		return
	}
	if sh.forceStop != nil {
		sh.forceStop.Stop()
	}
	done, left := sh.handedOff, sh.leftover
	sh.handedOff, sh.leftover = nil, nil
	done(left)
}

func (sh *shard[C]) entityIDs() []string {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return slices.Sorted(maps.Keys(sh.entities))
}
