package remote

import (
	"fmt"

	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/sharding"
	"github.com/shoal-dev/shoal/sharding/wire"
)

// toWire turns a protocol message for target into its wire type, encoding
// the user messages it carries with reg.
func toWire(reg *codec.Registry, to wire.Target, msg sharding.Message) (any, error) {
	switch m := msg.(type) {
	case sharding.Register:
		return wire.Register{To: to, Region: m.Region}, nil
	case sharding.RegisterProxy:
		return wire.RegisterProxy{To: to, Region: m.Region}, nil
	case sharding.RegisterAck:
		return wire.RegisterAck{To: to, Coordinator: m.Coordinator, Epoch: m.Epoch}, nil
	case sharding.GetShardHome:
		return wire.GetShardHome{To: to, Shard: m.Shard, Region: m.Region}, nil
	case sharding.ShardHome:
		return wire.ShardHome{To: to, Shard: m.Shard, Region: m.Region, Epoch: m.Epoch}, nil
	case sharding.ShardHomes:
		return wire.ShardHomes{To: to, Homes: m.Homes, Epoch: m.Epoch}, nil
	case sharding.HostShard:
		buf, err := entries(reg, m.Buffered)
		return wire.HostShard{To: to, Shard: m.Shard, Epoch: m.Epoch, Buffered: buf}, err
	case sharding.ShardStarted:
		return wire.ShardStarted{To: to, Shard: m.Shard, Region: m.Region}, nil
	case sharding.BeginHandOff:
		return wire.BeginHandOff{To: to, Shard: m.Shard, Epoch: m.Epoch}, nil
	case sharding.BeginHandOffAck:
		return wire.BeginHandOffAck{To: to, Shard: m.Shard, Region: m.Region}, nil
	case sharding.HandOff:
		return wire.HandOff{To: to, Shard: m.Shard, Epoch: m.Epoch}, nil
	case sharding.ShardStopped:
		buf, err := entries(reg, m.Buffered)
		return wire.ShardStopped{To: to, Shard: m.Shard, Region: m.Region, Buffered: buf}, err
	case sharding.GracefulShutdownReq:
		return wire.GracefulShutdownReq{To: to, Region: m.Region}, nil
	case sharding.LeaveAck:
		return wire.LeaveAck{To: to, Epoch: m.Epoch}, nil
	case sharding.StopShards:
		return wire.StopShards{To: to, Shards: m.Shards}, nil
	case sharding.RegionStopped:
		return wire.RegionStopped{To: to, Region: m.Region}, nil
	case sharding.GetRegionStats:
		return wire.GetRegionStats{To: to, ReplyTo: m.ReplyTo}, nil
	case sharding.Deliver:
		e, err := entry(reg, m)
		return wire.Deliver{To: to, Entry: e}, err
	}
	return nil, fmt.Errorf("%w: %T", ErrNotProtocol, msg)
}

// fromWire turns a wire message back into the protocol message for its
// target, decoding the user messages it carries with reg. A user message
// that does not decode fails the whole message with a *DecodeError: a
// Deliver is dropped; of a hand-over (HostShard, ShardStopped) the entries
// that decode are kept and the error reports the others.
func fromWire(reg *codec.Registry, msg any) (wire.Target, sharding.Message, error) {
	a, ok := msg.(wire.Addressed)
	if !ok {
		return wire.Target{}, nil, fmt.Errorf("%w: %T", ErrNotProtocol, msg)
	}
	to := a.Target()
	switch m := msg.(type) {
	case wire.Register:
		return to, sharding.Register{Region: m.Region}, nil
	case wire.RegisterProxy:
		return to, sharding.RegisterProxy{Region: m.Region}, nil
	case wire.RegisterAck:
		return to, sharding.RegisterAck{Coordinator: m.Coordinator, Epoch: m.Epoch}, nil
	case wire.GetShardHome:
		return to, sharding.GetShardHome{Shard: m.Shard, Region: m.Region}, nil
	case wire.ShardHome:
		return to, sharding.ShardHome{Shard: m.Shard, Region: m.Region, Epoch: m.Epoch}, nil
	case wire.ShardHomes:
		return to, sharding.ShardHomes{Homes: m.Homes, Epoch: m.Epoch}, nil
	case wire.HostShard:
		buf, err := delivers(reg, m.Buffered)
		return to, sharding.HostShard{Shard: m.Shard, Epoch: m.Epoch, Buffered: buf}, err
	case wire.ShardStarted:
		return to, sharding.ShardStarted{Shard: m.Shard, Region: m.Region}, nil
	case wire.BeginHandOff:
		return to, sharding.BeginHandOff{Shard: m.Shard, Epoch: m.Epoch}, nil
	case wire.BeginHandOffAck:
		return to, sharding.BeginHandOffAck{Shard: m.Shard, Region: m.Region}, nil
	case wire.HandOff:
		return to, sharding.HandOff{Shard: m.Shard, Epoch: m.Epoch}, nil
	case wire.ShardStopped:
		buf, err := delivers(reg, m.Buffered)
		return to, sharding.ShardStopped{Shard: m.Shard, Region: m.Region, Buffered: buf}, err
	case wire.GracefulShutdownReq:
		return to, sharding.GracefulShutdownReq{Region: m.Region}, nil
	case wire.LeaveAck:
		return to, sharding.LeaveAck{Epoch: m.Epoch}, nil
	case wire.StopShards:
		return to, sharding.StopShards{Shards: m.Shards}, nil
	case wire.RegionStopped:
		return to, sharding.RegionStopped{Region: m.Region}, nil
	case wire.GetRegionStats:
		return to, sharding.GetRegionStats{ReplyTo: m.ReplyTo}, nil
	case wire.Deliver:
		d, err := deliver(reg, m.Entry)
		if err != nil {
			return to, nil, err
		}
		return to, d, nil
	}
	return to, nil, fmt.Errorf("%w: %T", ErrNotProtocol, msg)
}

// entry encodes one user message.
func entry(reg *codec.Registry, d sharding.Deliver) (wire.Entry, error) {
	e := wire.Entry{Shard: d.Shard, EntityID: d.EntityID, Start: d.Start}
	if d.Start {
		return e, nil
	}
	var err error
	if e.Manifest, e.Payload, err = reg.Encode(d.Msg); err != nil {
		return e, fmt.Errorf("remote: message for entity %q: %w", d.EntityID, err)
	}
	return e, nil
}

func entries(reg *codec.Registry, ds []sharding.Deliver) ([]wire.Entry, error) {
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
func deliver(reg *codec.Registry, e wire.Entry) (sharding.Deliver, error) {
	d := sharding.Deliver{Shard: e.Shard, EntityID: e.EntityID, Start: e.Start}
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

// delivers decodes a hand-over, keeping what decodes; the error joins the
// DecodeErrors of the rest.
func delivers(reg *codec.Registry, es []wire.Entry) ([]sharding.Deliver, error) {
	if len(es) == 0 {
		return nil, nil
	}
	out := make([]sharding.Deliver, 0, len(es))
	var first error
	dropped := 0
	for _, e := range es {
		d, err := deliver(reg, e)
		if err != nil {
			if first == nil {
				first = err
			}
			dropped++
			continue
		}
		out = append(out, d)
	}
	if first != nil {
		return out, fmt.Errorf("remote: %d of %d handed-over messages dropped, the first: %w", dropped, len(es), first)
	}
	return out, nil
}
