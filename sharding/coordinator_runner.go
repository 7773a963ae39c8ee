package sharding

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/cluster/lease"
	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/internal/runtime"
)

// stopCoordinator stops a coordinator after the messages queued before it.
// It and the coordinator's other messages from its own node (its timers,
// the answers of its store calls, its host's views) are its own: left
// behind when it stops, they are no dead letters; only regions' are.
type stopCoordinator struct{ runtime.OwnTick }

func (stopCoordinator) ProtocolMessage() {}

// newCoordinatorRunner returns the behavior that runs a coordinator's
// lease life (coordinatorLife) on the entity runtime.
func newCoordinatorRunner(ctx entity.Context[Message], r *coordinatorHost) entity.Behavior[Message] {
	cr := &coordinatorRunner{r: r, retries: storeBackOff(r.settings)}
	cr.life = newCoordinatorLife(coordinatorLifeConfig{
		typ: r.typ, self: r.s.self, role: r.role, settings: r.settings, timing: r.s.cfg.CoordinatorLease,
		store: r.s.cfg.CoordinatorStore, remember: r.s.cfg.RememberStore,
	})
	if r.s.cfg.NodeLeases != nil {
		// The host's machine (start), so that who counts towards the
		// majority survives a restart; only this runner touches it: the
		// last one is done before a new one starts.
		cr.life.down = r.downing.resume()
	}
	cr.life.start(coordinatorIO{cr, ctx})
	return cr
}

// coordinatorRunner runs a coordinator's lease life (coordinatorLife) as
// an entity: its timers are the entity's keyed timers, its store calls
// (acquire, read, renew, write, release) run off the entity worker,
// through PipeToSelf (the worker is shared by every entity of the node,
// and a slow store must hold up none of them), and what comes while an
// acquisition is in flight waits in the entity's stash.
type coordinatorRunner struct {
	r    *coordinatorHost
	life *coordinatorLife
	// retries paces the retries of a failed write.
	retries *backoff.ExponentialBackOff
}

// Receive implements entity.Behavior.
func (cr *coordinatorRunner) Receive(ctx entity.Context[Message], m Message) entity.Behavior[Message] {
	if cr.life.receive(coordinatorIO{cr, ctx}, m) {
		return entity.Stopped[Message]()
	}
	return entity.Same[Message]()
}

// coordinatorLifeEnv is the world a coordinator's lease life runs on:
// besides what it acts on while it holds the lease (coordinatorEnv), its
// keyed timers, its store calls, its stash and the membership. The
// coordinator runner implements it with an entity's context
// (coordinatorIO); the simulator on its discrete-event world, so that
// both run the same lease life (docs/DESIGN.md, "Cores and runners").
type coordinatorLifeEnv interface {
	coordinatorEnv
	// startTimer sends msg to the coordinator after d, replacing the
	// timer under key.
	startTimer(key string, msg Message, d time.Duration)
	// startTimerEvery sends msg to the coordinator every d.
	startTimerEvery(key string, msg Message, every time.Duration)
	// call runs do off the coordinator, bounded by timeout; answer, given
	// do's error, is the message that comes back.
	call(timeout time.Duration, do func(context.Context) error, answer func(error) Message)
	// stash sets m aside until unstashAll, which takes what was set aside
	// before any message still to come; an error drops m.
	stash(m Message) error
	unstashAll()
	// members is the current membership view.
	members() []cluster.Member
	// leaseRenewed, leaseRefused and leaseFailed count the renewals.
	leaseRenewed(lag time.Duration)
	leaseRefused()
	leaseFailed()
}

// coordinatorLifeConfig is what a coordinator's lease life is about.
type coordinatorLifeConfig struct {
	typ      string
	self     cluster.UniqueAddress
	role     string
	settings Settings
	timing   lease.Timing
	store    CoordinatorStore
	remember RememberStore // read once the lease is held, with Settings.RememberEntities
}

func newCoordinatorLife(cfg coordinatorLifeConfig) *coordinatorLife {
	l := &coordinatorLife{cfg: cfg}
	l.leaseLength = cfg.timing.Length
	return l
}

