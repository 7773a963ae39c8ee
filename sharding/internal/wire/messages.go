package wire

import (
	"cmp"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/shoal-dev/shoal/cluster"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/sharding/internal/protocol"
)

// Each message's body is its fields in the order written here, one after
// the other, with no names or tags: the order is the schema, pinned by
// the golden files in testdata. A field is only ever appended at the end
// of a body, and read under r.more() by the decoders of the release that
// adds it, so that a body of the previous layout still reads (see
// docs/DESIGN.md, "Wire").

// appendMessage appends m's body, length-prefixed, and returns its type id.
// With enc, a lone Deliver's user message may be unsealed: it is encoded
// with enc's codec in place (see Encoder.Pack).
func appendMessage(dst []byte, m any, enc *Encoder) ([]byte, TypeID, error) {
	var id TypeID
	var err error
	dst = appendBody(dst, func(b []byte) []byte {
		switch m := m.(type) {
		case protocol.Deliver:
			id = IDDeliver
			b, err = appendDeliver(b, &m, enc)
		case protocol.Register:
			id, b = IDRegister, appendAddress(b, m.Region)
		case protocol.RegisterProxy:
			id, b = IDRegisterProxy, appendAddress(b, m.Region)
		case protocol.RegisterAck:
			id, b = IDRegisterAck, appendAddress(b, m.Coordinator)
			b = binary.AppendUvarint(b, m.Epoch)
		case protocol.GetShardHome:
			id, b = IDGetShardHome, appendString(b, m.Shard)
			b = appendAddress(b, m.Region)
			b = appendBool(b, m.HandOver)
		case protocol.ShardHome:
			id, b = IDShardHome, appendString(b, m.Shard)
			b = appendAddress(b, m.Region)
			b = appendAddress(b, m.From)
			b = binary.AppendUvarint(b, m.Epoch)
		case protocol.ShardHomes:
			id, b = IDShardHomes, appendHomes(b, m.Homes)
			b = binary.AppendUvarint(b, m.Epoch)
			b = appendAddress(b, m.Coordinator)
		case protocol.HostShard:
			id, b = IDHostShard, appendString(b, m.Shard)
			b = appendAddress(b, m.From)
			b = binary.AppendUvarint(b, m.Epoch)
		case protocol.ShardStarted:
			id, b = IDShardStarted, appendString(b, m.Shard)
			b = appendAddress(b, m.Region)
			b = binary.AppendUvarint(b, m.Seq)
		case protocol.BeginHandOff:
			id, b = IDBeginHandOff, appendString(b, m.Shard)
			b = binary.AppendUvarint(b, m.Epoch)
			b = binary.AppendUvarint(b, m.Seq)
		case protocol.BeginHandOffAck:
			id, b = IDBeginHandOffAck, appendString(b, m.Shard)
			b = appendAddress(b, m.Region)
			b = appendAddress(b, m.FencedAt)
			b = binary.AppendUvarint(b, m.Epoch)
			b = binary.AppendUvarint(b, m.Seq)
		case protocol.HandOff:
			id, b = IDHandOff, appendString(b, m.Shard)
			b = binary.AppendUvarint(b, m.Epoch)
			b = appendAddresses(b, m.Fences)
			b = binary.AppendUvarint(b, m.Seq)
			b = appendAddress(b, m.MailHeldBy)
			b = appendBool(b, m.MailHeldByKnown)
		case protocol.ShardStopped:
			id, b = IDShardStopped, appendString(b, m.Shard)
			b = appendAddress(b, m.Region)
			b = appendBool(b, m.Held)
			b = binary.AppendUvarint(b, m.Epoch)
			b = binary.AppendUvarint(b, m.Seq)
		case protocol.Fence:
			id, b = IDFence, appendString(b, m.Shard)
			b = appendAddress(b, m.From)
			b = binary.AppendUvarint(b, m.Epoch)
			b = binary.AppendUvarint(b, m.Seq)
		case protocol.Flush:
			id, b = IDFlush, appendAddress(b, m.From)
			b = binary.AppendUvarint(b, m.Seq)
		case protocol.FlushAck:
			id, b = IDFlushAck, appendAddress(b, m.Region)
			b = binary.AppendUvarint(b, m.Seq)
		case protocol.HandOver:
			id = IDHandOver
			b, err = appendHandOver(b, m)
		case protocol.GracefulShutdownReq:
			id, b = IDGracefulShutdownReq, appendAddress(b, m.Region)
		case protocol.LeaveAck:
			id, b = IDLeaveAck, binary.AppendUvarint(b, m.Epoch)
		case protocol.StopShards:
			id, b = IDStopShards, appendStrings(b, m.Shards)
		case protocol.RebalanceShards:
			id, b = IDRebalanceShards, appendStrings(b, m.Shards)
		case protocol.LeaveRequest:
			id = IDLeaveRequest
		case protocol.RegionStopped:
			id, b = IDRegionStopped, appendAddress(b, m.Region)
		case protocol.MembersDown:
			id, b = IDMembersDown, appendAddresses(b, m.Nodes)
		case protocol.GetRegionStats:
			id, b = IDGetRegionStats, appendReplyAddress(b, m.ReplyTo.Address())
		case Reply:
			id, b = IDReply, appendReply(b, m)
		case AskFailed:
			id, b = IDAskFailed, appendReplyAddress(b, m.To)
			b = appendString(b, m.Kind)
			b = appendString(b, m.Reason)
		default:
			err = fmt.Errorf("%w: %T", ErrUnknownType, m)
		}
		return b
	})
	return dst, id, err
}

