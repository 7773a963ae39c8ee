package sharding

import (
	"errors"
	"fmt"
	"sync"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/internal/runtime"
)

// Address names a region or a coordinator: one of each per entity type per node.
type Address struct {
	Node        cluster.UniqueAddress
	Type        string
	Coordinator bool
}

func (a Address) String() string {
	if a.Coordinator {
		return a.Node.String() + "/" + a.Type + "/coordinator"
	}
	return a.Node.String() + "/" + a.Type
}

// ErrUnreachable is returned by Send when nothing listens at the address.
var ErrUnreachable = errors.New("sharding: address unreachable")

// Transport carries protocol messages between regions and coordinators.
// Messages from one sender to one address arrive in send order. Package
// remote implements it over a cluster.Transport; within one process (the
// single-node default, InProcessCluster) an in-memory one serves.
type Transport interface {
	// Send enqueues msg for the handler at to; it does not wait for handling.
	Send(to Address, msg Message) error
	// Listen routes messages for addr to handle, which must not block.
	// The returned function stops listening.
	Listen(addr Address, handle func(Message) error) (stop func(), err error)
}

// ReplyCarrier is a Transport that also carries replies to asks between
// its nodes; New attaches the node's runtime to it. The in-memory
// transport is one, and so is any wrapper that embeds it.
type ReplyCarrier interface {
	Transport
	Attach(node string, sys *entity.System)
}

// memoryTransport is a Transport within one process: the single-node
// default, and the transport the nodes of an InProcessCluster share. It
// hands messages over as values, without encoding them.
type memoryTransport struct {
	mu       sync.RWMutex
	handlers map[Address]func(Message) error
	systems  map[string]*entity.System // node → runtime, for replies
}

// newMemoryTransport returns an empty in-memory transport.
func newMemoryTransport() *memoryTransport {
	return &memoryTransport{handlers: make(map[Address]func(Message) error), systems: make(map[string]*entity.System)}
}

// Attach lets the nodes of this transport answer each other's asks: sys
// routes replies for other nodes through it.
func (t *memoryTransport) Attach(node string, sys *entity.System) {
	t.mu.Lock()
	t.systems[node] = sys
	t.mu.Unlock()
	runtime.SetReplyRouter(sys, t)
}

// RouteReply implements runtime.ReplyRouter.
func (t *memoryTransport) RouteReply(to entity.ReplyAddress, v any) error {
	t.mu.RLock()
	sys := t.systems[to.Node]
	t.mu.RUnlock()
	if sys == nil {
		return fmt.Errorf("%w: node %s", ErrUnreachable, to.Node)
	}
	return runtime.DeliverLocalReply(sys, to, v)
}

// Send implements Transport.
func (t *memoryTransport) Send(to Address, msg Message) error {
	t.mu.RLock()
	h := t.handlers[to]
	t.mu.RUnlock()
	if h == nil {
		return fmt.Errorf("%w: %s", ErrUnreachable, to)
	}
	return h(msg)
}

// Listen implements Transport.
func (t *memoryTransport) Listen(addr Address, handle func(Message) error) (func(), error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, taken := t.handlers[addr]; taken {
		return nil, fmt.Errorf("sharding: %s already has a listener", addr)
	}
	t.handlers[addr] = handle
	return func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		delete(t.handlers, addr)
	}, nil
}
