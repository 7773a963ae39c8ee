// Package reminders fires durable reminders (docs/DESIGN.md, "Durable
// reminders") on the node that hosts their shard, and gives plain
// (not event-sourced) entities a direct way to set, cancel and acknowledge
// them.
//
// A Firer runs per entity type on every node. It holds in memory only the
// reminders of the shards its region hosts that are due within
// Config.Window: it loads them from the store when a shard starts here and
// every Config.LoadEvery, learns of the reminders this node sets,
// acknowledges or cancels from the store's observer at once, and drops a
// shard's when the shard leaves. When one falls due (on the database's
// clock, estimated from the store's answers) it decodes the command, fills
// in its reminder.Delivery and tells it to the entity through sharding,
// which starts the entity if it is passivated. Delivery is at least once:
// the reminder stays stored until the entity acknowledges the delivery
// (eventsourced does, with the events of its handling), and a delivery not
// acknowledged within Config.RedeliverAfter is sent again. A one-shot
// reminder missed while no node fired (downtime) fires once at once; a
// periodic one fires once for all its missed ticks, then goes on from the
// first tick after the acknowledgement.
//
// A shard nobody hosts has no home to fire its reminders (after a full
// cluster restart none has, until a message comes): with every load, and
// when this node sets a reminder for such a shard, the Firer starts the
// entity of its earliest reminder through sharding, which places the shard
// (see kick).
//
// A Firer fires only while Config.Holds says the node holds its lease: a
// node paused past its lease does not fire after it resumes, and the
// shard's next home, which starts it only once the lease expired, takes
// over.
package reminders

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/internal/metrics"
	"github.com/shoal-dev/shoal/sharding"
	"github.com/shoal-dev/shoal/sharding/internal/bridge"
	"github.com/shoal-dev/shoal/timers"
	"github.com/shoal-dev/shoal/timers/reminder"
)

// Config tunes a Firer. Zero fields take the defaults.
type Config struct {
	// Store holds the reminders. Default: the System's.
	Store reminder.Store
	// Holds reports whether the node holds its lease; the Firer fires
	// nothing while it does not. Default: always (a node without leases).
	Holds func() bool
	// Window is how far ahead the Firer holds reminders in memory.
	// Default 1 minute.
	Window time.Duration
	// LoadEvery is how often it loads the window of its shards again.
	// Default Window/4.
	LoadEvery time.Duration
	// MaxHeld bounds the reminders held per entity type (the earliest due
	// of the window). Default 100 000.
	MaxHeld int
	// RedeliverAfter is how long a delivery may stay unacknowledged
	// before it is sent again. Default 30 s.
	RedeliverAfter time.Duration
	// ShardCheckEvery is how often it looks which shards its region
	// hosts. Default 250 ms.
	ShardCheckEvery time.Duration
	// LateAfter is how long past its due time an unacknowledged reminder
	// counts as late (the shoal_reminders_late gauge). Default 10 s.
	LateAfter time.Duration
	// Metrics, when set, receives the shoal_reminders_* collectors.
	Metrics prometheus.Registerer
	// Clock defaults to the System's.
	Clock timers.Clock
	// Logger defaults to the System's.
	Logger *slog.Logger
}

func (c Config) withDefaults(sys *entity.System) Config {
	if c.Store == nil {
		c.Store = sys.Reminders()
	}
	if c.Holds == nil {
		c.Holds = func() bool { return true }
	}
	if c.Window <= 0 {
		c.Window = time.Minute
	}
	if c.LoadEvery <= 0 {
		c.LoadEvery = c.Window / 4
	}
	if c.MaxHeld <= 0 {
		c.MaxHeld = 100_000
	}
	if c.RedeliverAfter <= 0 {
		c.RedeliverAfter = 30 * time.Second
	}
	if c.ShardCheckEvery <= 0 {
		c.ShardCheckEvery = 250 * time.Millisecond
	}
	if c.LateAfter <= 0 {
		c.LateAfter = 10 * time.Second
	}
	if c.Clock == nil {
		c.Clock = sys.Clock()
	}
	if c.Logger == nil {
		c.Logger = sys.Logger()
	}
	return c
}

