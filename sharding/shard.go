package sharding

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/internal/runtime"
	"github.com/shoal-dev/shoal/stash"
	"github.com/shoal-dev/shoal/timers"
	"go.opentelemetry.io/otel/trace"
)

// shard runs the entities of one shard on this node: it is the runner of
// a shardCore, owning what the core must not (the lock, the entities'
// cells, timers and the remember-store IO), and the Owner of the cells.
type shard[C any] struct {
	r     *Region[C]
	id    string
	props *entity.Props[C]

	mu        sync.Mutex
	core      *shardCore[C, *entity.Cell[C]]
	routedAt  atomic.Uint64           // the region's write epoch when it last routed here (see fastPath)
	timers    map[uint64]timers.Timer // armed timers by generation
	handedOff func(leftover []pending[C])
	fx        shardEffects[C, *entity.Cell[C]] // carries out core's effects

	// Remember-entities writes, applied one at a time in the order the
	// shard made them, so that a stop never overtakes its start.
	wmu        sync.Mutex
	writes     []rememberWrite
	writing    bool
	terminated bool // by Terminate: pending writes are abandoned
	// drained runs once the queued writes are stored (or abandoned): a
	// hand-off reports done only then, or the next home would read the
	// store before this home's last writes land.
	drained func()
}

type rememberWrite struct {
	entityID string
	add      bool
}

func newShard[C any](r *Region[C], id string) *shard[C] {
	st := r.settings
	sh := &shard[C]{r: r, id: id}
	sh.core = newShardCore[C, *entity.Cell[C]](shardCoreConfig{
		hasStopMessage: !isNil(r.ent.StopMessage), remember: st.RememberEntities,
		stopTimeout: st.StopTimeout, handOffTimeout: st.HandOffTimeout,
		restartBackoffMin: st.RestartBackoffMin, restartBackoffMax: st.RestartBackoffMax,
		recoveryRate: st.RecoveryRate, recoveryInterval: st.RecoveryInterval,
		bufferLimit: entityBufferLimit(st),
	}, rand.Float64)
	sh.fx = shardEffects[C, *entity.Cell[C]]{core: sh.core, env: shardIO[C]{sh}}
	sh.props = &entity.Props[C]{
		Key: r.ent.Key, Create: r.ent.Create, Owner: sh,
		StashCapacity: st.StashCapacity, MailboxCapacity: st.MailboxCapacity,
		HeldCapacity: st.HeldCapacity,
	}
	if st.RememberEntities {
		go sh.restartRemembered()
	}
	return sh
}

// ShardID is the shard's id. Its entities' reminders belong to it
// (runtime.ShardOwner; docs/DESIGN.md, "Durable reminders").
func (sh *shard[C]) ShardID() string { return sh.id }

var _ runtime.ShardOwner = (*shard[struct{}])(nil)

// entityBufferLimit bounds what a shard holds for one entity while it stops
// or backs off: what the next incarnation's empty mailbox is sure to take,
// held (recovering, as an event-sourced entity is when it starts) or not.
// The restart then hands the whole buffer over before any new mail, and a
// sender finds out at once, with ErrBufferFull, when there is no room.
func entityBufferLimit(st Settings) int {
	limit := st.HeldCapacity
	if limit <= 0 {
		limit = stash.DefaultCapacity // entity.Props' default
	}
	if st.MailboxCapacity > 0 {
		limit = min(limit, st.MailboxCapacity)
	}
	return limit
}

// deliver hands msg to the entity, starting it if needed (see
// shardEffects.deliver, which it runs under sh.mu).
func (sh *shard[C]) deliver(entityID string, msg C, start, failFast, accepted bool, parent *trace.SpanContext) error {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.fx.deliver(entityID, msg, start, failFast, accepted, sh.r.idleTickNow(), parent)
}

// deliverPending is deliver for a message the region held or routed.
func (sh *shard[C]) deliverPending(p pending[C], failFast, accepted bool) error {
	return sh.deliver(p.entityID, p.msg, p.start, failFast, accepted, p.trace)
}

// apply carries out the core's effects in order; sh.mu is held.
func (sh *shard[C]) apply() { sh.fx.apply() }

