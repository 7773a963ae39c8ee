package sharding

import (
	"fmt"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/sharding/internal/bridge"
)

// What the packages built on this façade need of it and a user must not
// call (the reminders' firers: the shards hosted here, the homes known, an
// entity started or told by type name) reaches them through package
// bridge, not through exported methods: Sharding and Region embed a link
// whose one method is unexported (docs/DESIGN.md, "Packages").

type (
	shardingLink = bridge.ShardingLink
	regionLink   = bridge.RegionLink
)

// shardingBridge is a Sharding as package bridge sees it.
type shardingBridge struct{ s *Sharding }

func (b shardingBridge) Types() []string { return b.s.Types() }

func (b shardingBridge) Region(typeName string) (bridge.Region, error) {
	r, err := b.s.region(typeName)
	if err != nil {
		return nil, err
	}
	return r.bridged(), nil
}

// regionBridge is a Region as package bridge sees it.
type regionBridge[C any] struct{ r *Region[C] }

func (r *Region[C]) bridged() bridge.Region { return regionBridge[C]{r} }

// HostedShards: the node fires the reminders of these (docs/DESIGN.md,
// "Durable reminders").
func (b regionBridge[C]) HostedShards() []string {
	b.r.mu.RLock()
	defer b.r.mu.RUnlock()
	return b.r.core.hostedShards()
}

func (b regionBridge[C]) Homes() map[string]cluster.UniqueAddress {
	b.r.mu.RLock()
	defer b.r.mu.RUnlock()
	return b.r.core.homes()
}

func (b regionBridge[C]) StartEntity(id string) error { return b.r.StartEntity(id) }

func (b regionBridge[C]) TellUntyped(id string, msg any) error {
	c, ok := msg.(C)
	if !ok {
		return fmt.Errorf("%w: %T is not a command of %s", bridge.ErrWrongMessageType, msg, b.r.typ)
	}
	return b.r.EntityRefFor(id).Tell(c)
}
