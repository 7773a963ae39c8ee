package cluster

import (
	"errors"
	"fmt"
	"slices"
)

// ErrInvalidMember is returned (wrapped) when a view would hold a member
// with no address, an unknown status, or a second member at one address.
var ErrInvalidMember = errors.New("cluster: invalid member")

// ErrStatusRegression is returned (wrapped) when an update would move a
// member's status backwards (Down → Up, say) or change its join order:
// a restarted node is a new incarnation, never the old one revived.
var ErrStatusRegression = errors.New("cluster: member status cannot move backwards")

// View is an immutable snapshot of the members one node knows of. Views of
// different nodes may differ for a while; everything computed from a view
// (the oldest of a role, say) is that node's opinion, not a fact.
//
// The zero View is empty. A View is safe to share: nothing reachable from
// it is modified after it is built.
type View struct {
	members []Member // sorted by Address
}

// NewView returns a view of members. It returns ErrInvalidMember for a
// member without an address or status, or two members at one address.
func NewView(members ...Member) (View, error) {
	out := make([]Member, 0, len(members))
	for _, m := range members {
		if err := checkMember(m); err != nil {
			return View{}, err
		}
		out = append(out, m.clone())
	}
	slices.SortFunc(out, func(a, b Member) int { return a.Address.Compare(b.Address) })
	for i := 1; i < len(out); i++ {
		if out[i].Address == out[i-1].Address {
			return View{}, fmt.Errorf("%w: %s appears twice", ErrInvalidMember, out[i].Address)
		}
	}
	return View{members: out}, nil
}

func checkMember(m Member) error {
	if m.Address.Node == "" {
		return fmt.Errorf("%w: empty node id", ErrInvalidMember)
	}
	if !m.Status.valid() {
		return fmt.Errorf("%w: %s has status %s", ErrInvalidMember, m.Address, m.Status)
	}
	return nil
}

// Len is the number of members.
func (v View) Len() int { return len(v.members) }

// Members returns a copy of the members, ordered by address.
func (v View) Members() []Member {
	out := make([]Member, len(v.members))
	for i, m := range v.members {
		out[i] = m.clone()
	}
	return out
}

func (v View) index(a UniqueAddress) (int, bool) {
	return slices.BinarySearchFunc(v.members, a, func(m Member, a UniqueAddress) int { return m.Address.Compare(a) })
}

// Member returns the member at a.
func (v View) Member(a UniqueAddress) (Member, bool) {
	i, ok := v.index(a)
	if !ok {
		return Member{}, false
	}
	return v.members[i].clone(), true
}

// Oldest returns the oldest Up, reachable member with role (the empty role
// matches every member): the one with the smallest join order. ok is false
// when there is none.
func (v View) Oldest(role string) (oldest Member, ok bool) {
	for _, m := range v.members {
		if m.Status != Up || m.Unreachable || !m.HasRole(role) {
			continue
		}
		if !ok || m.Older(oldest) {
			oldest, ok = m, true
		}
	}
	return oldest.clone(), ok
}

// With returns a view where m is added, or replaces the member at its
// address. It refuses (ErrStatusRegression) to move a member's status
// backwards or to change its join order, and refuses an invalid member
// (ErrInvalidMember); v itself never changes.
func (v View) With(m Member) (View, error) {
	if err := checkMember(m); err != nil {
		return View{}, err
	}
	i, found := v.index(m.Address)
	if found {
		old := v.members[i]
		if m.Status < old.Status {
			return View{}, fmt.Errorf("%w: %s from %s to %s", ErrStatusRegression, m.Address, old.Status, m.Status)
		}
		if m.JoinOrder != old.JoinOrder {
			return View{}, fmt.Errorf("%w: %s join order from %d to %d", ErrStatusRegression, m.Address, old.JoinOrder, m.JoinOrder)
		}
	}
	out := make([]Member, 0, len(v.members)+1)
	out = append(out, v.members[:i]...)
	out = append(out, m.clone())
	if found {
		i++
	}
	out = append(out, v.members[i:]...)
	return View{members: out}, nil
}

// Without returns a view without the member at a (v itself if there is none).
func (v View) Without(a UniqueAddress) View {
	i, found := v.index(a)
	if !found {
		return v
	}
	return View{members: slices.Concat(v.members[:i], v.members[i+1:])}
}