// ErrNoStore is returned by Start without a reminder store.
var ErrNoStore = errors.New("reminders: no reminder store")

// Firer fires the reminders of one entity type on this node.
type Firer struct {
	typ     string
	cfg     Config
	log     *slog.Logger
	hosted  func() []string
	deliver func(reminder.Reminder) error
	// homed and startEntity place shards that have reminders due (see
	// kick).
	homed       func() map[string]bool
	startEntity func(id string) error

	wake   chan struct{}
	stop   chan struct{}
	done   chan struct{}
	closer sync.Once

	mu       sync.Mutex
	observed []observedBatch // from the store's observer, not yet taken
	stats    Stats
	perShard map[string]metrics.ReminderShard // shards with reminders due

	// Owned by the run goroutine.
	shards     map[string]bool
	held       *heldSet
	offset     time.Duration // database time − Clock time, from the last load
	nextLoad   time.Time     // Clock time
	summarized time.Time     // Clock time of the last summary
	timer      timers.Timer
}

// Stats counts what a Firer did.
type Stats struct {
	// Held is the reminders held in memory now; Delivered the deliveries
	// sent (redeliveries included); Loads the windows loaded.
	Held, Delivered, Loads int
	// Shards is how many shards the Firer fires for now.
	Shards int
	// Due is how many it holds that are due and not acknowledged; Late
	// those due longer than Config.LateAfter ago.
	Due, Late int
}

// report is the Firer's part of a metrics scrape.
func (f *Firer) report() metrics.ReminderReport {
	f.mu.Lock()
	defer f.mu.Unlock()
	return metrics.ReminderReport{Type: f.typ, Held: f.stats.Held, Delivered: uint64(f.stats.Delivered), Shards: maps.Clone(f.perShard)}
}

// Start fires the reminders of region's entity type on this node until
// Stop. StartAll does it for every type of a node.
func Start[C any](region *sharding.Region[C], sys *entity.System, cfg Config) (*Firer, error) {
	typ := region.EntityRefFor("_").EntityType()
	f, err := startOn(typ, sys, cfg, bridge.RegionOf(region))
	if err != nil {
		return nil, err
	}
	return startReporting(f), nil
}

// startOn starts the Firer of typ on its region r.
func startOn(typ string, sys *entity.System, cfg Config, r bridge.Region) (*Firer, error) {
	return start(typ, sys, cfg, placement{
		hosted:      r.HostedShards,
		homed:       func() map[string]bool { return shardSet(r.Homes()) },
		startEntity: r.StartEntity,
	}, r.TellUntyped)
}

// shardSet is the shards of homes.
func shardSet[V any](homes map[string]V) map[string]bool {
	out := make(map[string]bool, len(homes))
	for s := range homes {
		out[s] = true
	}
	return out
}

// placement is what a Firer asks of its region: the shards hosted here,
// every shard's home it knows, and to start an entity (placing its shard).
type placement struct {
	hosted      func() []string
	homed       func() map[string]bool
	startEntity func(id string) error
}

func start(typ string, sys *entity.System, cfg Config, p placement, tell func(id string, cmd any) error) (*Firer, error) {
	cfg = cfg.withDefaults(sys)
	if cfg.Store == nil {
		return nil, ErrNoStore
	}
	reg := sys.Codec()
	if reg == nil {
		return nil, errors.New("reminders: the System has no codec to decode reminder commands with")
	}
	f := &Firer{
		typ: typ, cfg: cfg, log: cfg.Logger.With("entity_type", typ),
		hosted: p.hosted, homed: p.homed, startEntity: p.startEntity,
		deliver: func(r reminder.Reminder) error { return deliver(reg, tell, r) },
		wake:    make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
		shards: map[string]bool{}, held: newHeldSet(),
	}
	if o, ok := cfg.Store.(interface{ Observe(reminder.Observer) }); ok {
		o.Observe(f.observe)
	}
	go f.run()
	return f, nil
}

// Start's firer reports its own metrics; StartAll's Service reports its
// firers'.
func startReporting(f *Firer) *Firer {
	metrics.NewReminders(f.cfg.Metrics, func() []metrics.ReminderReport { return []metrics.ReminderReport{f.report()} })
	return f
}

