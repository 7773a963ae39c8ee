package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/cluster/lease"
	"github.com/shoal-dev/shoal/node/admin"
	"github.com/shoal-dev/shoal/sharding"
)

// requestedLeaveTimeout bounds a graceful leave another node or the admin
// API asked for: past it, what still runs is stopped at once.
const requestedLeaveTimeout = time.Minute

// adminSource is the node as the admin API sees it.
type adminSource struct{ n *Node }

var _ admin.Source = adminSource{}

func (s adminSource) Ready() error { return s.n.Ready() }
func (s adminSource) Alive() error { return s.n.Alive() }

func (s adminSource) Members() admin.Members {
	n := s.n
	v := n.members.View()
	gossip := n.members.GossipAddrs()
	out := admin.Members{Self: n.self.String(), Members: []admin.Member{}}
	if o, ok := v.Oldest(""); ok {
		out.Oldest = o.Address.String()
	}
	for _, m := range v.Members() {
		roles := m.Roles
		if roles == nil {
			roles = []string{}
		}
		out.Members = append(out.Members, admin.Member{
			Node: m.Address.Node, Incarnation: m.Address.Incarnation, ID: m.Address.String(),
			TransportAddr: m.Endpoint, GossipAddr: gossip[m.Address.String()], Status: m.Status.String(),
			Roles: roles, AppVersion: m.AppVersion, JoinOrder: m.JoinOrder, Unreachable: m.Unreachable,
		})
	}
	return out
}

func (s adminSource) Types() []string { return s.n.sharding.Types() }

func (s adminSource) Shards(ctx context.Context, typeName string) (admin.Shards, error) {
	st, err := s.n.sharding.TypeState(ctx, typeName)
	if err != nil {
		return admin.Shards{}, adminError(err)
	}
	return shardsView(st), nil
}

// shardsView is a type's sharding in the admin API's terms.
func shardsView(st sharding.TypeState) admin.Shards {
	out := admin.Shards{Type: st.Type, Nodes: make([]string, 0, len(st.Regions)), Shards: make([]admin.Shard, 0, len(st.Shards))}
	for _, r := range st.Regions {
		out.Nodes = append(out.Nodes, r.String())
	}
	if coord := st.Coordinator; !coord.IsZero() {
		out.Coordinator = admin.Coordinator{Node: coord.Node, Incarnation: coord.Incarnation, Epoch: st.Epoch}
	}
	for _, sh := range st.Shards {
		state := admin.StateActive
		switch {
		case sh.HandingOff:
			state = admin.StateHandingOff
		case sh.Home.IsZero():
			state = admin.StateUnallocated
		}
		var home string
		if !sh.Home.IsZero() {
			home = sh.Home.String()
		}
		out.Shards = append(out.Shards, admin.Shard{ID: sh.ID, Node: home, State: state, Entities: sh.Entities})
	}
	return out
}

func (s adminSource) Leases(ctx context.Context) (admin.Leases, error) {
	out := admin.Leases{Nodes: []admin.NodeLease{}, Coordinators: []admin.CoordinatorLease{}}
	if s.n.leaseList == nil {
		return out, nil // memory mode lists none
	}
	nodes, err := s.n.leaseList.NodeLeases(ctx)
	if err != nil {
		return out, err
	}
	for _, l := range nodes {
		out.Nodes = append(out.Nodes, admin.NodeLease{Node: l.Node.Node, Incarnation: l.Node.Incarnation, ExpiresAt: l.ExpiresAt, Expired: l.Expired})
	}
	coords, err := s.n.leaseList.CoordinatorLeases(ctx)
	if err != nil {
		return out, err
	}
	for _, l := range coords {
		out.Coordinators = append(out.Coordinators, admin.CoordinatorLease{Type: l.Name, Holder: l.Owner, Epoch: l.Epoch, ExpiresAt: l.ExpiresAt, Expired: l.Expired})
	}
	return out, nil
}

// Leave makes this node leave (node "" or this node's id or name), or asks
// the named member to, through sharding's LeaveRequest. node is a node id
// or a node#incarnation name.
func (s adminSource) Leave(_ context.Context, node string) error {
	n := s.n
	if node == "" || node == n.self.Node || node == n.self.String() {
		n.leaveRequested()
		return nil
	}
	target, ok := memberNamed(n.members.View().Members(), node)
	if !ok {
		return fmt.Errorf("%w: no member %q in the view of %s", admin.ErrUnknownNode, node, n.self)
	}
	if err := n.sharding.RequestLeave(target.Address); err != nil {
		return adminError(fmt.Errorf("node: ask %s to leave: %w", target.Address, err))
	}
	return nil
}

