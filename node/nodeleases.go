package node

import (
	"context"
	"errors"
	"fmt"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/cluster/lease"
	"github.com/shoal-dev/shoal/sharding"
)

// nodeLeases is sharding's view of the node leases in store, by node
// incarnation (sharding.NodeLeases), so that the coordinator downs exactly
// the incarnation membership reported failed.
type nodeLeases struct{ store lease.Store }

var _ sharding.NodeLeases = nodeLeases{}

// DownNode implements sharding.NodeLeases.
func (l nodeLeases) DownNode(ctx context.Context, a cluster.UniqueAddress) error {
	if err := l.store.DownNode(ctx, a); err != nil {
		return fmt.Errorf("node: down %s: %w", a, err)
	}
	return nil
}

// NodeLeaseExpired implements sharding.NodeLeases. An incarnation the
// store never heard of never hosted anything (a node holds its lease
// before it joins): expired.
func (l nodeLeases) NodeLeaseExpired(ctx context.Context, a cluster.UniqueAddress) (bool, error) {
	expired, err := l.store.NodeLeaseExpired(ctx, a)
	switch {
	case errors.Is(err, lease.ErrNoLease):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("node: node lease of %s: %w", a, err)
	}
	return expired, nil
}
