// Package bridge hands the packages built on sharding's façade (reminders)
// what they need of a Sharding or a Region that a user must not call: the
// shards a region hosts, the homes it knows, starting an entity by type
// name and telling it a command of unknown type.
//
// No global state carries it. Sharding and Region embed a link (a
// ShardingLink, a RegionLink) under an unexported field name; the link's
// only method is unexported, so it is promoted into the façade's method
// set where this package can call it and nothing outside can
// (docs/DESIGN.md, "Packages").
package bridge

import (
	"errors"

	"github.com/shoal-dev/shoal/cluster"
)

// ErrWrongMessageType is returned by Region.TellUntyped for a message that
// is not of its entity type's command type.
var ErrWrongMessageType = errors.New("sharding: message of the wrong type")

// Region is one entity type's region, its command type erased.
type Region interface {
	// HostedShards lists, sorted, the shards the region hosts now.
	HostedShards() []string
	// Homes is every shard home the region knows: shard → node.
	Homes() map[string]cluster.UniqueAddress
	// StartEntity starts entity id wherever its shard lives, placing the
	// shard if it has no home.
	StartEntity(id string) error
	// TellUntyped tells entity id msg, which must be of the type's
	// command type (an error matching ErrWrongMessageType otherwise).
	TellUntyped(id string, msg any) error
}

// Sharding is a node's sharding, its types named.
type Sharding interface {
	// Types lists the entity types started on the node, sorted.
	Types() []string
	// Region is the region of typeName; an error matching
	// sharding.ErrUnknownEntityType when the type is not started.
	Region(typeName string) (Region, error)
}

// ShardingLink is embedded in sharding.Sharding.
type ShardingLink struct{ to Sharding }

// LinkSharding is the link to s.
func LinkSharding(s Sharding) ShardingLink { return ShardingLink{to: s} }

func (l ShardingLink) bridgedSharding() Sharding { return l.to }

// ShardingOf is what s, a *sharding.Sharding, bridges to.
func ShardingOf(s interface{ bridgedSharding() Sharding }) Sharding { return s.bridgedSharding() }

// RegionLink is embedded in sharding.Region.
type RegionLink struct{ to Region }

// LinkRegion is the link to r.
func LinkRegion(r Region) RegionLink { return RegionLink{to: r} }

func (l RegionLink) bridgedRegion() Region { return l.to }

// RegionOf is what r, a *sharding.Region, bridges to.
func RegionOf(r interface{ bridgedRegion() Region }) Region { return r.bridgedRegion() }
