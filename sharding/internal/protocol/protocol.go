// Package protocol holds the messages regions and coordinators of package
// sharding exchange. Package sharding/internal/wire writes each of them
// between nodes in an explicit form, field by field: a field added here
// must be appended to its message's encoding there, at the end (see
// docs/DESIGN.md, "Wire"), or wire's round-trip test fails. Users of
// sharding need none of them: only sharding's dispatch over the node's
// cluster.Transport carries them, as sharding.Message.
package protocol

import (
	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/entity"
)

// Message is every message a region or coordinator receives, named as in
// Akka's ShardCoordinator protocol. Messages the coordinator sends carry
// its fencing epoch; a region ignores a message from an epoch older than
// the newest it has seen, so a deposed coordinator cannot move shards.
type Message interface {
	// ProtocolMessage marks the message types; it does nothing.
	ProtocolMessage()
}

type (
	// Register announces a region that hosts shards. The coordinator
	// answers RegisterAck followed by ShardHomes.
	Register struct{ Region cluster.UniqueAddress }
	// RegisterProxy announces a region that only routes (its node lacks the role).
	RegisterProxy struct{ Region cluster.UniqueAddress }
	// RegisterAck confirms registration.
	RegisterAck struct {
		Coordinator cluster.UniqueAddress
		Epoch       uint64
	}
	// GetShardHome asks where a shard lives. HandOver: the asking region
	// holds mail for the shard from its hand-off (see HandOver).
	GetShardHome struct {
		Shard    string
		Region   cluster.UniqueAddress
		HandOver bool
	}
	// ShardHome tells where a shard lives. The coordinator sends it to
	// every region on each allocation; a zero Region means the shard was
	// stopped and has no home until it is asked for again. From, on an
	// allocation, is the HostShard's: the region From hands over to the
	// new home even when it holds nothing (any more) for the shard, so
	// that the home's wait ends.
	ShardHome struct {
		Shard        string
		Region, From cluster.UniqueAddress
		Epoch        uint64
	}
	// ShardHomes tells every known shard home: region → shards.
	ShardHomes struct {
		Homes map[cluster.UniqueAddress][]string
		Epoch uint64
		// Coordinator is the sender's node: a region that cannot register
		// with the coordinator its view shows registers with it as well
		// (see docs/DESIGN.md, "Allocation and the coordinator").
		Coordinator cluster.UniqueAddress
	}
	// HostShard tells a region to start a shard allocated to it. From,
	// when set, is the shard's previous home, which holds mail for it: the
	// new home starts the shard once From's HandOver arrived, or From is
	// gone from the membership, so that the mail comes first. User messages
	// never ride in the coordinator's messages (docs/DESIGN.md,
	// "Hand-over, not carry").
	HostShard struct {
		Shard string
		From  cluster.UniqueAddress
		Epoch uint64
	}
	// ShardStarted confirms HostShard to the coordinator, and a HandOver
	// to its sender: Seq is then the HandOver's, which its sender re-sends
	// until this comes.
	ShardStarted struct {
		Shard  string
		Region cluster.UniqueAddress
		Seq    uint64
	}
	// BeginHandOff tells every region to stop routing to a shard and
	// buffer its messages. Epoch and Seq name the hand-off: Seq numbers
	// the hand-offs of the coordinator of Epoch. The acknowledgement, the
	// fences, the HandOff and the ShardStopped of one hand-off carry the
	// same pair, and count for no other hand-off.
	BeginHandOff struct {
		Shard      string
		Epoch, Seq uint64
	}
	// BeginHandOffAck confirms BeginHandOff (Epoch, Seq: the hand-off's).
	// FencedAt is the region the acknowledging region sent its Fence to
	// (zero for none): the home it forwarded the shard's messages to.
	BeginHandOffAck struct {
		Shard            string
		Region, FencedAt cluster.UniqueAddress
		Epoch, Seq       uint64
	}
	// Fence follows, on the data link, the last message a region forwarded
	// for a shard before it began buffering them for the hand-off Epoch,
	// Seq: once the home holds it, nothing that region forwarded is still
	// on its way. The region sends it again each tick while the hand-off
	// runs, since a broken link may lose it.
	Fence struct {
		Shard      string
		From       cluster.UniqueAddress
		Epoch, Seq uint64
	}
	// Flush follows, on the data link, every message a leaving region
	// forwarded to the receiving region: its leave completes only once
	// the receiver answers FlushAck with the same Seq (or is gone), since
	// per-link order means everything forwarded before it is in by then.
	// Seq, increasing per sender, tells the Flush sent after the
	// sender's last forward there from earlier ones. Sent again each tick
	// until answered, since a broken link may lose it.
	Flush struct {
		From cluster.UniqueAddress
		Seq  uint64
	}
	// FlushAck answers a Flush: Region, the receiver, holds everything
	// the Flush's sender forwarded to it before the Flush numbered Seq.
	FlushAck struct {
		Region cluster.UniqueAddress
		Seq    uint64
	}
	// HandOff tells the owning region to stop the shard's entities, once it
	// holds a Fence of this hand-off (Epoch, Seq) from each region in
	// Fences that is not gone, so that everything forwarded to it before
	// the hand-off is in first.
	//
	// MailHeldBy is the previous home whose mail the owning region must
	// take before it stops the shard, as the coordinator stored it with the
	// allocation (the From of the region's HostShard, zero for none), and
	// MailHeldByKnown says the coordinator set it: a region whose HostShard
	// was lost waits for that node's HandOver rather than guess. A HandOff
	// of a coordinator that predates the field reads as not known.
	HandOff struct {
		Shard           string
		Epoch, Seq      uint64
		Fences          []cluster.UniqueAddress
		MailHeldBy      cluster.UniqueAddress
		MailHeldByKnown bool
	}
	// ShardStopped confirms the HandOff Epoch, Seq: every entity of the
	// shard has stopped. Held: the region holds mail for the shard (for
	// entities that were stopping, or buffered during the hand-off), which
	// it hands over to the next home when it learns of it; the coordinator
	// then allocates the shard even when told to stop it, and names the
	// region as From in its HostShard.
	ShardStopped struct {
		Shard      string
		Region     cluster.UniqueAddress
		Held       bool
		Epoch, Seq uint64
	}
	// HandOver is the mail a shard's previous home held for it, in arrival
	// order, sent straight to the new home over the link its forwards take
	// (Akka drops these messages, akka/akka#30957). Its sender re-sends it
	// until acknowledged (ShardStarted with Seq); Seq, increasing per
	// sender, lets the receiver take each one once. Relayed: not From's
	// mail but news that it reached a later home, sent to the home that
	// home waits for (an empty HandOver from From to it, unacknowledged).
	HandOver struct {
		Shard   string
		From    cluster.UniqueAddress
		Seq     uint64
		Relayed bool
		Msgs    []Deliver
	}
	// GracefulShutdownReq asks the coordinator to hand off all of a
	// region's shards before the region leaves. The coordinator answers
	// LeaveAck once it holds no shard for the region.
	GracefulShutdownReq struct{ Region cluster.UniqueAddress }
	// LeaveAck tells a leaving region that the coordinator allocates
	// nothing to it any more: once it hosts no shard itself, it may stop.
	// Without it a region that held nothing when it began to leave could
	// stop while an allocation to it was on its way.
	LeaveAck struct{ Epoch uint64 }
	// StopShards asks the coordinator to hand shards off without moving
	// them: they start again, wherever allocated, on their next message.
	StopShards struct{ Shards []string }
	// RebalanceShards asks the coordinator to move shards: each is handed
	// off and allocated again by the strategy, wherever it places it (an
	// operator's rebalance).
	RebalanceShards struct{ Shards []string }
	// LeaveRequest asks a node to leave the cluster gracefully. It goes to
	// the node's address with an empty Type, where Sharding listens when
	// sharding.Config.OnLeaveRequest is set.
	LeaveRequest struct{}
	// RegionStopped tells the coordinator a region is gone.
	RegionStopped struct{ Region cluster.UniqueAddress }
	// MembersDown tells every region the nodes the coordinator holds Down:
	// their leases expired in the store (they crashed or fenced
	// themselves), or membership said so. None of them will hand over the
	// mail it held, so a region that waits for such a HandOver starts the
	// shard without it, even while its own view still shows the node only
	// unreachable. Node incarnations never come back, so it carries no
	// epoch: a deposed coordinator's word is as true.
	MembersDown struct{ Nodes []cluster.UniqueAddress }
	// GetRegionStats asks a region for its entities per hosted shard.
	GetRegionStats struct {
		ReplyTo entity.ReplyTo[map[string]int]
	}
	// Deliver carries an entity message from one region to another; with
	// Start it only starts the entity (StartEntity) and Msg is nil. Ask
	// marks the command of an ask (EntityRef.TellAsk): the home refuses
	// it at once when its entity is backing off, as the asker's own node
	// would, where another message waits for the restart.
	//
	// Trace, nil for an untraced message, is the W3C trace context of the
	// sender's span, so that the entity's handler continues the sender's
	// trace (docs/DESIGN.md, "Tracing"). A pointer, so that an untraced
	// Deliver is no larger than before it existed.
	Deliver struct {
		Shard, EntityID string
		Msg             any
		Start           bool
		Ask             bool
		Trace           *TraceContext
	}
	// TraceContext is W3C trace context: the values of the traceparent and
	// tracestate headers.
	TraceContext struct{ Parent, State string }
)