// coordinatorLife is a coordinator's life around its lease
// (docs/DESIGN.md, "Cluster and leases"): it acts only while it holds the
// type's coordinator lease. Until it gets the lease it retries (see
// acquireEvery) and drops what it is sent (regions retry); what comes
// while an acquisition is in flight waits for its answer. Once it holds
// it, a lease.Keeper on the coordinator's own timers (no goroutine of its
// own: idle, it owns none) renews it every RenewEvery and says when it no
// longer holds it: at the last successful renewal's start + Length −
// Margin, or at once when the store refuses a renewal. The coordinator
// then stops, and sends nothing from the moment it no longer holds the
// lease. Every store write carries the lease's epoch, which the store
// checks. Its steps report whether the coordinator stopped; the runner
// (coordinatorRunner) and the simulator run it on their environments
// (coordinatorLifeEnv).
type coordinatorLife struct {
	cfg coordinatorLifeConfig

	epoch    uint64
	keeper   *lease.Keeper // nil until the lease is held
	renewing bool          // a renewal is under way
	due      time.Time     // when the renewal under way was due, for its lag
	// coordinatorEffects acts while the lease is held: the core, the
	// downing machine and the store-write pipeline.
	coordinatorEffects
	// acquiring: the Acquire, or the read of remembered shards after it,
	// is in flight; what comes meanwhile waits in the stash, in order,
	// as it waited in the mailbox when these calls ran on the worker.
	acquiring bool
	// releasing: it gives the lease up and stops once the store answered
	// (or at StoreTimeout), taking nothing else meanwhile.
	releasing bool
}

// acquireTick retries the acquisition of a lease someone else holds.
type acquireTick struct{ runtime.OwnTick }

// renewTick starts a renewal; fenceTick checks whether the lease ran out.
type (
	renewTick struct{ runtime.OwnTick }
	fenceTick struct{ runtime.OwnTick }
)

// renewed is a renewal's answer.
type renewed struct {
	runtime.OwnTick
	start time.Time
	err   error
}

// acquired is an Acquire's answer; start is when it was sent.
type acquired struct {
	runtime.OwnTick
	start  time.Time
	epoch  uint64
	shards map[string]Allocation
	err    error
}

// rememberedRead is the answer to the read of the shards of remembered
// entities.
type rememberedRead struct {
	runtime.OwnTick
	shards []string
	err    error
}

// released is a Release's answer, or its timeout.
type released struct {
	runtime.OwnTick
	err error
}

func (acquireTick) ProtocolMessage()    {}
func (renewTick) ProtocolMessage()      {}
func (fenceTick) ProtocolMessage()      {}
func (renewed) ProtocolMessage()        {}
func (acquired) ProtocolMessage()       {}
func (rememberedRead) ProtocolMessage() {}
func (released) ProtocolMessage()       {}

// start starts the coordinator's life: it acquires the lease.
func (l *coordinatorLife) start(env coordinatorLifeEnv) { l.tryAcquire(env) }

// tryAcquire starts acquiring the lease, or waits for it while downing
// keeps this side off it. Like every store call of the coordinator, the
// Acquire runs off the coordinator (a slow store would hold up every
// entity queued behind it); its answer comes back as acquired.
func (l *coordinatorLife) tryAcquire(env coordinatorLifeEnv) {
	if l.down != nil && l.down.offLease(env.now()) {
		// It stood down on the minority side: the majority's oldest
		// takes the lease meanwhile (see downing).
		env.startTimer("acquire", acquireTick{}, l.cfg.settings.RetryInterval)
		return
	}
	l.acquiring = true
	store, typ, owner, ttl := l.cfg.store, l.cfg.typ, l.cfg.self, l.cfg.timing.Length
	start := env.now() // the fence counts from before the call
	var epoch uint64
	var shards map[string]Allocation
	env.call(l.cfg.settings.StoreTimeout, func(c context.Context) (err error) {
		epoch, shards, err = store.Acquire(c, typ, owner, ttl)
		return err
	}, func(err error) Message {
		return acquired{start: start, epoch: epoch, shards: shards, err: err}
	})
}

