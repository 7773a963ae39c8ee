package sharding

import (
	"github.com/shoal-dev/shoal/internal/runtime"
	"github.com/shoal-dev/shoal/sharding/internal/protocol"
)

// Message is a message between regions and coordinators, the types of
// package sharding/internal/protocol; the node's dispatch over its
// cluster.Transport carries them.
type Message = protocol.Message

// rebalanceTick starts a rebalance round; the coordinator's own timer sends it.
type rebalanceTick struct{ runtime.OwnTick }

func (rebalanceTick) ProtocolMessage() {}