// memberNamed finds the member node names (a node id or node#incarnation)
// that is not Down. During a rolling restart a bare node id may name an
// old incarnation and its successor: the newest (largest join order) is
// the one meant.
func memberNamed(members []cluster.Member, node string) (cluster.Member, bool) {
	var found cluster.Member
	ok := false
	for _, m := range members {
		if m.Status == cluster.Down || (m.Address.Node != node && m.Address.String() != node) {
			continue
		}
		if !ok || m.JoinOrder > found.JoinOrder {
			found, ok = m, true
		}
	}
	return found, ok
}

func (s adminSource) Rebalance(_ context.Context, typeName, shard string) error {
	return adminError(s.n.sharding.RebalanceShard(typeName, shard))
}

// Down downs an incarnation the cluster knows of; a mistyped one is
// refused (admin.ErrUnknownNode) rather than recorded down in the store,
// where it would fence nothing and could make the real successor look stale.
func (s adminSource) Down(ctx context.Context, node cluster.UniqueAddress) error {
	return adminError(downKnown(ctx, s.n.members.View(), s.n.leases, node))
}

// downKnown downs node in store if it is a member of view (in any status)
// or the store holds a lease of it (live, expired or downed: a crashed
// node that left the view still holds one); otherwise it is
// admin.ErrUnknownNode and the store is not touched.
func downKnown(ctx context.Context, view cluster.View, store lease.Store, node cluster.UniqueAddress) error {
	if _, member := view.Member(node); !member {
		_, err := store.NodeLeaseExpired(ctx, node)
		switch {
		case errors.Is(err, lease.ErrNoLease):
			return fmt.Errorf("%w: %s is not a member and holds no lease", admin.ErrUnknownNode, node)
		case err != nil:
			return fmt.Errorf("node: look up the lease of %s: %w", node, err)
		}
	}
	return store.DownNode(ctx, node)
}

// adminError adds the admin API's kind to errors of the layers below.
func adminError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, sharding.ErrUnknownEntityType):
		return fmt.Errorf("%w: %w", admin.ErrUnknownType, err)
	case errors.Is(err, sharding.ErrUnknownShard):
		return fmt.Errorf("%w: %w", admin.ErrUnknownShard, err)
	case errors.Is(err, lease.ErrInvalidConfig):
		return fmt.Errorf("%w: %w", admin.ErrBadRequest, err)
	case errors.Is(err, sharding.ErrUnreachable):
		return fmt.Errorf("%w: %w", admin.ErrUnavailable, err)
	}
	return err
}

// leaveRequested starts a graceful leave in the background: what the
// admin API and other nodes' LeaveRequest call. With Config.OnLeaveRequest
// the application drives it (its API drains before the shards move, as
// on SIGTERM); otherwise Shutdown runs here. Done closes when it ends.
func (n *Node) leaveRequested() {
	n.leaveOnce.Do(func() {
		go func() {
			<-n.started
			if n.cfg.OnLeaveRequest != nil {
				n.log.Info("node: leave requested; the application drains, then shuts the node down")
				n.cfg.OnLeaveRequest()
				return
			}
			n.log.Info("node: leave requested; shutting down")
			ctx, cancel := context.WithTimeout(context.Background(), requestedLeaveTimeout)
			defer cancel()
			if err := n.Shutdown(ctx); err != nil {
				n.log.Warn("node: requested leave", "err", err)
			}
		}()
	})
}

// startAdmin serves the admin API on Config.AdminAddr, if set.
func (n *Node) startAdmin() error {
	if n.cfg.AdminAddr == "" {
		return nil
	}
	ln, err := net.Listen("tcp", n.cfg.AdminAddr)
	if err != nil {
		return fmt.Errorf("node: admin: listen %s: %w", n.cfg.AdminAddr, err)
	}
	n.admin = admin.NewServer(adminSource{n}, admin.Options{
		Token: n.cfg.AdminToken, ReadsNeedToken: n.cfg.AdminReadsNeedToken, Logger: n.log,
	})
	n.adminAddr = ln.Addr().String()
	go func() {
		if err := n.admin.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			n.log.Error("node: admin server stopped", "err", err)
		}
	}()
	n.log.Info("node: admin API", "addr", n.adminAddr)
	return nil
}

// stopAdmin stops the admin server: requests in flight get a second,
// then connections (the shard streams) are closed.
func (n *Node) stopAdmin() {
	if n.admin == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := n.admin.Shutdown(ctx); err != nil {
		_ = n.admin.Close()
	}
}

// AdminAddr is where the admin API listens ("" when Config.AdminAddr is
// empty).
func (n *Node) AdminAddr() string { return n.adminAddr }

// Done is closed once the node has stopped: Shutdown (called here, asked
// for through the admin API or by another node) or Kill has finished. An
// application waits on it to exit when an operator made the node leave.
func (n *Node) Done() <-chan struct{} { return n.done }