// shardIO is the production shardEnv of a shard: entity cells, the
// region's clock and log, and the remember store. sh.mu is held.
type shardIO[C any] struct{ sh *shard[C] }

func (io shardIO[C]) spawn(entityID string, afterBackOff bool, _ []C) (*entity.Cell[C], bool) {
	sh := io.sh
	if afterBackOff {
		sh.r.m.Restarted()
	}
	return entity.Spawn(sh.r.s.sys, sh.props, entityID), true
}

func (io shardIO[C]) now() time.Time { return io.sh.r.clock.Now() }

// acting: sharding has no node lease to check. A node that no longer
// holds one neither handles what arrives (node.leasedTransport) nor
// writes an event (journal/postgres.Fence), and fences itself.
func (io shardIO[C]) acting(C) error { return nil }

func (io shardIO[C]) bufferFull(entityID string) error {
	sh := io.sh
	return fmt.Errorf("%w: entity %s/%s holds %d messages while it stops or restarts",
		ErrBufferFull, sh.r.typ, entityID, sh.core.cfg.bufferLimit)
}

func (io shardIO[C]) unavailable(entityID string, until time.Time, cause error) error {
	sh := io.sh
	return &UnavailableError{Type: sh.r.typ, EntityID: entityID,
		RetryAfter: max(0, until.Sub(sh.r.clock.Now())), Cause: cause}
}

func (io shardIO[C]) tell(cell *entity.Cell[C], msg C, parent *trace.SpanContext) error {
	return runtime.TellTraced(cell, msg, parent)
}

// started publishes cell: new mail may skip sh.mu now, the buffer is
// ahead of it.
func (io shardIO[C]) started(cell *entity.Cell[C]) { io.sh.publish(cell) }

func (io shardIO[C]) deadLetter(err error, entityID string, msg C, reason string) {
	runtime.EntityDeadLetter(io.sh.r.s.sys, err, io.sh.r.typ, entityID, reason, msg)
}

func (io shardIO[C]) sendStop(ef *shardEffect[C, *entity.Cell[C]]) {
	sh := io.sh
	if ef.why != stopForHandOff {
		sh.r.m.Passivated()
	}
	runtime.Seal(ef.handle) // later mail takes sh.mu, and waits for the next incarnation
	// The shard's own: left unread when the incarnation stops (Terminate,
	// a forced stop), or come after it stopped, it is no dead letter.
	runtime.TellOwn(ef.handle, sh.r.ent.StopMessage)
}

func (io shardIO[C]) forceStop(ef *shardEffect[C, *entity.Cell[C]]) {
	sh := io.sh
	switch ef.force {
	case forceStopTimeout:
		sh.r.s.log.Warn("sharding: entity did not stop in time; stopping it by force",
			"entity_type", sh.r.typ, "shard_id", sh.id, "entity_id", ef.entityID, "during", ef.why.String(), "after", ef.after)
	case forceHandOffTimeout:
		sh.r.s.log.Warn("sharding: hand-off timeout; stopping entity by force", "entity_type", sh.r.typ, "shard_id", sh.id, "entity_id", ef.entityID)
	}
	if ef.force == forceNoStopMessage && ef.why != stopForHandOff {
		sh.r.m.Passivated() // passivation without a stop message
	}
	runtime.Seal(ef.handle)
	ef.handle.StopNow()
}

func (io shardIO[C]) armTimer(ef *shardEffect[C, *entity.Cell[C]]) {
	sh := io.sh
	kind, id, gen := ef.timer, ef.entityID, ef.gen
	if kind == timerRestart {
		sh.r.m.BackedOff()
		sh.r.s.log.Warn("sharding: entity failed; restarting after back-off", "entity_type", sh.r.typ, "shard_id", sh.id, "entity_id", id,
			"err", ef.cause, "attempt", ef.attempt, "backoff", ef.after)
	}
	if sh.timers == nil {
		sh.timers = make(map[uint64]timers.Timer)
	}
	sh.timers[gen] = sh.r.clock.AfterFunc(ef.after, func() { sh.fire(kind, id, gen) })
}