// deliver decodes r's command, stamps its delivery and tells it to the
// entity through sharding.
func deliver(reg *codec.Registry, tell func(id string, cmd any) error, r reminder.Reminder) error {
	v, err := reg.Decode(r.Manifest, r.Payload)
	if err != nil {
		return err
	}
	v, ok := reminder.Stamp(v, reminder.Delivery{Reminder: r.Key, Generation: r.Generation, Due: r.Due})
	if !ok {
		return fmt.Errorf("%w: %s: command %T embeds no reminder.Delivery", reminder.ErrInvalid, r.Key, v)
	}
	if err := tell(r.EntityID, v); err != nil {
		if errors.Is(err, bridge.ErrWrongMessageType) {
			return fmt.Errorf("%w: %s: %w", reminder.ErrInvalid, r.Key, err)
		}
		return err
	}
	return nil
}

// Stop ends the Firer and waits for it; it holds nothing after.
func (f *Firer) Stop() {
	f.closer.Do(func() { close(f.stop) })
	<-f.done
}

// Stats reports what the Firer did so far.
func (f *Firer) Stats() Stats {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stats
}

// observedBatch is a batch the store applied, with the store's now when
// it did: a relative due time counts from then, not from when the run
// goroutine takes it (which may be minutes later, after a lease was lost).
type observedBatch struct {
	reminder.Batch
	now time.Time // the store's, or zero when it leaves it to us
	at  time.Time // the Clock's when the store told us
}

// observe is the store's observer: it queues b for the run goroutine.
func (f *Firer) observe(b reminder.Batch, now time.Time) {
	mine := false
	for _, a := range b.Acks {
		mine = mine || a.EntityType == f.typ
	}
	for _, c := range b.Changes {
		mine = mine || c.EntityType == f.typ
	}
	if !mine {
		return
	}
	f.mu.Lock()
	f.observed = append(f.observed, observedBatch{Batch: b, now: now, at: f.cfg.Clock.Now()})
	f.mu.Unlock()
	f.poke()
}

