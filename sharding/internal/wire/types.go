package wire

import "github.com/shoal-dev/shoal/sharding/internal/protocol"

// TypeID is a message's number on the wire: the first field of every
// envelope. The table is append-only (see docs/DESIGN.md, "Wire"): an id
// is never reused nor renumbered, a new message takes the next number,
// and TestTypeIDsPinned fails when a number moves.
type TypeID uint64

// The type ids. Zero is no message.
const (
	IDRegister            TypeID = 1
	IDRegisterProxy       TypeID = 2
	IDRegisterAck         TypeID = 3
	IDGetShardHome        TypeID = 4
	IDShardHome           TypeID = 5
	IDShardHomes          TypeID = 6
	IDHostShard           TypeID = 7
	IDShardStarted        TypeID = 8
	IDBeginHandOff        TypeID = 9
	IDBeginHandOffAck     TypeID = 10
	IDHandOff             TypeID = 11
	IDShardStopped        TypeID = 12
	IDFence               TypeID = 13
	IDHandOver            TypeID = 14
	IDGracefulShutdownReq TypeID = 15
	IDLeaveAck            TypeID = 16
	IDStopShards          TypeID = 17
	IDRebalanceShards     TypeID = 18
	IDLeaveRequest        TypeID = 19
	IDRegionStopped       TypeID = 20
	IDMembersDown         TypeID = 21
	IDGetRegionStats      TypeID = 22
	IDDeliver             TypeID = 23
	IDReply               TypeID = 24
	IDAskFailed           TypeID = 25
	IDFlush               TypeID = 26
	IDFlushAck            TypeID = 27
)

// kind is one row of the table: a message type's id and name, and how
// its body is written and read.
type kind struct {
	id   TypeID
	name string
	zero any
	// protocol: a protocol message, which travels with a Target; Reply and
	// AskFailed do not.
	protocol bool
	read     func(r *reader) any
}

// kinds is the table, by id. The encoders are in appendMessage's switch.
var kinds = [...]kind{
	IDRegister:            {IDRegister, "Register", protocol.Register{}, true, readRegister},
	IDRegisterProxy:       {IDRegisterProxy, "RegisterProxy", protocol.RegisterProxy{}, true, readRegisterProxy},
	IDRegisterAck:         {IDRegisterAck, "RegisterAck", protocol.RegisterAck{}, true, readRegisterAck},
	IDGetShardHome:        {IDGetShardHome, "GetShardHome", protocol.GetShardHome{}, true, readGetShardHome},
	IDShardHome:           {IDShardHome, "ShardHome", protocol.ShardHome{}, true, readShardHome},
	IDShardHomes:          {IDShardHomes, "ShardHomes", protocol.ShardHomes{}, true, readShardHomes},
	IDHostShard:           {IDHostShard, "HostShard", protocol.HostShard{}, true, readHostShard},
	IDShardStarted:        {IDShardStarted, "ShardStarted", protocol.ShardStarted{}, true, readShardStarted},
	IDBeginHandOff:        {IDBeginHandOff, "BeginHandOff", protocol.BeginHandOff{}, true, readBeginHandOff},
	IDBeginHandOffAck:     {IDBeginHandOffAck, "BeginHandOffAck", protocol.BeginHandOffAck{}, true, readBeginHandOffAck},
	IDHandOff:             {IDHandOff, "HandOff", protocol.HandOff{}, true, readHandOff},
	IDShardStopped:        {IDShardStopped, "ShardStopped", protocol.ShardStopped{}, true, readShardStopped},
	IDFence:               {IDFence, "Fence", protocol.Fence{}, true, readFence},
	IDHandOver:            {IDHandOver, "HandOver", protocol.HandOver{}, true, readHandOver},
	IDGracefulShutdownReq: {IDGracefulShutdownReq, "GracefulShutdownReq", protocol.GracefulShutdownReq{}, true, readGracefulShutdownReq},
	IDLeaveAck:            {IDLeaveAck, "LeaveAck", protocol.LeaveAck{}, true, readLeaveAck},
	IDStopShards:          {IDStopShards, "StopShards", protocol.StopShards{}, true, readStopShards},
	IDRebalanceShards:     {IDRebalanceShards, "RebalanceShards", protocol.RebalanceShards{}, true, readRebalanceShards},
	IDLeaveRequest:        {IDLeaveRequest, "LeaveRequest", protocol.LeaveRequest{}, true, readLeaveRequest},
	IDRegionStopped:       {IDRegionStopped, "RegionStopped", protocol.RegionStopped{}, true, readRegionStopped},
	IDMembersDown:         {IDMembersDown, "MembersDown", protocol.MembersDown{}, true, readMembersDown},
	IDGetRegionStats:      {IDGetRegionStats, "GetRegionStats", protocol.GetRegionStats{}, true, readGetRegionStats},
	IDDeliver:             {IDDeliver, "Deliver", protocol.Deliver{}, true, readDeliverMessage},
	IDReply:               {IDReply, "Reply", Reply{}, false, readReply},
	IDAskFailed:           {IDAskFailed, "AskFailed", AskFailed{}, false, readAskFailed},
	IDFlush:               {IDFlush, "Flush", protocol.Flush{}, true, readFlush},
	IDFlushAck:            {IDFlushAck, "FlushAck", protocol.FlushAck{}, true, readFlushAck},
}

func kindOf(id TypeID) *kind {
	if id == 0 || id >= TypeID(len(kinds)) {
		return nil
	}
	return &kinds[id]
}

// Type is one row of the table, as Types lists it.
type Type struct {
	ID   TypeID
	Name string
	// Zero is a zero value of the message's Go type.
	Zero any
}

// Types lists every message type of the table, by id. Tests use it to
// cover every message.
func Types() []Type {
	out := make([]Type, 0, len(kinds)-1)
	for _, k := range kinds[1:] {
		out = append(out, Type{k.id, k.name, k.zero})
	}
	return out
}

// Messages returns a zero value of every protocol message type that
// crosses nodes, by type id.
func Messages() []protocol.Message {
	var out []protocol.Message
	for _, k := range kinds[1:] {
		if k.protocol {
			out = append(out, k.zero.(protocol.Message))
		}
	}
	return out
}