func (io shardIO[C]) cancelTimer(gen uint64) {
	sh := io.sh
	if t := sh.timers[gen]; t != nil {
		t.Stop()
		delete(sh.timers, gen)
	}
}

func (io shardIO[C]) remember(entityID string, add bool) { io.sh.remember(entityID, add) }

func (io shardIO[C]) refuseAsks(ef *shardEffect[C, *entity.Cell[C]]) {
	sh := io.sh
	for _, m := range ef.msgs {
		runtime.FailAsks(sh.r.s.sys, m, &UnavailableError{Type: sh.r.typ, EntityID: ef.entityID, RetryAfter: ef.after, Cause: ef.cause})
	}
}

func (io shardIO[C]) handedOff(leftover []pending[C]) {
	sh := io.sh
	if done := sh.handedOff; done != nil {
		sh.handedOff = nil
		sh.afterRememberWrites(func() { done(leftover) })
	}
}

// fire steps the core with a timer that went off.
func (sh *shard[C]) fire(kind timerKind, entityID string, gen uint64) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	delete(sh.timers, gen)
	sh.core.timerFired(kind, entityID, gen, sh.r.clock.Now())
	sh.apply()
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

// afterRememberWrites runs fn once every write queued so far is stored,
// at once when none is queued. fn must be safe on any goroutine.
func (sh *shard[C]) afterRememberWrites(fn func()) {
	sh.wmu.Lock()
	if sh.writing {
		sh.drained = fn
		sh.wmu.Unlock()
		return
	}
	sh.wmu.Unlock()
	fn()
}

func (sh *shard[C]) writeRemembered() {
	store, typ, id := sh.r.s.cfg.RememberStore, sh.r.typ, sh.id
	// One back-off and timer for every write: each retry loop resets them.
	bo, timer := sh.newBackOff(), &clockTimer{clock: sh.r.clock}
	for {
		sh.wmu.Lock()
		if len(sh.writes) == 0 || sh.terminated {
			drained := sh.drained
			sh.writing, sh.writes, sh.drained = false, nil, nil
			sh.wmu.Unlock()
			if drained != nil {
				drained()
			}
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
			sh.r.s.log.Warn("sharding: remember-entities store write failed; retrying", "entity_type", typ, "shard_id", id,
				"entity_id", w.entityID, "add", w.add, "retry_in", next, "err", err)
		}, timer)
		if err != nil {
			continue // terminated: the writes die with the node
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
		gone := sh.core.handingOff
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
		sh.r.s.log.Warn("sharding: cannot read remembered entities; retrying", "entity_type", sh.r.typ, "shard_id", sh.id,
			"retry_in", next, "err", err)
	}, &clockTimer{clock: sh.r.clock})
	if err != nil {
		return // the shard is handed off or terminated
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.core.remembered(ids)
	sh.apply()
}

// Passivate implements runtime.Owner: buffer the entity's new messages and
// send it the stop message.
func (sh *shard[C]) Passivate(c *entity.Cell[C]) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.core.passivate(c.EntityID(), c)
	sh.apply()
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

// Stopped implements runtime.Owner.
func (sh *shard[C]) Stopped(c *entity.Cell[C], err error) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.unpublish(c)
	sh.core.stopped(c.EntityID(), c, err, sh.r.clock.Now())
	sh.apply()
}

func (sh *shard[C]) newBackOff() *backoff.ExponentialBackOff {
	return backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(sh.r.settings.RestartBackoffMin),
		backoff.WithMaxInterval(sh.r.settings.RestartBackoffMax),
		backoff.WithMaxElapsedTime(0))
}

// passivateIdle stops entities that received nothing through sharding for
// more than ticks region ticks.
func (sh *shard[C]) passivateIdle(now, ticks uint64) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.foldFastTicks()
	sh.core.passivateIdle(now, ticks)
	sh.apply()
}

// handOff stops every entity through its stop message; done gets the
// messages that were waiting for entities, in order, once all have stopped.
func (sh *shard[C]) handOff(done func(leftover []pending[C])) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.handedOff = done
	sh.core.handOff()
	sh.apply()
}

func (sh *shard[C]) entityIDs() []string {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.core.entityIDs()
}
