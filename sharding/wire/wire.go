// Package wire holds the sharding protocol as it crosses the network: one
// registered, serializable type per protocol message, and the envelope of
// a user message (entity type, shard, entity id, and the message encoded
// by the codec as manifest and payload; a reply address travels inside it,
// as the ReplyTo of the user's command).
//
// Package sharding/protocol holds the messages as Go values for the local
// path; package sharding/remote converts them to and from these types where a
// message leaves or enters a node. RegisterTypes adds them to the codec a
// cluster.Transport encodes with, under manifests prefixed "shoal.sharding.",
// which stay stable across renames of the Go types.
//
// Every message but Reply names its receiver on the node with a Target: a
// region, or the coordinator, of one entity type.
package wire

import (
	"errors"
	"fmt"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/entity/codec"
)

// Target names the receiver of a message on its node: the region of an
// entity type, or that type's coordinator.
type Target struct {
	Type        string `json:"type"`
	Coordinator bool   `json:"coord,omitempty"`
}

// String renders the target as type or type/coordinator.
func (t Target) String() string {
	if t.Coordinator {
		return t.Type + "/coordinator"
	}
	return t.Type
}

// Addressed is every message that names a Target.
type Addressed interface{ Target() Target }

// Entry is one user message for one entity: the envelope the protocol
// carries in Deliver, and in the buffers that HostShard and ShardStopped
// hand over. With Start it only starts the entity and carries no message.
// ReplyTo lists the reply addresses inside the message (its ReplyTo
// fields), so that a node that cannot handle the message, not even decode
// it, can fail those asks at once with AskFailed.
type Entry struct {
	Shard    string                `json:"shard"`
	EntityID string                `json:"id"`
	Start    bool                  `json:"start,omitempty"`
	Manifest string                `json:"m,omitempty"`
	Payload  []byte                `json:"p,omitempty"`
	ReplyTo  []entity.ReplyAddress `json:"r,omitempty"`
}

// Why a node refused a user message, in AskFailed.
const (
	// RefusedUndecodable: its manifest is unknown there, or its payload corrupt.
	RefusedUndecodable = "undecodable"
	// RefusedUnknownTarget: nobody there listens for its entity type.
	RefusedUnknownTarget = "unknown-target"
	// RefusedByListener: the region there refused it (its mailbox full).
	RefusedByListener = "refused"
)

// The protocol messages, field for field those of package
// sharding/protocol, with the user messages they carry as Entries.
type (
	// Register is protocol.Register.
	Register struct {
		To     Target `json:"to"`
		Region string `json:"region"`
	}
	// RegisterProxy is protocol.RegisterProxy.
	RegisterProxy struct {
		To     Target `json:"to"`
		Region string `json:"region"`
	}
	// RegisterAck is protocol.RegisterAck.
	RegisterAck struct {
		To          Target `json:"to"`
		Coordinator string `json:"coordinator"`
		Epoch       uint64 `json:"epoch"`
	}
	// GetShardHome is protocol.GetShardHome.
	GetShardHome struct {
		To       Target `json:"to"`
		Shard    string `json:"shard"`
		Region   string `json:"region"`
		HandOver bool   `json:"handOver,omitempty"`
	}
	// ShardHome is protocol.ShardHome.
	ShardHome struct {
		To     Target `json:"to"`
		Shard  string `json:"shard"`
		Region string `json:"region"`
		Epoch  uint64 `json:"epoch"`
	}
	// ShardHomes is protocol.ShardHomes.
	ShardHomes struct {
		To    Target              `json:"to"`
		Homes map[string][]string `json:"homes"`
		Epoch uint64              `json:"epoch"`
	}
	// HostShard is protocol.HostShard.
	HostShard struct {
		To    Target `json:"to"`
		Shard string `json:"shard"`
		From  string `json:"from,omitempty"`
		Epoch uint64 `json:"epoch"`
	}
	// ShardStarted is protocol.ShardStarted.
	ShardStarted struct {
		To     Target `json:"to"`
		Shard  string `json:"shard"`
		Region string `json:"region"`
	}
	// BeginHandOff is protocol.BeginHandOff.
	BeginHandOff struct {
		To    Target `json:"to"`
		Shard string `json:"shard"`
		Epoch uint64 `json:"epoch"`
	}
	// BeginHandOffAck is protocol.BeginHandOffAck.
	BeginHandOffAck struct {
		To       Target `json:"to"`
		Shard    string `json:"shard"`
		Region   string `json:"region"`
		FencedAt string `json:"fencedAt,omitempty"`
	}
	// Fence is protocol.Fence.
	Fence struct {
		To    Target `json:"to"`
		Shard string `json:"shard"`
		From  string `json:"from"`
	}
	// HandOff is protocol.HandOff.
	HandOff struct {
		To     Target   `json:"to"`
		Shard  string   `json:"shard"`
		Epoch  uint64   `json:"epoch"`
		Fences []string `json:"fences,omitempty"`
	}
	// ShardStopped is protocol.ShardStopped.
	ShardStopped struct {
		To     Target `json:"to"`
		Shard  string `json:"shard"`
		Region string `json:"region"`
		Held   bool   `json:"held,omitempty"`
	}
	// HandOver is protocol.HandOver, its messages as Entries.
	HandOver struct {
		To    Target  `json:"to"`
		Shard string  `json:"shard"`
		From  string  `json:"from"`
		Msgs  []Entry `json:"msgs,omitempty"`
	}
	// GracefulShutdownReq is protocol.GracefulShutdownReq.
	GracefulShutdownReq struct {
		To     Target `json:"to"`
		Region string `json:"region"`
	}
	// LeaveAck is protocol.LeaveAck.
	LeaveAck struct {
		To    Target `json:"to"`
		Epoch uint64 `json:"epoch"`
	}
	// StopShards is protocol.StopShards.
	StopShards struct {
		To     Target   `json:"to"`
		Shards []string `json:"shards"`
	}
	// RebalanceShards is protocol.RebalanceShards.
	RebalanceShards struct {
		To     Target   `json:"to"`
		Shards []string `json:"shards"`
	}
	// LeaveRequest is protocol.LeaveRequest; its Target has an empty Type.
	LeaveRequest struct {
		To Target `json:"to"`
	}
	// RegionStopped is protocol.RegionStopped.
	RegionStopped struct {
		To     Target `json:"to"`
		Region string `json:"region"`
	}
	// GetRegionStats is protocol.GetRegionStats.
	GetRegionStats struct {
		To      Target                         `json:"to"`
		ReplyTo entity.ReplyTo[map[string]int] `json:"replyTo"`
	}
	// Deliver carries one user message to the region of its entity type.
	Deliver struct {
		To    Target `json:"to"`
		Entry Entry  `json:"entry"`
	}
	// Reply carries the reply to an ask back to the asking incarnation,
	// encoded; the asker decodes it into its own type
	// (entity.System.DeliverReply).
	Reply struct {
		To       entity.ReplyAddress `json:"to"`
		Manifest string              `json:"m"`
		Payload  []byte              `json:"p"`
	}
	// AskFailed tells the asking incarnation that the command carrying
	// the reply address To was refused by the node it was sent to, and
	// why (one of the Refused constants, and the refusing node's error
	// text), so that the ask fails at once instead of at its deadline.
	AskFailed struct {
		To     entity.ReplyAddress `json:"to"`
		Kind   string              `json:"kind"`
		Reason string              `json:"reason"`
	}
)

