package entity_test

import (
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/shoal-dev/shoal/entity"
)

// chunkSink counts handled messages and closes done when a chunk's
// expected count arrives.
type chunkSink struct {
	handled atomic.Int64
	want    atomic.Int64
	done    chan struct{}
}

func (s *chunkSink) expect(n int) chan struct{} {
	s.handled.Store(0)
	s.done = make(chan struct{})
	s.want.Store(int64(n))
	return s.done
}

func (s *chunkSink) create(entity.Context[benchMsg]) entity.Behavior[benchMsg] {
	return entity.Receive(func(entity.Context[benchMsg], benchMsg) entity.Behavior[benchMsg] {
		if s.handled.Add(1) == s.want.Load() {
			close(s.done)
		}
		return entity.Same[benchMsg]()
	})
}

// tellRig is a System with entities of one type and the sink they count into.
type tellRig struct {
	sink  *chunkSink
	cells []*entity.Cell[benchMsg]
}

// newTellRigs returns a rig per registerer, their entities spawned in
// turn so that neither gets the better memory layout.
func newTellRigs(b *testing.B, entities int, regs ...prometheus.Registerer) []*tellRig {
	rigs := make([]*tellRig, len(regs))
	systems := make([]*entity.System, len(regs))
	props := make([]*entity.Props[benchMsg], len(regs))
	for i, reg := range regs {
		systems[i] = newSystem(b, func(c *entity.Config) { c.Metrics = reg })
		rigs[i] = &tellRig{sink: &chunkSink{}}
		props[i] = &entity.Props[benchMsg]{Key: benchKey, Create: rigs[i].sink.create}
	}
	for e := range entities {
		for i, r := range rigs {
			r.cells = append(r.cells, entity.Spawn(systems[i], props[i], strconv.Itoa(e)))
		}
	}
	return rigs
}

// tell sends n messages from one sender per core and waits until all are handled.
func (r *tellRig) tell(n int) time.Duration {
	if n == 0 {
		return 0
	}
	done := r.sink.expect(n)
	senders := runtime.GOMAXPROCS(0)
	start := time.Now()
	var wg sync.WaitGroup
	for w := range senders {
		wg.Go(func() {
			for i := w; i < n; i += senders {
				_ = r.cells[i%len(r.cells)].Tell(benchMsg{})
			}
		})
	}
	wg.Wait()
	<-done
	return time.Since(start)
}

// BenchmarkTellMetricsCost measures Tell throughput with metrics on
// (a Prometheus registry) and off (nil), alternating chunks of the same
// run so that both see the same machine load. on/off is the ratio of the
// two throughputs: 1 means metrics cost nothing. Every entity is of one
// type, so all senders and workers share its counters: the worst case.
func BenchmarkTellMetricsCost(b *testing.B) {
	for _, entities := range []int{1, 10_000} {
		b.Run("entities="+strconv.Itoa(entities), func(b *testing.B) {
			rigs := newTellRigs(b, entities, nil, prometheus.NewRegistry())
			off, on := rigs[0], rigs[1]
			const rounds = 40 // short chunks pair each "on" with an "off" under the same load
			chunk := b.N / rounds
			var tOff, tOn time.Duration
			b.ResetTimer()
			for round := range rounds {
				if round%2 == 0 { // alternate which goes first
					tOff += off.tell(chunk)
					tOn += on.tell(chunk)
				} else {
					tOn += on.tell(chunk)
					tOff += off.tell(chunk)
				}
			}
			b.StopTimer()
			if chunk == 0 {
				return
			}
			n := float64(chunk * rounds)
			b.ReportMetric(n/tOff.Seconds(), "off-tells/s")
			b.ReportMetric(n/tOn.Seconds(), "on-tells/s")
			b.ReportMetric(tOff.Seconds()/tOn.Seconds(), "on/off")
		})
	}
}
