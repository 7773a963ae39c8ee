package cluster

// EventKind says what changed about a member between two views.
type EventKind uint8

const (
	// MemberAdded: the member was not in the old view.
	MemberAdded EventKind = iota + 1
	// MemberUp: its status became Up.
	MemberUp
	// MemberLeaving: its status became Leaving.
	MemberLeaving
	// MemberDowned: its status became Down.
	MemberDowned
	// MemberUnreachable: the failure detector began to suspect it.
	MemberUnreachable
	// MemberReachable: it is no longer suspected.
	MemberReachable
	// MemberUpdated: its endpoint, roles or app version changed.
	MemberUpdated
	// MemberRemoved: it is not in the new view.
	MemberRemoved
)

// String names the kind.
func (k EventKind) String() string {
	switch k {
	case MemberAdded:
		return "MemberAdded"
	case MemberUp:
		return "MemberUp"
	case MemberLeaving:
		return "MemberLeaving"
	case MemberDowned:
		return "MemberDowned"
	case MemberUnreachable:
		return "MemberUnreachable"
	case MemberReachable:
		return "MemberReachable"
	case MemberUpdated:
		return "MemberUpdated"
	case MemberRemoved:
		return "MemberRemoved"
	}
	return "EventKind(?)"
}

// Event is one thing that changed about one member.
type Event struct {
	Kind EventKind
	// Member is the member as the new view holds it (for MemberRemoved,
	// as the old view held it).
	Member Member
	// Previous is the member as the old view held it; zero for MemberAdded.
	Previous Member
}

// Change is a step from one view to the next, with the events between them.
type Change struct {
	From, To View
	Events   []Event
}

// Diff lists what changed from one view to the next, ordered by member
// address; a member that changed in several ways gets one event per way,
// in the order of EventKind. A member added with status Up gets
// MemberAdded only: its status is in Member.
func Diff(from, to View) []Event {
	var events []Event
	i, j := 0, 0
	for i < len(from.members) || j < len(to.members) {
		switch {
		case j == len(to.members) || (i < len(from.members) && from.members[i].Address.Compare(to.members[j].Address) < 0):
			events = append(events, Event{Kind: MemberRemoved, Member: from.members[i].clone(), Previous: from.members[i].clone()})
			i++
		case i == len(from.members) || from.members[i].Address.Compare(to.members[j].Address) > 0:
			events = append(events, Event{Kind: MemberAdded, Member: to.members[j].clone()})
			j++
		default:
			events = append(events, changes(from.members[i], to.members[j])...)
			i++
			j++
		}
	}
	return events
}

// changes lists the events that turn old into cur, two members at one address.
func changes(old, cur Member) []Event {
	if old.equal(cur) {
		return nil
	}
	var kinds []EventKind
	regressed := false
	if cur.Status != old.Status {
		switch cur.Status {
		case Up:
			kinds = append(kinds, MemberUp)
		case Leaving:
			kinds = append(kinds, MemberLeaving)
		case Down:
			kinds = append(kinds, MemberDowned)
		default:
			// Back to Joining: possible only between two views not built
			// from each other (two nodes' opinions).
			regressed = true
		}
	}
	if cur.Unreachable != old.Unreachable {
		if cur.Unreachable {
			kinds = append(kinds, MemberUnreachable)
		} else {
			kinds = append(kinds, MemberReachable)
		}
	}
	meta, oldMeta := cur, old
	meta.Status, meta.Unreachable = 0, false
	oldMeta.Status, oldMeta.Unreachable = 0, false
	if regressed || !meta.equal(oldMeta) {
		kinds = append(kinds, MemberUpdated)
	}
	events := make([]Event, len(kinds))
	for k, kind := range kinds {
		events[k] = Event{Kind: kind, Member: cur.clone(), Previous: old.clone()}
	}
	return events
}