// appendReply writes a Reply's fields: the ask's address, then the reply
// as the codec encoded it (manifest, payload).
func appendReply(b []byte, r Reply) []byte {
	b = appendReplyAddress(b, r.To)
	b = appendString(b, r.Manifest)
	return appendBytes(b, r.Payload)
}

// appendDeliver writes a Deliver's fields: shard, entity id, start, ask,
// then its user message as the codec encoded it (manifest, payload) and
// the reply addresses inside it; then, appended and only when the message
// is traced, its W3C trace context (Trace: parent, state): an untraced
// Deliver has the bytes it had before they existed. A field appended after
// them must write them, empty, first. A Deliver that only starts its
// entity has an empty manifest.
func appendDeliver(b []byte, d *protocol.Deliver, enc *Encoder) ([]byte, error) {
	var e Encoded
	var unsealed any // a user message to encode with enc's codec, in place
	if d.Msg != nil {
		var ok bool
		if e, ok = d.Msg.(Encoded); !ok {
			if enc == nil {
				return b, fmt.Errorf("%w: %T in a Deliver for entity %q", ErrNotSealed, d.Msg, d.EntityID)
			}
			unsealed = d.Msg
			e.ReplyTo = enc.reply.addresses(unsealed)
		}
	}
	b = appendString(b, d.Shard)
	b = appendString(b, d.EntityID)
	b = appendBool(b, d.Start)
	b = appendBool(b, d.Ask)
	if unsealed != nil {
		// The manifest, then the payload encoded in place after its length.
		var err error
		if _, b, err = enc.reg.AppendPrefixed(b, unsealed); err != nil {
			return b, fmt.Errorf("wire: message for entity %q: %w", d.EntityID, err)
		}
	} else {
		b = appendString(b, e.Manifest)
		b = appendBytes(b, e.Payload)
	}
	b = binary.AppendUvarint(b, uint64(len(e.ReplyTo)))
	for _, a := range e.ReplyTo {
		b = appendReplyAddress(b, a)
	}
	if t := d.Trace; t != nil {
		b = appendString(b, t.Parent)
		b = appendString(b, t.State)
	}
	return b, nil
}

// appendHandOver writes shard, from, seq, relayed and the list of
// Delivers, each a length-prefixed body of its own.
func appendHandOver(b []byte, m protocol.HandOver) ([]byte, error) {
	b = appendString(b, m.Shard)
	b = appendAddress(b, m.From)
	b = binary.AppendUvarint(b, m.Seq)
	b = appendBool(b, m.Relayed)
	b = binary.AppendUvarint(b, uint64(len(m.Msgs)))
	var err error
	for _, d := range m.Msgs {
		b = appendBody(b, func(b []byte) []byte {
			var derr error
			b, derr = appendDeliver(b, &d, nil)
			if err == nil {
				err = derr
			}
			return b
		})
	}
	return b, err
}

