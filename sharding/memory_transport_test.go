package sharding

import (
	"fmt"
	"sync"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/internal/runtime"
)

// memoryTransport is a transport between the nodes of one process for
// the tests that watch, refuse or count what regions and coordinators
// send (through the seam Config.transport). It hands messages over as
// values, without encoding them, and answers asks across its nodes.
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
func (t *memoryTransport) Attach(sys *entity.System) {
	node := sys.NodeID()
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

// Send implements transport.
func (t *memoryTransport) Send(to Address, msg Message) error {
	t.mu.RLock()
	h := t.handlers[to]
	t.mu.RUnlock()
	if h == nil {
		return fmt.Errorf("%w: %s", ErrUnreachable, to)
	}
	return h(msg)
}

// Listen implements transport.
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
