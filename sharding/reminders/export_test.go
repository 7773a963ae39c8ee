package reminders

import (
	"github.com/shoal-dev/shoal/entity"
)

// StartWith starts a Firer for typ on hosted shards, telling through
// tell: benchmarks fire without a sharding layer.
func StartWith(typ string, sys *entity.System, cfg Config, hosted func() []string, tell func(id string, cmd any) error) (*Firer, error) {
	return start(typ, sys, cfg, placement{hosted: hosted}, tell)
}