// whileAcquiring takes m while the acquisition is in flight: its answers,
// and a stop, which ends it once the answer came without acting; the
// rest waits in the stash (dropped once full: regions retry).
func (l *coordinatorLife) whileAcquiring(env coordinatorLifeEnv, m Message) (stopped bool) {
	switch m := m.(type) {
	case acquired:
		return l.acquired(env, m)
	case rememberedRead:
		return l.rememberedRead(env, m)
	case stopCoordinator:
		if l.keeper != nil { // it holds the lease, and reads what it remembers
			return l.release(env)
		}
		l.stopping = true
		return false
	case acquireTick:
		return false // of no use: the answer comes
	}
	if l.stopping {
		return false
	}
	if err := env.stash(m); err != nil {
		env.log(slog.LevelDebug, "sharding: coordinator acquiring its lease; message dropped", "err", err)
	}
	return false
}

// acquired takes the answer of an Acquire: it starts acting, or waits
// while another node holds the lease; any other failure stops the
// coordinator, which its host restarts after a back-off. Told to stop
// meanwhile, it gives a granted lease back and stops, acting on nothing.
func (l *coordinatorLife) acquired(env coordinatorLifeEnv, m acquired) (stopped bool) {
	st := l.cfg.settings
	l.acquiring = false
	if errors.Is(m.err, ErrLeaseHeld) {
		if l.stopping {
			return true
		}
		env.log(slog.LevelDebug, "sharding: coordinator lease held elsewhere; waiting", "err", m.err)
		env.startTimer("acquire", acquireTick{}, l.acquireAfter(m.err))
		env.unstashAll() // taken as before the lease: dropped, views counted
		return false
	}
	if m.err != nil {
		env.log(slog.LevelError, "sharding: cannot acquire the coordinator role", "err", m.err)
		return true
	}
	l.epoch, l.keeper = m.epoch, lease.NewKeeper(l.cfg.timing)
	if !l.granted(env, m.start) {
		env.log(slog.LevelError, "sharding: the coordinator lease was granted too late to use", "epoch", m.epoch)
		return true
	}
	if l.stopping {
		return l.release(env)
	}
	l.core = newCoordinatorCore(l.cfg.self, m.epoch, m.shards, st.Strategy, st.MinMembers)
	l.core.role = l.cfg.role
	if st.RememberEntities {
		// Shards with remembered entities start without waiting for a
		// message, so their entities come back after the cluster restarts.
		l.acquiring = true
		remember, typ := l.cfg.remember, l.cfg.typ
		var shards []string
		env.call(st.StoreTimeout, func(c context.Context) (err error) {
			shards, err = remember.Shards(c, typ)
			return err
		}, func(err error) Message {
			return rememberedRead{shards: shards, err: err}
		})
		return false
	}
	return l.begin(env)
}

// rememberedRead takes the shards of remembered entities, read once the
// lease was acquired, and starts acting.
func (l *coordinatorLife) rememberedRead(env coordinatorLifeEnv, m rememberedRead) (stopped bool) {
	l.acquiring = false
	if m.err != nil {
		env.log(slog.LevelError, "sharding: cannot read the shards of remembered entities", "err", m.err)
		return true
	}
	l.core.startShards(m.shards)
	return l.begin(env)
}

// begin starts acting once the lease is held: it arms the rebalance and
// downing timers, steps the core with the current view, then takes what
// waited for the acquisition, in order.
func (l *coordinatorLife) begin(env coordinatorLifeEnv) (stopped bool) {
	env.startTimerEvery("rebalance", rebalanceTick{}, l.cfg.settings.RebalanceInterval)
	if l.down != nil {
		env.startTimerEvery("downing", downingTick{}, l.pollEvery())
	}
	if l.act(env, membersChanged{members: env.members()}) {
		return true
	}
	env.unstashAll()
	return false
}

