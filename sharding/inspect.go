package sharding

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"github.com/shoal-dev/shoal/cluster"
	"maps"
	"slices"
	"strconv"

	"github.com/shoal-dev/shoal/sharding/internal/protocol"
)

// What operators ask of a node's sharding (the admin API): which types
// run, where each shard lives, and the actions that move work about. The
// methods are type-erased so that a caller needs no command type.

// ErrUnknownShard is returned by RebalanceShard for a shard that has no
// home in this node's view: there is nothing to move.
var ErrUnknownShard = errors.New("sharding: unknown shard")

// ShardState is one shard as a node sees it.
type ShardState struct {
	ID string
	// Home is the node of the region hosting the shard; zero while it
	// has none (stopped, or messages wait for the coordinator to place it).
	Home cluster.UniqueAddress
	// HandingOff is set while the shard moves: its messages are buffered.
	HandingOff bool
	// Entities is how many entities run in the shard, as its home
	// reported; -1 when the home did not answer.
	Entities int
}

// TypeState is the sharding of one entity type, as one node sees it.
type TypeState struct {
	Type string
	// Coordinator is the node hosting the type's coordinator, as this
	// node's region last learned it (zero while there is none), and
	// Epoch the newest coordinator epoch it has seen.
	Coordinator cluster.UniqueAddress
	Epoch       uint64
	// Regions lists, sorted, the nodes that may host the type's shards.
	Regions []cluster.UniqueAddress
	// Shards are sorted by id, in numeric order where both ids are numbers.
	Shards []ShardState
	// Unanswered lists the regions that did not report their entities.
	Unanswered []cluster.UniqueAddress
}

// Types lists the entity types started on this node, sorted.
func (s *Sharding) Types() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(maps.Keys(s.regions))
}

func (s *Sharding) region(typeName string) (regionRuntime, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.regions[typeName]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownEntityType, typeName)
	}
	return r, nil
}

// TypeState reports the shards of typeName: homes and hand-offs as this
// node's region knows them, entity counts as each hosting region reports
// them (it asks them all; give ctx a deadline).
func (s *Sharding) TypeState(ctx context.Context, typeName string) (TypeState, error) {
	r, err := s.region(typeName)
	if err != nil {
		return TypeState{}, err
	}
	return r.typeState(ctx), nil
}

// RebalanceShard asks the coordinator of typeName to move shard: it is
// handed off (its entities get their stop message) and placed again by
// the allocation strategy, which may pick the same node. It returns once
// the request is sent; ErrUnknownShard when the shard has no home here.
func (s *Sharding) RebalanceShard(typeName, shard string) error {
	r, err := s.region(typeName)
	if err != nil {
		return err
	}
	return r.rebalance(shard)
}

// RequestLeave asks node (an incarnation in the membership) to leave the
// cluster gracefully: its Config.OnLeaveRequest runs. It returns once the
// request is sent; an error matching ErrUnreachable when the node cannot
// be reached (or, for this node itself, runs no OnLeaveRequest). A node
// that runs none drops the request (see TransportStats).
func (s *Sharding) RequestLeave(node cluster.UniqueAddress) error {
	return s.remote.Send(address{Node: node}, protocol.LeaveRequest{})
}

// listenForLeave routes a LeaveRequest for this node to OnLeaveRequest.
func (s *Sharding) listenForLeave() (func(), error) {
	if s.cfg.OnLeaveRequest == nil {
		return func() {}, nil
	}
	return s.remote.Listen(address{Node: s.self}, func(m Message) error {
		if _, ok := m.(protocol.LeaveRequest); ok {
			s.log.Info("sharding: leave requested") // the logger names the node
			s.cfg.OnLeaveRequest()
		}
		return nil
	})
}

func (r *Region[C]) typeState(ctx context.Context) TypeState {
	r.mu.RLock()
	st := TypeState{Type: r.typ, Coordinator: r.core.coordinator, Epoch: r.core.epoch, Shards: r.core.shardStates()}
	r.mu.RUnlock()
	for _, m := range r.s.members() {
		if m.HasRole(r.ent.Role) && m.Status != cluster.Down {
			st.Regions = append(st.Regions, m.Address)
		}
	}
	slices.SortFunc(st.Regions, cluster.UniqueAddress.Compare)
	stats := r.ClusterStats(ctx)
	st.Unanswered = stats.Failed
	known := make(map[string]int, len(st.Shards))
	for i, sh := range st.Shards {
		known[sh.ID] = i
	}
	for _, region := range slices.SortedFunc(maps.Keys(stats.Regions), cluster.UniqueAddress.Compare) {
		for shard, n := range stats.Regions[region] {
			i, ok := known[shard]
			if !ok {
				// Hosted there but not yet announced here.
				st.Shards = append(st.Shards, ShardState{ID: shard, Home: region, Entities: n})
				known[shard] = len(st.Shards) - 1
				continue
			}
			if st.Shards[i].Home == region {
				st.Shards[i].Entities = n
			}
		}
	}
	sortShardStates(st.Shards)
	return st
}

func (r *Region[C]) rebalance(shardID string) error {
	var err error
	r.step(func(c *regionCore[C, *shard[C]]) {
		if e := c.shards[shardID]; e == nil || e.home.IsZero() {
			err = fmt.Errorf("%w: %s shard %q has no home", ErrUnknownShard, r.typ, shardID)
			return
		}
		c.toCoordinator(protocol.RebalanceShards{Shards: []string{shardID}})
	})
	return err
}

// sortShardStates sorts by id, numbers in numeric order before other ids.
func sortShardStates(shards []ShardState) {
	slices.SortFunc(shards, func(a, b ShardState) int { return compareShardIDs(a.ID, b.ID) })
}

// compareShardIDs orders shard ids: numbers in numeric order, before any
// other id; other ids in byte order.
func compareShardIDs(a, b string) int {
	na, errA := strconv.ParseUint(a, 10, 64)
	nb, errB := strconv.ParseUint(b, 10, 64)
	switch {
	case errA == nil && errB == nil:
		return cmp.Or(cmp.Compare(na, nb), cmp.Compare(a, b))
	case errA == nil:
		return -1
	case errB == nil:
		return 1
	}
	return cmp.Compare(a, b)
}
