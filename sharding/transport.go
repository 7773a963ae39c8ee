package sharding

import (
	"fmt"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/cluster/inproc"
	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/sharding/internal/remote"
	"github.com/shoal-dev/shoal/timers"
)

// address names a region or a coordinator: one of each per entity type per
// node incarnation.
type address = remote.Address

var (
	// ErrUnreachable is returned by Tell (and matched by the errors of
	// RequestLeave) when nothing listens at the address a message is for:
	// its node is unknown, stale or gone, or runs no region of the type.
	ErrUnreachable = remote.ErrUnreachable
	// ErrUnknownTarget: the receiving node runs no listener for the
	// message's target (an entity type not started there, or no
	// coordinator there). A *RefusedError of that kind matches it.
	ErrUnknownTarget = remote.ErrUnknownTarget
	// ErrUndecodable: a user message did not decode on the receiving node
	// (see DecodeError). A *RefusedError of that kind matches it.
	ErrUndecodable = remote.ErrUndecodable
	// ErrRefusedByPeer: the node a command was sent to refused it (see
	// RefusedError).
	ErrRefusedByPeer = remote.ErrRefusedByPeer
)

// RefusedError fails an ask whose command the receiving node refused: it
// could not decode it (it matches ErrUndecodable too), no region of its
// entity type runs there (ErrUnknownTarget), or the region there refused
// it, its mailbox full. Reason is the refusing node's error text.
type RefusedError = remote.RefusedError

// DecodeError tells which user message did not decode on the receiving
// node. It matches ErrUndecodable, and the codec's error
// (codec.ErrUnknownManifest for an unknown manifest).
type DecodeError = remote.DecodeError

// TransportStats counts what a node's sharding sent and received: see
// Sharding.TransportStats.
type TransportStats = remote.Stats

// attachTransport builds the node's dispatch over cfg.Transport (or, when
// it is nil, over a cluster/inproc network of this node alone) and makes
// it the route of sys's replies to other nodes' asks. Messages to the node
// itself never touch the cluster transport; the ones to other nodes are
// sealed in sharding's wire (sharding/internal/wire) with the System's
// codec, in which the wire's types are registered here.
func (s *Sharding) attachTransport() error {
	reg := s.sys.Codec()
	if reg == nil {
		// Nothing the user sends can leave this node: what would is
		// refused on Send with codec.ErrUnregisteredType.
		reg = codec.NewRegistry()
	}
	ct := s.cfg.Transport
	if ct == nil {
		net, err := inproc.NewNetwork(inproc.Config{Codec: reg, Clock: timers.Real{}, Logger: s.log})
		if err != nil {
			return fmt.Errorf("sharding: %w", err)
		}
		if ct, err = net.Join(s.self, s.Receive); err != nil {
			return fmt.Errorf("sharding: %w", err)
		}
	}
	rt, err := remote.New(s.self, remote.Config{Codec: reg, View: s.latestView, Logger: s.log})
	if err != nil {
		return fmt.Errorf("sharding: %w", err)
	}
	if err := rt.Bind(ct); err != nil {
		return fmt.Errorf("sharding: %w", err)
	}
	rt.Attach(s.sys)
	s.remote = rt
	return nil
}

// latestView is the membership's latest view, as the regions see it, a
// new pointer for each new view; nil before New subscribes (nothing is
// refused as stale then).
func (s *Sharding) latestView() *cluster.View { return s.view.Load() }

// Receive is the cluster.Handler of Config.Transport: it hands what the
// node's other incarnations send to this node's regions, coordinators and
// asks. A bad message (one that does not decode, for a target not running
// here, from a sender the view holds Down or replaced) is dropped,
// counted (TransportStats) and logged once per kind and sender; the asks
// waiting on a refused command fail at once with a *RefusedError. It
// never blocks. The cluster transport is built before the Sharding, so
// its handler calls Receive through a variable set once New returns; what
// arrives before that is for no region yet.
func (s *Sharding) Receive(from cluster.UniqueAddress, msg any) { _ = s.receive(from, msg) }

func (s *Sharding) receive(from cluster.UniqueAddress, msg any) error {
	return s.remote.Receive(from, msg)
}

// TransportStats returns what this node's sharding sent and received
// through its transport so far.
func (s *Sharding) TransportStats() TransportStats { return s.remote.Stats() }