func (f *Firer) poke() {
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

func (f *Firer) run() {
	defer close(f.done)
	defer func() {
		if f.timer != nil {
			f.timer.Stop()
		}
	}()
	for {
		f.step()
		select {
		case <-f.stop:
			return
		case <-f.wake:
		}
	}
}

// step does what is due now and arms the timer for the next time.
func (f *Firer) step() {
	now := f.cfg.Clock.Now()
	if !f.cfg.Holds() {
		// The lease may be gone: another node may host these shards now.
		// Hold nothing; start over once it holds again.
		f.dropAll()
		f.arm(now, now.Add(f.cfg.ShardCheckEvery))
		f.summarize(now, true)
		return
	}
	f.checkShards(now)
	if !now.Before(f.nextLoad) {
		f.load(now, f.sortedShards())
		f.kick()
	}
	f.takeObserved(now)
	next := f.fire(now)
	next = earliest(next, f.nextLoad, now.Add(f.cfg.ShardCheckEvery))
	f.arm(now, next)
	f.summarize(now, false)
}

// summarize publishes what is held for Stats and the metrics, at most
// every ShardCheckEvery unless forced: it looks at every held reminder.
func (f *Firer) summarize(now time.Time, force bool) {
	if !force && now.Before(f.summarized.Add(f.cfg.ShardCheckEvery)) {
		f.mu.Lock()
		f.stats.Held, f.stats.Shards = f.held.len(), len(f.shards)
		f.mu.Unlock()
		return
	}
	f.summarized = now
	dbNow := now.Add(f.offset)
	perShard := map[string]metrics.ReminderShard{}
	due, late := 0, 0
	for _, h := range f.held.byKey {
		if h.r.Due.After(dbNow) {
			continue
		}
		s := perShard[h.r.ShardID]
		s.Due++
		due++
		if h.r.Due.Before(dbNow.Add(-f.cfg.LateAfter)) {
			s.Late++
			late++
		}
		perShard[h.r.ShardID] = s
	}
	f.mu.Lock()
	f.stats.Held, f.stats.Shards, f.stats.Due, f.stats.Late = f.held.len(), len(f.shards), due, late
	f.perShard = perShard
	f.mu.Unlock()
}

func earliest(ts ...time.Time) time.Time {
	var m time.Time
	for _, t := range ts {
		if !t.IsZero() && (m.IsZero() || t.Before(m)) {
			m = t
		}
	}
	return m
}

func (f *Firer) arm(now, at time.Time) {
	if f.timer != nil {
		f.timer.Stop()
	}
	f.timer = f.cfg.Clock.AfterFunc(max(at.Sub(now), 0), f.poke)
}

func (f *Firer) dropAll() {
	clear(f.shards)
	f.held.clear()
	f.nextLoad = time.Time{}
}

func (f *Firer) sortedShards() []string {
	out := make([]string, 0, len(f.shards))
	for s := range f.shards {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// checkShards follows the shards the region hosts: a shard that started
// here gets its window loaded, one that left has its reminders dropped.
func (f *Firer) checkShards(now time.Time) {
	hosted := f.hosted()
	now2 := map[string]bool{}
	var started []string
	for _, s := range hosted {
		now2[s] = true
		if !f.shards[s] {
			started = append(started, s)
		}
	}
	for s := range f.shards {
		if !now2[s] {
			delete(f.shards, s)
			f.held.removeIf(func(h *held) bool { return h.r.ShardID == s })
		}
	}
	for _, s := range started {
		f.shards[s] = true
	}
	if len(started) > 0 && !f.nextLoad.IsZero() {
		f.load(now, started)
	}
}

// load reads the window of shards and replaces what is held for them.
func (f *Firer) load(now time.Time, shards []string) {
	all := len(shards) == len(f.shards)
	if all {
		f.nextLoad = now.Add(f.cfg.LoadEvery)
	}
	if len(shards) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), f.cfg.LoadEvery)
	defer cancel()
	w, err := f.cfg.Store.Due(ctx, reminder.Query{EntityType: f.typ, Shards: shards, Within: f.cfg.Window, Limit: f.cfg.MaxHeld})
	if err != nil {
		f.log.Warn("loading due reminders failed; retrying", "err", err)
		if all {
			f.nextLoad = now.Add(min(f.cfg.LoadEvery, time.Second))
		}
		return
	}
	after := f.cfg.Clock.Now()
	// The database read its clock during the load, before after;
	// counting from after keeps the estimate from running ahead of it
	// (a load that waited for a connection would put a midpoint ahead by
	// half the wait), so a reminder fires late by at most a load's round
	// trip, never early.
	f.offset = w.Now.Sub(after)
	in := map[string]bool{}
	for _, s := range shards {
		in[s] = true
	}
	fresh := make(map[reminder.Key]reminder.Reminder, len(w.Reminders))
	for _, r := range w.Reminders {
		fresh[r.Key] = r
	}
	f.held.removeIf(func(h *held) bool {
		r, ok := fresh[h.r.Key]
		return in[h.r.ShardID] && (!ok || r.Generation != h.r.Generation)
	})
	for k, r := range fresh {
		if !f.shards[r.ShardID] {
			continue
		}
		if h, ok := f.held.get(k); ok && h.r.Generation == r.Generation {
			continue // the same delivery: keep when it was sent
		}
		if f.held.len() < f.cfg.MaxHeld {
			f.held.put(r)
		}
	}
	f.mu.Lock()
	f.stats.Loads++
	f.mu.Unlock()
}

// kick places the shards whose reminders would otherwise wait: for each
// shard this node does not host that has reminders due within the window
// and no home this node knows of, or has reminders due now (its home may
// be gone), it starts the entity of the earliest one through sharding.
// That places a shard nobody hosts (none is, after a full cluster restart,
// until a message comes) ahead of its reminders, and its home fires them;
// where the shard runs, it starts an entity that runs already or is about
// to get its reminder anyway. It runs with every full load.
func (f *Firer) kick() {
	if f.startEntity == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), f.cfg.LoadEvery)
	defer cancel()
	soon, err := f.cfg.Store.DueShards(ctx, f.typ, f.cfg.Window)
	if err != nil {
		f.log.Warn("listing the shards with due reminders failed", "err", err)
		return
	}
	due, err := f.cfg.Store.DueShards(ctx, f.typ, 0)
	if err != nil {
		f.log.Warn("listing the shards with due reminders failed", "err", err)
		return
	}
	homed := f.homed()
	for shard, id := range soon {
		if homed[shard] || f.shards[shard] {
			continue
		}
		f.place(shard, id)
		delete(due, shard)
	}
	for shard, id := range due {
		if !f.shards[shard] {
			f.place(shard, id)
		}
	}
}

