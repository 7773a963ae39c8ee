package remote

import (
	"fmt"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/sharding"
	"github.com/shoal-dev/shoal/sharding/protocol"
	"github.com/shoal-dev/shoal/sharding/wire"
)

// toWire turns a protocol message for target into its wire type, encoding
// the user messages it carries with reg.
func toWire(reg *codec.Registry, to wire.Target, msg sharding.Message) (any, error) {
	switch m := msg.(type) {
	case protocol.Register:
		return wire.Register{To: to, Region: m.Region}, nil
	case protocol.RegisterProxy:
		return wire.RegisterProxy{To: to, Region: m.Region}, nil
	case protocol.RegisterAck:
		return wire.RegisterAck{To: to, Coordinator: m.Coordinator, Epoch: m.Epoch}, nil
	case protocol.GetShardHome:
		return wire.GetShardHome{To: to, Shard: m.Shard, Region: m.Region, HandOver: m.HandOver}, nil
	case protocol.ShardHome:
		return wire.ShardHome{To: to, Shard: m.Shard, Region: m.Region, Epoch: m.Epoch}, nil
	case protocol.ShardHomes:
		return wire.ShardHomes{To: to, Homes: m.Homes, Epoch: m.Epoch}, nil
	case protocol.HostShard:
		return wire.HostShard{To: to, Shard: m.Shard, From: m.From, Epoch: m.Epoch}, nil
	case protocol.ShardStarted:
		return wire.ShardStarted{To: to, Shard: m.Shard, Region: m.Region}, nil
	case protocol.BeginHandOff:
		return wire.BeginHandOff{To: to, Shard: m.Shard, Epoch: m.Epoch}, nil
	case protocol.BeginHandOffAck:
		return wire.BeginHandOffAck{To: to, Shard: m.Shard, Region: m.Region, FencedAt: m.FencedAt}, nil
	case protocol.Fence:
		return wire.Fence{To: to, Shard: m.Shard, From: m.From}, nil
	case protocol.HandOff:
		return wire.HandOff{To: to, Shard: m.Shard, Epoch: m.Epoch, Fences: m.Fences}, nil
	case protocol.ShardStopped:
		return wire.ShardStopped{To: to, Shard: m.Shard, Region: m.Region, Held: m.Held}, nil
	case protocol.HandOver:
		msgs, err := entries(reg, m.Msgs)
		return wire.HandOver{To: to, Shard: m.Shard, From: m.From, Msgs: msgs}, err
	case protocol.GracefulShutdownReq:
		return wire.GracefulShutdownReq{To: to, Region: m.Region}, nil
	case protocol.LeaveAck:
		return wire.LeaveAck{To: to, Epoch: m.Epoch}, nil
	case protocol.StopShards:
		return wire.StopShards{To: to, Shards: m.Shards}, nil
	case protocol.RebalanceShards:
		return wire.RebalanceShards{To: to, Shards: m.Shards}, nil
	case protocol.LeaveRequest:
		return wire.LeaveRequest{To: to}, nil
	case protocol.RegionStopped:
		return wire.RegionStopped{To: to, Region: m.Region}, nil
	case protocol.GetRegionStats:
		return wire.GetRegionStats{To: to, ReplyTo: m.ReplyTo}, nil
	case protocol.Deliver:
		e, err := entry(reg, m)
		return wire.Deliver{To: to, Entry: e}, err
	}
	return nil, fmt.Errorf("%w: %T", ErrNotProtocol, msg)
}

// fromWire turns a wire message back into the protocol message for its
// target, decoding the user messages it carries with reg. A user message
// that does not decode is reported with a *DecodeError and in failed: a
// Deliver is then dropped (m is nil); of a HandOver the entries that
// decode are kept.
func fromWire(reg *codec.Registry, msg any) (to wire.Target, m sharding.Message, failed []wire.Entry, err error) {
	a, ok := msg.(wire.Addressed)
	if !ok {
		return wire.Target{}, nil, nil, fmt.Errorf("%w: %T", ErrNotProtocol, msg)
	}
	to = a.Target()
	switch w := msg.(type) {
	case wire.HandOver:
		msgs, failed, err := delivers(reg, w.Msgs)
		return to, protocol.HandOver{Shard: w.Shard, From: w.From, Msgs: msgs}, failed, err
	case wire.Deliver:
		d, err := deliver(reg, w.Entry)
		if err != nil {
			return to, nil, []wire.Entry{w.Entry}, err
		}
		return to, d, nil, nil
	}
	m, err = fromWireControl(msg)
	return to, m, nil, err
}