// pollEvery is how often the downing machine's store calls go out: a
// quarter of RetryInterval or of the lease length, whichever is shorter,
// so that an expired node lease is seen a fraction of a lease after it
// expired (see downing.due).
func (l *coordinatorLife) pollEvery() time.Duration {
	return max(min(l.cfg.settings.RetryInterval, l.cfg.timing.Length)/4, time.Millisecond)
}

// acquireEvery is how often a coordinator retries the acquisition of a
// lease held elsewhere: every RetryInterval, but at least four times per
// lease length, so that a crashed holder's lease is taken over soon after
// it expired.
func (l *coordinatorLife) acquireEvery() time.Duration {
	return max(min(l.cfg.settings.RetryInterval, l.cfg.timing.Length/4), time.Millisecond)
}

// acquireAfter is when to try again after held refused an acquisition:
// acquireEvery, or just after the lease ends when the store said it ends
// sooner. A crashed oldest node's coordinator lease ends about when its
// node lease does, which is when this node's view made it the oldest: a
// retry an acquireEvery later would add up to that much to the failover
// (docs/DESIGN.md, "Leases and self-fencing").
func (l *coordinatorLife) acquireAfter(held error) time.Duration {
	every := l.acquireEvery()
	if left, ok := lease.HeldFor(held); ok {
		return min(every, left+time.Millisecond)
	}
	return every
}

// granted records a successful acquisition or renewal that started at
// start and arms the renewal and fence timers; false once the lease is
// no longer held.
func (l *coordinatorLife) granted(env coordinatorLifeEnv, start time.Time) bool {
	now := env.now()
	if !l.keeper.Granted(start, now) {
		return false
	}
	l.due = l.keeper.RenewAt()
	env.startTimer("renew", renewTick{}, l.due.Sub(now))
	env.startTimer("fence", fenceTick{}, l.keeper.FenceAt().Sub(now))
	return true
}

// holds reports whether the coordinator may act at now.
func (l *coordinatorLife) holds(now time.Time) bool {
	return l.keeper.Holds(now)
}

// renew starts a renewal, bounded by the fence time: past it, its answer
// would be of no use.
func (l *coordinatorLife) renew(env coordinatorLifeEnv) {
	if l.renewing {
		return
	}
	l.renewing = true
	start := env.now()
	typ, epoch, ttl, store := l.cfg.typ, l.epoch, l.cfg.timing.Length, l.cfg.store
	env.call(l.keeper.FenceAt().Sub(start), func(c context.Context) error {
		return store.Renew(c, typ, epoch, ttl)
	}, func(err error) Message {
		return renewed{start: start, err: err}
	})
}

// receive takes one message.
func (l *coordinatorLife) receive(env coordinatorLifeEnv, m Message) (stopped bool) {
	if l.releasing {
		if m, ok := m.(released); ok {
			if m.err != nil {
				env.log(slog.LevelWarn, "sharding: could not release the coordinator lease; the next coordinator waits for it to expire", "err", m.err)
			}
			return true
		}
		return false // it stops: nothing more is taken
	}
	if l.acquiring {
		return l.whileAcquiring(env, m)
	}
	switch m.(type) {
	case stopCoordinator:
		if l.keeper != nil && l.pipe.held() && !l.pipe.retrying() && l.holds(env.now()) {
			// What it decided before the stop is recorded and sent
			// before it goes (the last ShardStopped of a graceful
			// leave); bounded by StoreTimeout per batch, with no retry.
			l.stopping = true
			return false
		}
		return l.release(env)
	case acquireTick:
		if l.keeper == nil {
			l.tryAcquire(env)
		}
		return false
	}
	if l.keeper == nil {
		if m, ok := m.(membersChanged); ok && l.down != nil {
			// Counted while it waits (see downing): memberlist may drop
			// a failed member from the view before the lease comes.
			l.view = m.members
			l.down.observe(m.members, nil, env.now())
		}
		return false // not the coordinator (yet): regions retry
	}
	switch m := m.(type) {
	case renewTick:
		l.renew(env)
		return false
	case renewed:
		l.renewing = false
		switch {
		case m.err == nil:
			env.leaseRenewed(env.now().Sub(l.due))
			if !l.granted(env, m.start) {
				return l.lost(env, nil)
			}
		case lease.Refused(m.err):
			env.leaseRefused()
			l.keeper.Refused()
			return l.lost(env, m.err)
		default: // the store is unreachable or slow: try again soon
			env.leaseFailed()
			env.log(slog.LevelWarn, "sharding: coordinator lease renewal failed; retrying", "err", m.err)
			env.startTimer("renew", renewTick{}, l.cfg.timing.RenewEvery/4)
		}
		return false
	}
	if !l.holds(env.now()) {
		return l.lost(env, nil)
	}
	if _, ok := m.(fenceTick); ok {
		return false // a fence timer of an earlier renewal
	}
	if l.stopping {
		if m, ok := m.(batchWritten); ok {
			return l.then(env, l.written(env, m))
		}
		return false
	}
	return l.act(env, m)
}