// place starts entity id of shard, which places the shard.
func (f *Firer) place(shard, id string) {
	if err := f.startEntity(id); err != nil {
		f.log.Warn("starting a shard with due reminders failed", "shard_id", shard, "err", err)
	}
}

// takeObserved applies what this node's store wrote since the last step.
func (f *Firer) takeObserved(now time.Time) {
	f.mu.Lock()
	bs := f.observed
	f.observed = nil
	f.mu.Unlock()
	dbNow := now.Add(f.offset)
	var homed map[string]bool
	placed := map[string]bool{}
	if len(bs) > 0 && f.homed != nil {
		homed = f.homed()
	}
	for _, b := range bs {
		appliedAt := b.now
		if appliedAt.IsZero() {
			appliedAt = b.at.Add(f.offset)
		}
		for _, a := range b.Acks {
			h, ok := f.held.get(a.Key)
			if !ok || h.r.Generation != a.Generation {
				continue
			}
			next := reminder.NextDue(h.r.Due, h.r.Period, appliedAt)
			if h.r.Period == 0 || next.After(dbNow.Add(f.cfg.Window)) {
				f.held.remove(a.Key)
				continue
			}
			r := h.r
			r.Due, r.Generation = next, a.Next
			f.held.put(r)
		}
		for _, c := range b.Changes {
			if c.EntityType != f.typ {
				continue
			}
			f.held.remove(c.Key)
			if c.Cancel {
				continue
			}
			due := c.At
			if due.IsZero() {
				due = appliedAt.Add(c.After)
			}
			if !f.shards[c.ShardID] {
				// Set here for a shard nobody hosts (not by its entity,
				// then): place it, so that its home fires the reminder.
				if !homed[c.ShardID] && !placed[c.ShardID] && f.startEntity != nil && !due.After(dbNow.Add(f.cfg.Window)) {
					placed[c.ShardID] = true
					f.place(c.ShardID, c.EntityID)
				}
				continue
			}
			if due.After(dbNow.Add(f.cfg.Window)) || f.held.len() >= f.cfg.MaxHeld {
				continue // the load that reaches it picks it up
			}
			f.held.put(reminder.Reminder{
				Key: c.Key, ShardID: c.ShardID, Due: due, Period: c.Period,
				Manifest: c.Manifest, Payload: c.Payload, Generation: c.Generation,
			})
		}
	}
}

// fire delivers what is due and returns when the next one is (Clock time).
func (f *Firer) fire(now time.Time) time.Time {
	dbNow := now.Add(f.offset)
	delivered := 0
	defer func() {
		if delivered > 0 {
			f.mu.Lock()
			f.stats.Delivered += delivered
			f.mu.Unlock()
		}
	}()
	for {
		h := f.held.next()
		if h == nil {
			return time.Time{}
		}
		if h.at.After(dbNow) {
			return h.at.Add(-f.offset)
		}
		if !f.cfg.Holds() {
			return now.Add(f.cfg.ShardCheckEvery)
		}
		h.sent = true
		f.held.schedule(h, dbNow.Add(f.cfg.RedeliverAfter))
		if err := f.deliver(h.r); err != nil {
			if errors.Is(err, reminder.ErrInvalid) || errors.Is(err, codec.ErrUnknownManifest) {
				f.log.Error("reminder cannot be delivered; it stays stored", "reminder", h.r.Key.String(), "err", err)
				f.held.remove(h.r.Key)
				continue
			}
			f.log.Warn("delivering a reminder failed; retrying", "reminder", h.r.Key.String(), "err", err)
			f.held.schedule(h, dbNow.Add(min(time.Second, f.cfg.RedeliverAfter)))
		}
		delivered++
	}
}
