package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// RegionReport is what a region reports at scrape time: the messages it
// buffers for shards without a known home or handing off, and the running
// entities of each shard it hosts.
type RegionReport struct {
	Type     string
	Buffered int
	Shards   map[string]int
}

// Sharding holds the sharding layer's collectors. A nil *Sharding is off.
type Sharding struct {
	passivations, restarts, backoffs, handoffs, rebalances *prometheus.CounterVec
	handoffDuration                                        *prometheus.HistogramVec

	mu    sync.Mutex
	types map[string]*ShardingType
}

// NewSharding registers the sharding layer's collectors on reg; report is
// called at each scrape to list the node's regions. nil when reg is nil.
func NewSharding(reg prometheus.Registerer, report func() []RegionReport) *Sharding {
	if reg == nil {
		return nil
	}
	counter := func(sub, name, help string) *prometheus.CounterVec {
		return register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: sub, Name: name, Help: help,
		}, []string{"type"}))
	}
	s := &Sharding{
		types:        make(map[string]*ShardingType),
		passivations: counter("entity", "passivations_total", "Sharded entities asked to stop to save memory (on request or idle), per entity type."),
		restarts:     counter("entity", "restarts_total", "Sharded entities started again after a failure's back-off, per entity type."),
		backoffs:     counter("entity", "backoffs_total", "Back-offs of sharded entities that failed, per entity type."),
		handoffs:     counter("sharding", "handoffs_total", "Shards this node handed off (all their entities stopped), per entity type."),
		rebalances:   counter("sharding", "rebalanced_shards_total", "Shards the coordinator on this node moved to rebalance, per entity type."),
	}
	s.handoffDuration = register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: Namespace, Subsystem: "sharding", Name: "handoff_duration_seconds",
		Help:    "Time from a shard's hand-off start to its last entity stopping, per entity type.",
		Buckets: latencyBuckets,
	}, []string{"type"}))
	rc := &regionCollector{
		report: report,
		buffer: prometheus.NewDesc(prometheus.BuildFQName(Namespace, "sharding", "region_buffer_depth"),
			"Messages a region holds for shards whose home is unknown or that hand off.", []string{"type"}, nil),
		active: prometheus.NewDesc(prometheus.BuildFQName(Namespace, "sharding", "active_entities"),
			"Running entities per hosted shard.", []string{"type", "shard"}, nil),
	}
	registerScraped(reg, rc.Collect, rc.buffer, rc.active)
	return s
}

// Type returns the handle of entity type name; nil when s is nil.
func (s *Sharding) Type(name string) *ShardingType {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.types[name]
	if t == nil {
		t = &ShardingType{
			passivations: s.passivations.WithLabelValues(name), restarts: s.restarts.WithLabelValues(name),
			backoffs: s.backoffs.WithLabelValues(name), handoffs: s.handoffs.WithLabelValues(name),
			rebalances: s.rebalances.WithLabelValues(name), handoffDuration: s.handoffDuration.WithLabelValues(name),
		}
		s.types[name] = t
	}
	return t
}

// ShardingType is the sharding collectors of one entity type. A nil
// *ShardingType does nothing.
type ShardingType struct {
	passivations, restarts, backoffs, handoffs, rebalances prometheus.Counter
	handoffDuration                                        prometheus.Observer
}

// Passivated counts an entity asked to stop by passivation.
func (t *ShardingType) Passivated() {
	if t != nil {
		t.passivations.Inc()
	}
}

// Restarted counts an entity started again after its back-off.
func (t *ShardingType) Restarted() {
	if t != nil {
		t.restarts.Inc()
	}
}

// BackedOff counts a failed entity's back-off.
func (t *ShardingType) BackedOff() {
	if t != nil {
		t.backoffs.Inc()
	}
}

// HandedOff records a finished hand-off that took d.
func (t *ShardingType) HandedOff(d time.Duration) {
	if t != nil {
		t.handoffs.Inc()
		t.handoffDuration.Observe(seconds(d))
	}
}

// Rebalanced counts n shards a rebalance started moving.
func (t *ShardingType) Rebalanced(n int) {
	if t != nil && n > 0 {
		t.rebalances.Add(float64(n))
	}
}

// regionCollector reads region buffers and shard sizes at scrape time, so
// the data path keeps no gauge up to date.
type regionCollector struct {
	report         func() []RegionReport
	buffer, active *prometheus.Desc
}

func (c *regionCollector) Collect(ch chan<- prometheus.Metric) {
	for _, r := range c.report() {
		ch <- prometheus.MustNewConstMetric(c.buffer, prometheus.GaugeValue, float64(r.Buffered), r.Type)
		for shard, n := range r.Shards {
			ch <- prometheus.MustNewConstMetric(c.active, prometheus.GaugeValue, float64(n), r.Type, shard)
		}
	}
}