// lost stops a coordinator that no longer holds its lease.
func (l *coordinatorLife) lost(env coordinatorLifeEnv, err error) (stopped bool) {
	env.log(slog.LevelError, "sharding: coordinator lease lost; stopping the coordinator", "epoch", l.epoch, "err", err)
	return true
}

// release stops the coordinator on a graceful stop, giving the lease up
// first, so that the next coordinator need not wait for it to expire. The
// Release runs off the coordinator; it stops when the store answered, or
// at StoreTimeout should the store not heed its context, and takes
// nothing meanwhile.
func (l *coordinatorLife) release(env coordinatorLifeEnv) (stopped bool) {
	if l.keeper == nil || !l.holds(env.now()) {
		return true
	}
	l.releasing = true
	store, typ, epoch, timeout := l.cfg.store, l.cfg.typ, l.epoch, l.cfg.settings.StoreTimeout
	env.startTimer("release", released{err: fmt.Errorf("sharding: release: no answer within %v", timeout)}, timeout)
	env.call(timeout, func(c context.Context) error {
		return store.Release(c, typ, epoch)
	}, func(err error) Message {
		return released{err: err}
	})
	return false
}

// act steps the core with one message while the lease is held; its
// changes are written under the lease's epoch, through the pipeline,
// and its output sent once they committed (coordinatorEffects.act).
func (l *coordinatorLife) act(env coordinatorLifeEnv, m Message) (stopped bool) {
	return l.then(env, l.coordinatorEffects.act(env, m))
}

// then carries out a verdict of coordinatorEffects.
func (l *coordinatorLife) then(env coordinatorLifeEnv, v coordVerdict) (stopped bool) {
	switch v {
	case coordStop:
		return true
	case coordLost:
		return l.lost(env, nil)
	case coordRelease:
		return l.release(env)
	}
	return false
}

// coordinatorIO is the production coordinatorLifeEnv: the runner's entity
// context, its timers and stash, its store calls off the worker
// (PipeToSelf), the transport.
type coordinatorIO struct {
	cr  *coordinatorRunner
	ctx entity.Context[Message]
}

func (io coordinatorIO) now() time.Time { return io.ctx.Clock().Now() }

func (io coordinatorIO) holds() bool { return io.cr.life.holds(io.now()) }

func (io coordinatorIO) startTimer(key string, msg Message, d time.Duration) {
	io.ctx.Timers().StartSingleTimer(key, msg, d)
}

func (io coordinatorIO) startTimerEvery(key string, msg Message, every time.Duration) {
	io.ctx.Timers().StartTimerWithFixedDelay(key, msg, every, every)
}

func (io coordinatorIO) call(timeout time.Duration, do func(context.Context) error, answer func(error) Message) {
	io.ctx.PipeToSelf(func(c context.Context) Message {
		c, cancel := context.WithTimeout(c, timeout)
		defer cancel()
		return answer(do(c))
	})
}

func (io coordinatorIO) stash(m Message) error { return io.ctx.Stash().Stash(m) }

