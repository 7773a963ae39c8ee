package metrics

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// NoEntityType names, for Entity.Type, what belongs to no entity type:
// replies nobody waited for, messages an owner could not place, asks of a
// plain ref. Its dead letters go to entity_untyped_dead_letters_total, not
// to a type="none" series that reads like an entity type; its ask latency
// is labelled type="none" once such an ask happened.
const NoEntityType = "none"

// Entity holds the entity runtime's collectors. A nil *Entity is off.
type Entity struct {
	deliveredDesc *prometheus.Desc
	deadLetters   *prometheus.CounterVec
	askLatency    *prometheus.HistogramVec
	depthDesc     *prometheus.Desc
	// untyped is the handle of NoEntityType: not in types, so that no
	// mailbox or delivered series of a type "none" is reported.
	untyped *EntityType

	mu    sync.RWMutex
	types map[string]*EntityType
}

// NewEntity registers the entity runtime's collectors on reg; nil when reg is nil.
func NewEntity(reg prometheus.Registerer) *Entity {
	if reg == nil {
		return nil
	}
	e := &Entity{types: make(map[string]*EntityType)}
	e.deliveredDesc = prometheus.NewDesc(prometheus.BuildFQName(Namespace, "entity", "messages_delivered_total"),
		"Messages handed to an entity's behavior, per entity type; an entity at work reports at the end of its turn.", []string{"type"}, nil)
	e.deadLetters = register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Subsystem: "entity", Name: "dead_letters_total",
		Help: "Messages that reached no handler, per entity type (" + NoEntityType + " for replies).",
	}, []string{"type"}))
	e.askLatency = register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: Namespace, Subsystem: "entity", Name: "ask_duration_seconds",
		Help:    "Time from sending an ask to its outcome (reply or error), per entity type.",
		Buckets: latencyBuckets,
	}, []string{"type"}))
	e.depthDesc = prometheus.NewDesc(prometheus.BuildFQName(Namespace, "entity", "mailbox_depth"),
		"Messages waiting in the mailboxes of entities, per entity type; an entity at work reports at the end of its turn (at most the runtime's Throughput messages).", []string{"type"}, nil)
	registerScraped(reg, e.collect, e.depthDesc, e.deliveredDesc)
	e.untyped = &EntityType{
		deadLetters: register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: "entity", Name: "untyped_dead_letters_total",
			Help: "Messages that reached no handler and belong to no entity type: replies nobody waited for, messages an owner could not place.",
		})),
		askVec: e.askLatency,
	}
	return e
}

// Type returns the handle of entity type name, made on first use; nil when e is nil.
func (e *Entity) Type(name string) *EntityType {
	if e == nil {
		return nil
	}
	if name == NoEntityType {
		return e.untyped
	}
	e.mu.RLock()
	t := e.types[name]
	e.mu.RUnlock()
	if t != nil {
		return t
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if t = e.types[name]; t == nil {
		t = &EntityType{
			deadLetters: e.deadLetters.WithLabelValues(name),
			askLatency:  e.askLatency.WithLabelValues(name),
		}
		e.types[name] = t
	}
	return t
}

// EntityType is the collectors of one entity type, resolved once. A nil
// *EntityType does nothing.
type EntityType struct {
	deadLetters prometheus.Counter
	askLatency  prometheus.Observer
	// askVec, when set (NoEntityType), resolves askLatency on the first
	// ask, so that its series appears only once there is one.
	askVec  *prometheus.HistogramVec
	askOnce sync.Once
	depth   atomic.Int64
	// delivered is striped over cache lines: the workers running
	// different entities of one type count without contending.
	delivered [deliveredStripes]struct {
		n atomic.Uint64
		_ [56]byte
	}
	nextStripe atomic.Uint32
}

const deliveredStripes = 8

// Stripe is the delivered-counter stripe for a new entity to use.
func (t *EntityType) Stripe() uint8 {
	if t == nil {
		return 0
	}
	return uint8(t.nextStripe.Add(1) % deliveredStripes)
}

// Delivered counts n messages handed to a behavior, on stripe (from Stripe).
func (t *EntityType) Delivered(stripe uint8, n int) {
	if t != nil && n > 0 {
		t.delivered[stripe%deliveredStripes].n.Add(uint64(n))
	}
}

func (t *EntityType) deliveredTotal() uint64 {
	var sum uint64
	for i := range t.delivered {
		sum += t.delivered[i].n.Load()
	}
	return sum
}

// DeadLetter counts a message that reached no handler.
func (t *EntityType) DeadLetter() {
	if t != nil {
		t.deadLetters.Inc()
	}
}

// Queued adds n (negative: taken out) to the mailbox depth.
func (t *EntityType) Queued(n int) {
	if t != nil {
		t.depth.Add(int64(n))
	}
}

// Asked records an ask's time from send to outcome.
func (t *EntityType) Asked(d time.Duration) {
	if t == nil {
		return
	}
	if t.askVec != nil {
		t.askOnce.Do(func() { t.askLatency = t.askVec.WithLabelValues(NoEntityType) })
	}
	t.askLatency.Observe(seconds(d))
}

// collect reports each type's mailbox depth and delivered count at
// scrape time, so the runtime only keeps atomic counts per type.
func (e *Entity) collect(ch chan<- prometheus.Metric) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	for name, t := range e.types {
		ch <- prometheus.MustNewConstMetric(e.depthDesc, prometheus.GaugeValue, float64(t.depth.Load()), name)
		ch <- prometheus.MustNewConstMetric(e.deliveredDesc, prometheus.CounterValue, float64(t.deliveredTotal()), name)
	}
}
