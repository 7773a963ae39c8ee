// Package metrics builds Shoal's Prometheus collectors from a
// prometheus.Registerer the user passes in, and hands the runtime typed,
// nil-safe handles to them.
//
// Why Prometheus's client_golang rather than OpenTelemetry metrics: the Go
// operators who run a sharded cluster scrape Prometheus; client_golang is
// one dependency where OpenTelemetry needs an SDK and an exporter; and
// OpenTelemetry can bridge a Prometheus registry (its Prometheus bridge)
// when a user wants OTLP.
//
// Nothing here is global: each constructor registers on the Registerer it
// is given, and a nil Registerer gives a nil handle whose methods do
// nothing, so the runtime pays one nil check per event when metrics are
// off. Label values are bounded: entity type, shard, peer, result — never
// an entity id. Hot paths resolve their labelled children once (per entity
// type, shard or peer) and keep the handle.
//
// The series (all prefixed shoal_, labelled node when registered through
// WithNode):
//
//	entity_messages_delivered_total{type}   entity_dead_letters_total{type}
//	entity_mailbox_depth{type}               entity_ask_duration_seconds{type}
//	entity_passivations_total{type}          entity_restarts_total{type}
//	entity_backoffs_total{type}              sharding_region_buffer_depth{type}
//	entity_untyped_dead_letters_total        (dead letters of no entity type)
//	sharding_active_entities{type,shard}     sharding_handoffs_total{type}
//	sharding_handoff_duration_seconds{type}  sharding_rebalanced_shards_total{type}
//	journal_persist_duration_seconds         journal_replay_duration_seconds
//	journal_batch_events                     lease_renewals_total{lease,result}
//	lease_renewal_lag_seconds{lease}         lease_renewal_duration_seconds{lease}
//	transport_sent_bytes_total{peer}         transport_received_bytes_total{peer}
//	transport_sent_frames_total{peer}        transport_received_frames_total{peer}
//	transport_queue_depth{peer}
//	projection_events_handled_total{projection,instance}
//	projection_failures_total{projection,instance,result}
//	projection_lag_seconds{projection,instance}
//	projection_last_event_timestamp_seconds{projection,instance}
//	projection_running{projection,instance}  projection_paused{projection,instance}
//	projection_lag_events{projection,instance} (sources that count events)
//	reminders_due{type,shard}                reminders_late{type,shard}
//	reminders_held{type}                     reminders_delivered_total{type}
//
// Depths, delivered counts and entities per shard are read at scrape
// time from counts the runtime keeps anyway or updates once per entity
// turn, so the data path pays no gauge update per message.
package metrics

import (
	"errors"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Namespace prefixes every metric name.
const Namespace = "shoal"

// WithNode returns reg with a constant node label added to every metric
// registered through it, so that several nodes (in tests, or one process
// running several) can share a registry. nil stays nil.
func WithNode(reg prometheus.Registerer, node string) prometheus.Registerer {
	if reg == nil {
		return nil
	}
	return prometheus.WrapRegistererWith(prometheus.Labels{"node": node}, reg)
}

// register registers c on reg and returns it, or, when an equal collector
// is registered already (a second runtime on the same registry and node
// label), the one registered, so that both count into it.
func register[T prometheus.Collector](reg prometheus.Registerer, c T) T {
	if err := reg.Register(c); err != nil {
		var dup prometheus.AlreadyRegisteredError
		if errors.As(err, &dup) {
			if existing, ok := dup.ExistingCollector.(T); ok {
				return existing
			}
		}
		// Another collector of the same name and different labels: a
		// programming error of the caller's registry; count unexported
		// rather than fail the runtime.
	}
	return c
}

// scraped is a collector that reads a runtime's state at scrape time
// (depths, sizes, counts the runtime keeps anyway). One is registered per
// registry and label set; registerScraped points it at the newest runtime.
type scraped struct {
	descs   []*prometheus.Desc
	collect atomic.Pointer[func(chan<- prometheus.Metric)]
}

func (s *scraped) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range s.descs {
		ch <- d
	}
}

func (s *scraped) Collect(ch chan<- prometheus.Metric) {
	if f := s.collect.Load(); f != nil {
		(*f)(ch)
	}
}

// registerScraped registers a collector of descs that collect fills. When
// one of the same descs is registered already (a runtime restarted in the
// process on the same registry and node label, or a second one running
// beside it), that collector is re-pointed at collect: the newest runtime
// is the one scraped, not a stopped one whose state no longer changes.
func registerScraped(reg prometheus.Registerer, collect func(chan<- prometheus.Metric), descs ...*prometheus.Desc) {
	s := &scraped{descs: descs}
	s.collect.Store(&collect)
	if got := register(reg, s); got != s {
		got.collect.Store(&collect)
	}
}

// latencyBuckets spans 100 µs to about 26 s, for asks, persists and replays.
var latencyBuckets = prometheus.ExponentialBuckets(0.0001, 4, 10)

// seconds converts d for a histogram observation.
func seconds(d time.Duration) float64 { return d.Seconds() }
