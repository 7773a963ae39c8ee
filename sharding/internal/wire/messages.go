package wire

import (
	"fmt"
	"reflect"
	"sync"

	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/sharding/internal/protocol"
)

// kinds lists every protocol message that crosses nodes: the one place
// that names them. Its manifest is ManifestPrefix and the type's name.
func kinds() []kind {
	return []kind{
		kindFor[protocol.Register](),
		kindFor[protocol.RegisterProxy](),
		kindFor[protocol.RegisterAck](),
		kindFor[protocol.GetShardHome](),
		kindFor[protocol.ShardHome](),
		kindFor[protocol.ShardHomes](),
		kindFor[protocol.HostShard](),
		kindFor[protocol.ShardStarted](),
		kindFor[protocol.BeginHandOff](),
		kindFor[protocol.BeginHandOffAck](),
		kindFor[protocol.HandOff](),
		kindFor[protocol.ShardStopped](),
		kindFor[protocol.Fence](),
		kindFor[protocol.HandOver](),
		kindFor[protocol.GracefulShutdownReq](),
		kindFor[protocol.LeaveAck](),
		kindFor[protocol.StopShards](),
		kindFor[protocol.RebalanceShards](),
		kindFor[protocol.LeaveRequest](),
		kindFor[protocol.RegionStopped](),
		kindFor[protocol.MembersDown](),
		kindFor[protocol.GetRegionStats](),
		kindFor[protocol.Deliver](),
	}
}

// Messages returns a zero value of every protocol message type that
// crosses nodes, in the order of the list above.
func Messages() []protocol.Message {
	var out []protocol.Message
	for _, k := range kinds() {
		out = append(out, reflect.Zero(k.typ).Interface().(protocol.Message))
	}
	return out
}

// kind is one protocol message type: how it is planned, registered and
// put in its Envelope.
type kind struct {
	typ  reflect.Type
	plan *plan
	// build plans the type; register adds its Envelope to a codec; wrap
	// puts a value of it (v) in its Envelope.
	build    func() (*plan, error)
	register func(reg *codec.Registry, p *plan) error
	wrap     func(to Target, v reflect.Value) Addressed
}

func kindFor[M protocol.Message]() kind {
	k := kind{typ: reflect.TypeFor[M]()}
	k.build = func() (*plan, error) { return newPlan(k.typ, true) }
	k.wrap = func(to Target, v reflect.Value) Addressed { return Envelope[M]{To: to, Msg: v.Interface().(M)} }
	k.register = func(reg *codec.Registry, p *plan) error {
		return add[Envelope[M]](reg, k.typ.Name(), codec.WithSerializer(envelopeSerializer[M]{p}))
	}
	return k
}

// messageTable is the planned kinds, by type.
type messageTable struct {
	kinds  []*kind
	byType map[reflect.Type]*kind
}

// table plans every kind once; the result never changes afterwards.
var table = sync.OnceValues(func() (*messageTable, error) {
	t := &messageTable{byType: make(map[reflect.Type]*kind)}
	for _, k := range kinds() {
		p, err := k.build()
		if err != nil {
			return nil, err
		}
		k.plan = p
		t.kinds = append(t.kinds, &k)
		t.byType[k.typ] = t.kinds[len(t.kinds)-1]
	}
	return t, nil
})

func kindOf(m protocol.Message) (*kind, error) {
	t, err := table()
	if err != nil {
		return nil, err
	}
	k := t.byType[reflect.TypeOf(m)]
	if k == nil {
		return nil, fmt.Errorf("%w: %T", ErrUnknownType, m)
	}
	return k, nil
}
