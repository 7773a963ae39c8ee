package memberlist

import (
	"maps"
	"slices"
	"time"

	"github.com/shoal-dev/shoal/cluster"
)

// nodeEventKind is what memberlist's event delegate reported.
type nodeEventKind uint8

const (
	nodeJoined  nodeEventKind = iota + 1 // alive: new, or back from failed
	nodeUpdated                          // alive with new metadata
	nodeLeft                             // left or failed: memberlist does not say which
)

// nodeEvent is a copy of one event delegate call, taken before the
// delegate returns (memberlist owns the *Node it passes).
type nodeEvent struct {
	kind nodeEventKind
	name string // memberlist node name
	addr string // memberlist host:port, for reconnecting
	meta []byte
}

// tracker turns memberlist's node events into a cluster.View. It is a pure
// machine: it owns no goroutine and reads no clock (now is passed in), so
// the rules below are tested without a network.
//
//   - A node's status comes from its metadata: Joining until it has a join
//     order, then Up, then Leaving once its Leaving flag is set. Status never
//     moves back and a join order, once seen, never changes.
//   - memberlist reports no suspicion and one "leave" event for a graceful
//     leave and a failure alike. A node that leaves while Leaving (or this
//     node itself) is Down; any other is failed: Unreachable until it comes
//     back (MemberReachable) or ReconnectTimeout passes (then Down).
//   - A Down member is removed from the view RemoveDownAfter later and
//     never comes back: a restarted process is a new incarnation with a new
//     name.
//   - With admission on, a member is left out of the view until it has
//     been admitted (see Config.Admit); this node is admitted from the start.
type tracker struct {
	self             string
	admitAll         bool // no admission: every member is admitted as it comes
	reconnectTimeout time.Duration
	removeDownAfter  time.Duration
	entries          map[string]*entry
	maxJoinOrder     uint64 // highest join order ever seen, even of removed members
}

type entry struct {
	member      cluster.Member
	admitted    bool
	addr        string
	failedSince time.Time // set while failed (Unreachable, not Down)
	downSince   time.Time // set once Down
}

func newTracker(self string, selfMeta Meta, t Timing, admitAll bool) *tracker {
	tr := &tracker{self: self, admitAll: admitAll, reconnectTimeout: t.ReconnectTimeout, removeDownAfter: t.RemoveDownAfter, entries: map[string]*entry{}}
	tr.entries[self] = &entry{member: selfMeta.Member(), admitted: true}
	tr.maxJoinOrder = selfMeta.JoinOrder
	return tr
}

// apply records one event. It reports false for an event it ignored:
// undecodable metadata (memberlist's alive filter refuses those first) or
// news of a member already Down.
func (t *tracker) apply(ev nodeEvent, now time.Time) bool {
	e, known := t.entries[ev.name]
	if known && e.member.Status == cluster.Down {
		return false
	}
	meta, err := DecodeMeta(ev.meta)
	if err != nil || nodeName(meta.Address) != ev.name {
		return false
	}
	t.maxJoinOrder = max(t.maxJoinOrder, meta.JoinOrder)
	next := meta.Member()
	if known {
		old := e.member
		next.Status = max(next.Status, old.Status)
		if old.JoinOrder != 0 {
			next.JoinOrder = old.JoinOrder
		}
		if next.JoinOrder != 0 && next.Status == cluster.Joining {
			next.Status = cluster.Up
		}
	} else {
		e = &entry{admitted: t.admitAll}
		t.entries[ev.name] = e
	}
	e.addr = ev.addr
	switch ev.kind {
	case nodeJoined, nodeUpdated:
		e.member, e.failedSince = next, time.Time{}
	case nodeLeft:
		if next.Status == cluster.Leaving || ev.name == t.self {
			next.Status = cluster.Down
			e.member, e.downSince = next, now
			break
		}
		next.Unreachable = true
		if e.failedSince.IsZero() {
			e.failedSince = now
		}
		e.member = next
	}
	return true
}

// expire marks Down the members failed for ReconnectTimeout and removes
// those Down for RemoveDownAfter.
func (t *tracker) expire(now time.Time) {
	for name, e := range t.entries {
		switch {
		case e.member.Status == cluster.Down:
			if now.Sub(e.downSince) >= t.removeDownAfter {
				delete(t.entries, name)
			}
		case !e.failedSince.IsZero() && now.Sub(e.failedSince) >= t.reconnectTimeout:
			e.member.Status, e.downSince = cluster.Down, now
		}
	}
}

// admit lets the member called name into the view; it reports false when
// no such member is tracked any more.
func (t *tracker) admit(name string) bool {
	e, ok := t.entries[name]
	if ok {
		e.admitted = true
	}
	return ok
}

// awaiting returns, by name, the members that wait for admission: known,
// not admitted, and not Down.
func (t *tracker) awaiting() map[string]cluster.Member {
	out := map[string]cluster.Member{}
	for name, e := range t.entries {
		if !e.admitted && e.member.Status != cluster.Down {
			out[name] = e.member
		}
	}
	return out
}

// failed returns the "name/addr" of every failed member, for memberlist's Join.
func (t *tracker) failed() []string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(t.entries)) {
		if e := t.entries[name]; e.admitted && !e.failedSince.IsZero() && e.member.Status != cluster.Down && e.addr != "" {
			out = append(out, name+"/"+e.addr)
		}
	}
	return out
}

// view is the current view.
func (t *tracker) view() cluster.View {
	members := make([]cluster.Member, 0, len(t.entries))
	for _, e := range t.entries {
		if e.admitted {
			members = append(members, e.member)
		}
	}
	v, err := cluster.NewView(members...)
	if err != nil {
		// Unreachable: names are unique per address and every status is set.
		panic("memberlist: tracker built an invalid view: " + err.Error())
	}
	return v
}