// Target implements Addressed for every protocol message.
func (m Register) Target() Target            { return m.To }
func (m RegisterProxy) Target() Target       { return m.To }
func (m RegisterAck) Target() Target         { return m.To }
func (m GetShardHome) Target() Target        { return m.To }
func (m ShardHome) Target() Target           { return m.To }
func (m ShardHomes) Target() Target          { return m.To }
func (m HostShard) Target() Target           { return m.To }
func (m ShardStarted) Target() Target        { return m.To }
func (m BeginHandOff) Target() Target        { return m.To }
func (m BeginHandOffAck) Target() Target     { return m.To }
func (m HandOff) Target() Target             { return m.To }
func (m ShardStopped) Target() Target        { return m.To }
func (m Fence) Target() Target               { return m.To }
func (m HandOver) Target() Target            { return m.To }
func (m GracefulShutdownReq) Target() Target { return m.To }
func (m LeaveAck) Target() Target            { return m.To }
func (m StopShards) Target() Target          { return m.To }
func (m RebalanceShards) Target() Target     { return m.To }
func (m LeaveRequest) Target() Target        { return m.To }
func (m RegionStopped) Target() Target       { return m.To }
func (m GetRegionStats) Target() Target      { return m.To }
func (m Deliver) Target() Target             { return m.To }

// ManifestPrefix starts the manifest of every type Register adds.
const ManifestPrefix = "shoal.sharding."

// RegisterTypes adds the wire types to reg. Registering twice is harmless; a
// manifest or type already bound otherwise is an error.
func RegisterTypes(reg *codec.Registry) error {
	return errors.Join(
		add[Register](reg, "Register"),
		add[RegisterProxy](reg, "RegisterProxy"),
		add[RegisterAck](reg, "RegisterAck"),
		add[GetShardHome](reg, "GetShardHome"),
		add[ShardHome](reg, "ShardHome"),
		add[ShardHomes](reg, "ShardHomes"),
		add[HostShard](reg, "HostShard"),
		add[ShardStarted](reg, "ShardStarted"),
		add[BeginHandOff](reg, "BeginHandOff"),
		add[BeginHandOffAck](reg, "BeginHandOffAck"),
		add[HandOff](reg, "HandOff"),
		add[ShardStopped](reg, "ShardStopped"),
		add[Fence](reg, "Fence"),
		add[HandOver](reg, "HandOver"),
		add[GracefulShutdownReq](reg, "GracefulShutdownReq"),
		add[LeaveAck](reg, "LeaveAck"),
		add[StopShards](reg, "StopShards"),
		add[RebalanceShards](reg, "RebalanceShards"),
		add[LeaveRequest](reg, "LeaveRequest"),
		add[RegionStopped](reg, "RegionStopped"),
		add[GetRegionStats](reg, "GetRegionStats"),
		add[Deliver](reg, "Deliver"),
		add[Reply](reg, "Reply"),
		add[AskFailed](reg, "AskFailed"),
	)
}

func add[T any](reg *codec.Registry, name string) error {
	if err := codec.Register[T](reg, ManifestPrefix+name); err != nil {
		return fmt.Errorf("wire: %w", err)
	}
	return nil
}