// fromWireControl converts the messages that carry no user message.
func fromWireControl(msg any) (sharding.Message, error) {
	switch m := msg.(type) {
	case wire.Register:
		return protocol.Register{Region: m.Region}, nil
	case wire.RegisterProxy:
		return protocol.RegisterProxy{Region: m.Region}, nil
	case wire.RegisterAck:
		return protocol.RegisterAck{Coordinator: m.Coordinator, Epoch: m.Epoch}, nil
	case wire.GetShardHome:
		return protocol.GetShardHome{Shard: m.Shard, Region: m.Region, HandOver: m.HandOver}, nil
	case wire.ShardHome:
		return protocol.ShardHome{Shard: m.Shard, Region: m.Region, Epoch: m.Epoch}, nil
	case wire.ShardHomes:
		return protocol.ShardHomes{Homes: m.Homes, Epoch: m.Epoch}, nil
	case wire.HostShard:
		return protocol.HostShard{Shard: m.Shard, From: m.From, Epoch: m.Epoch}, nil
	case wire.ShardStopped:
		return protocol.ShardStopped{Shard: m.Shard, Region: m.Region, Held: m.Held}, nil
	case wire.Fence:
		return protocol.Fence{Shard: m.Shard, From: m.From}, nil
	case wire.ShardStarted:
		return protocol.ShardStarted{Shard: m.Shard, Region: m.Region}, nil
	case wire.BeginHandOff:
		return protocol.BeginHandOff{Shard: m.Shard, Epoch: m.Epoch}, nil
	case wire.BeginHandOffAck:
		return protocol.BeginHandOffAck{Shard: m.Shard, Region: m.Region, FencedAt: m.FencedAt}, nil
	case wire.HandOff:
		return protocol.HandOff{Shard: m.Shard, Epoch: m.Epoch, Fences: m.Fences}, nil
	case wire.GracefulShutdownReq:
		return protocol.GracefulShutdownReq{Region: m.Region}, nil
	case wire.LeaveAck:
		return protocol.LeaveAck{Epoch: m.Epoch}, nil
	case wire.StopShards:
		return protocol.StopShards{Shards: m.Shards}, nil
	case wire.RebalanceShards:
		return protocol.RebalanceShards{Shards: m.Shards}, nil
	case wire.LeaveRequest:
		return protocol.LeaveRequest{}, nil
	case wire.RegionStopped:
		return protocol.RegionStopped{Region: m.Region}, nil
	case wire.GetRegionStats:
		return protocol.GetRegionStats{ReplyTo: m.ReplyTo}, nil
	}
	return nil, fmt.Errorf("%w: %T", ErrNotProtocol, msg)
}

// entry encodes one user message.
func entry(reg *codec.Registry, d protocol.Deliver) (wire.Entry, error) {
	e := wire.Entry{Shard: d.Shard, EntityID: d.EntityID, Start: d.Start}
	if d.Start {
		return e, nil
	}
	var err error
	if e.Manifest, e.Payload, err = reg.Encode(d.Msg); err != nil {
		return e, fmt.Errorf("remote: message for entity %q: %w", d.EntityID, err)
	}
	e.ReplyTo = entity.ReplyAddresses(d.Msg)
	return e, nil
}

func entries(reg *codec.Registry, ds []protocol.Deliver) ([]wire.Entry, error) {
	if len(ds) == 0 {
		return nil, nil
	}
	out := make([]wire.Entry, len(ds))
	for i, d := range ds {
		var err error
		if out[i], err = entry(reg, d); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// deliver decodes one user message.
func deliver(reg *codec.Registry, e wire.Entry) (protocol.Deliver, error) {
	d := protocol.Deliver{Shard: e.Shard, EntityID: e.EntityID, Start: e.Start}
	if e.Start {
		return d, nil
	}
	v, err := reg.Decode(e.Manifest, e.Payload)
	if err != nil {
		return d, &DecodeError{Manifest: e.Manifest, EntityID: e.EntityID, Err: err}
	}
	d.Msg = v
	return d, nil
}

// delivers decodes a hand-over, keeping what decodes; failed are the
// others, and the error reports the first of them.
func delivers(reg *codec.Registry, es []wire.Entry) (out []protocol.Deliver, failed []wire.Entry, err error) {
	if len(es) == 0 {
		return nil, nil, nil
	}
	out = make([]protocol.Deliver, 0, len(es))
	var first error
	for _, e := range es {
		d, err := deliver(reg, e)
		if err != nil {
			if first == nil {
				first = err
			}
			failed = append(failed, e)
			continue
		}
		out = append(out, d)
	}
	if first != nil {
		return out, failed, fmt.Errorf("remote: %d of %d handed-over messages dropped, the first: %w", len(failed), len(es), first)
	}
	return out, nil, nil
}