// appendHomes writes region → shards as a count of regions, then each
// region and its shards, regions in sorted order so that the bytes of a
// message are always the same.
func appendHomes(b []byte, homes map[cluster.UniqueAddress][]string) []byte {
	regions := make([]cluster.UniqueAddress, 0, len(homes))
	for r := range homes {
		regions = append(regions, r)
	}
	slices.SortFunc(regions, func(x, y cluster.UniqueAddress) int {
		return cmp.Or(strings.Compare(x.Node, y.Node), cmp.Compare(x.Incarnation, y.Incarnation))
	})
	b = binary.AppendUvarint(b, uint64(len(regions)))
	for _, r := range regions {
		b = appendAddress(b, r)
		b = appendStrings(b, homes[r])
	}
	return b
}

func appendReplyAddress(b []byte, a entity.ReplyAddress) []byte {
	b = appendString(b, a.Node)
	b = binary.AppendUvarint(b, a.Incarnation)
	return binary.AppendUvarint(b, a.AskID)
}

// The decoders, one per type id, read a body written above.

func readRegister(r *reader) any { return protocol.Register{Region: r.address("Region")} }

func readRegisterProxy(r *reader) any { return protocol.RegisterProxy{Region: r.address("Region")} }

func readRegisterAck(r *reader) any {
	return protocol.RegisterAck{Coordinator: r.address("Coordinator"), Epoch: r.uvarint("Epoch")}
}

func readGetShardHome(r *reader) any {
	return protocol.GetShardHome{Shard: r.string("Shard"), Region: r.address("Region"), HandOver: r.bool("HandOver")}
}

func readShardHome(r *reader) any {
	return protocol.ShardHome{Shard: r.string("Shard"), Region: r.address("Region"), From: r.address("From"), Epoch: r.uvarint("Epoch")}
}

func readShardHomes(r *reader) any {
	var m protocol.ShardHomes
	if n := r.count("Homes", 3); n > 0 {
		m.Homes = make(map[cluster.UniqueAddress][]string, n)
		for range n {
			region := r.address("Homes")
			m.Homes[region] = r.strings("Homes")
		}
	}
	m.Epoch = r.uvarint("Epoch")
	if r.more() { // added after the first layout
		m.Coordinator = r.address("Coordinator")
	}
	return m
}

func readHostShard(r *reader) any {
	return protocol.HostShard{Shard: r.string("Shard"), From: r.address("From"), Epoch: r.uvarint("Epoch")}
}

func readShardStarted(r *reader) any {
	return protocol.ShardStarted{Shard: r.string("Shard"), Region: r.address("Region"), Seq: r.uvarint("Seq")}
}

// The hand-off's number (Seq), and the hand-off named by the messages
// that follow a BeginHandOff (Epoch, Seq), were added after the first
// layout: read when present.

func readBeginHandOff(r *reader) any {
	m := protocol.BeginHandOff{Shard: r.string("Shard"), Epoch: r.uvarint("Epoch")}
	if r.more() {
		m.Seq = r.uvarint("Seq")
	}
	return m
}

func readBeginHandOffAck(r *reader) any {
	m := protocol.BeginHandOffAck{Shard: r.string("Shard"), Region: r.address("Region"), FencedAt: r.address("FencedAt")}
	if r.more() {
		m.Epoch, m.Seq = r.uvarint("Epoch"), r.uvarint("Seq")
	}
	return m
}

func readHandOff(r *reader) any {
	m := protocol.HandOff{Shard: r.string("Shard"), Epoch: r.uvarint("Epoch"), Fences: r.addresses("Fences")}
	if r.more() {
		m.Seq = r.uvarint("Seq")
	}
	// The mail holder was appended after Seq: absent, it is not known
	// (MailHeldByKnown false), which is what an older coordinator meant.
	if r.more() {
		m.MailHeldBy, m.MailHeldByKnown = r.address("MailHeldBy"), r.bool("MailHeldByKnown")
	}
	return m
}

func readShardStopped(r *reader) any {
	m := protocol.ShardStopped{Shard: r.string("Shard"), Region: r.address("Region"), Held: r.bool("Held")}
	if r.more() {
		m.Epoch, m.Seq = r.uvarint("Epoch"), r.uvarint("Seq")
	}
	return m
}

func readFence(r *reader) any {
	m := protocol.Fence{Shard: r.string("Shard"), From: r.address("From")}
	if r.more() {
		m.Epoch, m.Seq = r.uvarint("Epoch"), r.uvarint("Seq")
	}
	return m
}