func (Register) ProtocolMessage()            {}
func (RegisterProxy) ProtocolMessage()       {}
func (RegisterAck) ProtocolMessage()         {}
func (GetShardHome) ProtocolMessage()        {}
func (ShardHome) ProtocolMessage()           {}
func (ShardHomes) ProtocolMessage()          {}
func (HostShard) ProtocolMessage()           {}
func (ShardStarted) ProtocolMessage()        {}
func (BeginHandOff) ProtocolMessage()        {}
func (BeginHandOffAck) ProtocolMessage()     {}
func (HandOff) ProtocolMessage()             {}
func (ShardStopped) ProtocolMessage()        {}
func (HandOver) ProtocolMessage()            {}
func (Fence) ProtocolMessage()               {}
func (Flush) ProtocolMessage()               {}
func (FlushAck) ProtocolMessage()            {}
func (GracefulShutdownReq) ProtocolMessage() {}
func (LeaveAck) ProtocolMessage()            {}
func (RegionStopped) ProtocolMessage()       {}
func (MembersDown) ProtocolMessage()         {}
func (StopShards) ProtocolMessage()          {}
func (RebalanceShards) ProtocolMessage()     {}
func (LeaveRequest) ProtocolMessage()        {}
func (Deliver) ProtocolMessage()             {}
func (GetRegionStats) ProtocolMessage()      {}
