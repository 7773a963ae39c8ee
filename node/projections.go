package node

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/shoal-dev/shoal/projection/sharded"
)

// projectionSet is the projections a node runs, by name, for the admin
// API. Its zero value is empty.
type projectionSet struct {
	mu    sync.Mutex
	byKey map[string]*sharded.Projection
}

// RunProjection runs a projection's instances across the cluster, this
// node taking its share (package projection/sharded), and lists it in the
// admin API, where any node's operator sees and operates every instance.
// Call it on every node with the same cfg.Name and cfg.Instances; the
// node stops keeping its instances alive when it shuts down (which hands
// them off).
func (n *Node) RunProjection(cfg sharded.Config) (*sharded.Projection, error) {
	if n.sharding == nil {
		return nil, fmt.Errorf("node: RunProjection before Start: %w", sharded.ErrInvalidConfig)
	}
	n.projections.mu.Lock()
	defer n.projections.mu.Unlock()
	if _, ok := n.projections.byKey[cfg.Name]; ok {
		return nil, fmt.Errorf("node: projection %q runs already: %w", cfg.Name, sharded.ErrInvalidConfig)
	}
	p, err := sharded.Start(n.sharding, cfg)
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	if n.projections.byKey == nil {
		n.projections.byKey = map[string]*sharded.Projection{}
	}
	n.projections.byKey[cfg.Name] = p
	go func() {
		<-n.done
		p.Stop()
	}()
	return p, nil
}

// Projections are the projections RunProjection started, by name.
func (n *Node) Projections() []*sharded.Projection {
	n.projections.mu.Lock()
	defer n.projections.mu.Unlock()
	out := make([]*sharded.Projection, 0, len(n.projections.byKey))
	for _, p := range n.projections.byKey {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b *sharded.Projection) int { return strings.Compare(a.Name(), b.Name()) })
	return out
}

// projection is the projection name RunProjection started, or nil.
func (n *Node) projection(name string) *sharded.Projection {
	n.projections.mu.Lock()
	defer n.projections.mu.Unlock()
	return n.projections.byKey[name]
}