func readFlush(r *reader) any {
	return protocol.Flush{From: r.address("From"), Seq: r.uvarint("Seq")}
}

func readFlushAck(r *reader) any {
	return protocol.FlushAck{Region: r.address("Region"), Seq: r.uvarint("Seq")}
}

func readHandOver(r *reader) any {
	m := protocol.HandOver{Shard: r.string("Shard"), From: r.address("From"), Seq: r.uvarint("Seq"), Relayed: r.bool("Relayed")}
	if n := r.count("Msgs", 1); n > 0 {
		m.Msgs = make([]protocol.Deliver, n)
		for i := range m.Msgs {
			body := r.body("HandOver.Msgs")
			readDeliver(&body, &m.Msgs[i])
			r.done(&body)
		}
	}
	return m
}

func readGracefulShutdownReq(r *reader) any {
	return protocol.GracefulShutdownReq{Region: r.address("Region")}
}

func readLeaveAck(r *reader) any { return protocol.LeaveAck{Epoch: r.uvarint("Epoch")} }

func readStopShards(r *reader) any { return protocol.StopShards{Shards: r.strings("Shards")} }

func readRebalanceShards(r *reader) any {
	return protocol.RebalanceShards{Shards: r.strings("Shards")}
}

func readLeaveRequest(*reader) any { return protocol.LeaveRequest{} }

func readRegionStopped(r *reader) any { return protocol.RegionStopped{Region: r.address("Region")} }

func readMembersDown(r *reader) any { return protocol.MembersDown{Nodes: r.addresses("Nodes")} }

func readGetRegionStats(r *reader) any {
	a := readReplyAddress(r, "ReplyTo")
	var m protocol.GetRegionStats
	if r.err == nil && !a.IsZero() {
		// ReplyTo keeps its address unexported; its JSON form is the one
		// way to build it outside package entity. A rare message.
		data, err := json.Marshal(a)
		if err == nil {
			err = m.ReplyTo.UnmarshalJSON(data)
		}
		if err != nil {
			r.fail(ErrCorrupt, "ReplyTo", "%v", err)
		}
	}
	return m
}

func readDeliverMessage(r *reader) any {
	var d protocol.Deliver
	readDeliver(r, &d)
	return d
}

// readDeliver reads a Deliver into d, a zero Deliver: in place, sparing
// the copies of a Deliver returned by value.
func readDeliver(r *reader, d *protocol.Deliver) {
	d.Shard = r.view("Shard")
	d.EntityID = r.view("EntityID")
	d.Start = r.bool("Start")
	d.Ask = r.bool("Ask")
	e := Encoded{Manifest: r.view("Manifest"), Payload: r.bytes("Payload")}
	if n := r.count("ReplyTo", 3); n > 0 {
		e.ReplyTo = make([]entity.ReplyAddress, n)
		for i := range e.ReplyTo {
			e.ReplyTo[i] = readReplyAddress(r, "ReplyTo")
		}
	}
	if r.more() { // traced; absent in an untraced Deliver and before the fields existed
		d.Trace = &protocol.TraceContext{Parent: r.string("Trace.Parent"), State: r.string("Trace.State")}
	}
	if e.Manifest != "" {
		if r.open != nil && len(e.ReplyTo) == 0 && r.err == nil {
			decode := r.open.Decode
			if r.borrow {
				decode = r.open.DecodeBorrowed // the value outlives the bytes
			}
			if v, err := decode(e.Manifest, e.Payload); err == nil {
				d.Msg = v
				return
			}
		}
		d.Msg = e
	} else if len(e.Payload) > 0 || len(e.ReplyTo) > 0 {
		r.fail(ErrCorrupt, "Manifest", "empty, with a payload or reply addresses")
	}
}

func readReply(r *reader) any {
	return Reply{To: readReplyAddress(r, "To"), Manifest: r.string("Manifest"), Payload: r.bytes("Payload")}
}

func readAskFailed(r *reader) any {
	return AskFailed{To: readReplyAddress(r, "To"), Kind: r.string("Kind"), Reason: r.string("Reason")}
}

func readReplyAddress(r *reader, field string) entity.ReplyAddress {
	return entity.ReplyAddress{Node: r.string(field), Incarnation: r.uvarint(field), AskID: r.uvarint(field)}
}
