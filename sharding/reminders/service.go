package reminders

import (
	"maps"
	"slices"
	"sync"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/internal/metrics"
	"github.com/shoal-dev/shoal/sharding"
	"github.com/shoal-dev/shoal/sharding/internal/bridge"
	"github.com/shoal-dev/shoal/timers"
)

// Service fires the reminders of every entity type of a node: it starts a
// Firer for each type the node's sharding runs, as types are registered.
type Service struct {
	s   *sharding.Sharding
	sys *entity.System
	cfg Config

	mu      sync.Mutex
	firers  map[string]*Firer
	stopped bool
	timer   timers.Timer
}

// StartAll fires the reminders of every entity type started on s (with
// sharding.Init, now or later) until Stop. Package node runs one.
func StartAll(s *sharding.Sharding, cfg Config) (*Service, error) {
	sys := s.System()
	cfg = cfg.withDefaults(sys)
	if cfg.Store == nil {
		return nil, ErrNoStore
	}
	v := &Service{s: s, sys: sys, cfg: cfg, firers: map[string]*Firer{}}
	metrics.NewReminders(cfg.Metrics, v.report)
	v.check()
	return v, nil
}

// check starts the firers of new types, and checks again later.
func (v *Service) check() {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.stopped {
		return
	}
	for _, typ := range v.s.Types() {
		if _, ok := v.firers[typ]; ok {
			continue
		}
		r, err := bridge.ShardingOf(v.s).Region(typ)
		var f *Firer
		if err == nil {
			f, err = startOn(typ, v.sys, v.cfg, r)
		}
		if err != nil {
			v.cfg.Logger.Error("cannot fire reminders", "entity_type", typ, "err", err)
			continue
		}
		v.firers[typ] = f
	}
	v.timer = v.cfg.Clock.AfterFunc(v.cfg.ShardCheckEvery*4, v.check)
}

// Stats reports each type's Firer.
func (v *Service) Stats() map[string]Stats {
	v.mu.Lock()
	firers := maps.Clone(v.firers)
	v.mu.Unlock()
	out := make(map[string]Stats, len(firers))
	for typ, f := range firers {
		out[typ] = f.Stats()
	}
	return out
}

func (v *Service) report() []metrics.ReminderReport {
	v.mu.Lock()
	firers := slices.Collect(maps.Values(v.firers))
	v.mu.Unlock()
	out := make([]metrics.ReminderReport, 0, len(firers))
	for _, f := range firers {
		out = append(out, f.report())
	}
	return out
}

// Types lists the types it fires for, sorted.
func (v *Service) Types() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return slices.Sorted(maps.Keys(v.firers))
}

// Stop stops every Firer and waits for them.
func (v *Service) Stop() {
	v.mu.Lock()
	v.stopped = true
	if v.timer != nil {
		v.timer.Stop()
	}
	firers := slices.Collect(maps.Values(v.firers))
	v.mu.Unlock()
	for _, f := range firers {
		f.Stop()
	}
}