func (io coordinatorIO) unstashAll() { io.ctx.Stash().UnstashAll() }

func (io coordinatorIO) members() []cluster.Member { return io.cr.r.s.members() }

func (io coordinatorIO) leaseRenewed(lag time.Duration) { io.cr.r.s.leaseM.Renewed(lag) }

func (io coordinatorIO) leaseRefused() { io.cr.r.s.leaseM.Refused() }

func (io coordinatorIO) leaseFailed() { io.cr.r.s.leaseM.Failed() }

func (io coordinatorIO) send(to cluster.UniqueAddress, msg Message) {
	r := io.cr.r
	if err := r.s.remote.Send(address{Node: to, Type: r.typ}, msg); err != nil {
		r.s.log.Debug("sharding: coordinator could not reach region", "entity_type", r.typ, "to", to, "err", err)
	}
}

// write writes batch b off the entity worker (a slow commit would hold up
// every entity queued behind it), bounded by StoreTimeout and by the
// runner's life: a coordinator that stops (lease lost, deposed,
// terminated) cancels it. Its outcome comes back as a batchWritten.
func (io coordinatorIO) write(b *writeBatch) {
	l := io.cr.life
	store, typ, epoch := l.cfg.store, l.cfg.typ, l.epoch
	seq, changes := b.seq, b.changes
	io.call(l.cfg.settings.StoreTimeout, func(c context.Context) error {
		return store.Update(c, typ, epoch, changes)
	}, func(err error) Message {
		return batchWritten{seq: seq, err: err}
	})
}

func (io coordinatorIO) retryWrites(err error) {
	r, after := io.cr.r, io.cr.retries.NextBackOff()
	r.s.log.Warn("sharding: coordinator store write failed; retrying", "entity_type", r.typ, "retry_in", after, "err", err)
	io.ctx.Timers().StartSingleTimer("store-retry", retryStoreWrites{}, after)
}

func (io coordinatorIO) writesCommitted() { io.cr.retries.Reset() }

func (io coordinatorIO) downCall(call downCall) {
	leases, timeout := io.cr.r.s.cfg.NodeLeases, io.cr.r.settings.StoreTimeout
	io.ctx.PipeToSelf(func(c context.Context) Message {
		c, cancel := context.WithTimeout(c, timeout)
		defer cancel()
		res := downResult{call: call}
		if call.down {
			res.err = leases.DownNode(c, call.node)
		} else {
			res.expired, res.err = leases.NodeLeaseExpired(c, call.node)
		}
		return res
	})
}

func (io coordinatorIO) rebalanced(n int) { io.cr.r.m.Rebalanced(n) }

func (io coordinatorIO) log(level slog.Level, msg string, args ...any) {
	io.cr.r.s.log.Log(context.Background(), level, msg, append([]any{"entity_type", io.cr.r.typ}, args...)...)
}

// maxHeldSteps bounds the steps whose messages wait for a store that
// fails (the stash's default capacity, which bounded them before the
// pipeline): past it the store has been down too long, and the
// coordinator stops rather than grow without end; its successor rebuilds
// from the store. While the store answers, however slowly, the steps held
// are those of one commit's time (at most StoreTimeout): a burst of them
// is load, not an outage (a stream of StopShards stopped the coordinator
// of TestFastPathFallsBackWhileShardsHandOff 1 run in 50).
const maxHeldSteps = 4096

// retryStoreWrites makes a coordinator try its failed store writes again.
type retryStoreWrites struct{ runtime.OwnTick }

// batchWritten is the outcome of writing batch seq.
type batchWritten struct {
	runtime.OwnTick
	seq uint64
	err error
}

func (retryStoreWrites) ProtocolMessage() {}
func (batchWritten) ProtocolMessage()     {}

// storeBackOff paces the retries of a coordinator's store: its writes, and
// its restarts when it cannot acquire the store.
func storeBackOff(st Settings) *backoff.ExponentialBackOff {
	return backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(st.RetryInterval),
		backoff.WithMaxInterval(30*time.Second),
		backoff.WithMaxElapsedTime(0))
}
