// Package cluster holds what every node knows of the others, as seams the
// rest of Shoal builds on: members and their incarnations, immutable
// membership views with the events that tell what changed between two of
// them, the oldest member of a role, and the Transport contract that carries
// messages between node incarnations.
//
// A Membership hands a node its current View and every Change after it;
// LocalMembership is one whose views its owner sets (a node's own opinion,
// so that tests and the simulator can make views diverge).
//
// Implementations live in sub-packages: cluster/frame is the binary frame
// every Transport carries (size limit, typed errors for bad frames),
// cluster/inproc an in-process Transport for tests and the simulator,
// cluster/clustertest the conformance suite every Transport passes, and
// cluster/lease the node and coordinator leases that make the database the
// arbiter (docs/DESIGN.md, "Cluster and leases").
package cluster

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// UniqueAddress names one incarnation of a node: the node id it runs
// under and a number that grows with every restart of that node id. Every
// message is addressed to one, so a message meant for an incarnation that
// has since died is refused instead of reaching its successor.
type UniqueAddress struct {
	Node        string
	Incarnation uint64
}

// String renders the address as node#incarnation. Incarnation 0, which no
// running node has (tests and scenario files name nodes without one),
// renders as the node id alone, and the zero address as the empty string.
func (a UniqueAddress) String() string {
	if a.Incarnation == 0 {
		return a.Node
	}
	return a.Node + "#" + strconv.FormatUint(a.Incarnation, 10)
}

// ErrInvalidAddress is returned (wrapped) by ParseUniqueAddress and
// UnmarshalText for text that is not node#incarnation.
var ErrInvalidAddress = errors.New("cluster: invalid unique address")

// ParseUniqueAddress reverses String: it reads node#incarnation, a node
// id alone as incarnation 0, and the empty string as the zero address.
// A node id may itself hold '#'; the last one ends it. Only edges that keep addresses as
// text (a database column, an operator's input) need it; everything
// inside a node carries the UniqueAddress itself.
func ParseUniqueAddress(s string) (UniqueAddress, error) {
	if s == "" {
		return UniqueAddress{}, nil
	}
	i := strings.LastIndexByte(s, '#')
	if i < 0 {
		return UniqueAddress{Node: s}, nil
	}
	if i == 0 {
		return UniqueAddress{}, fmt.Errorf("%w: %q", ErrInvalidAddress, s)
	}
	inc, err := strconv.ParseUint(s[i+1:], 10, 64)
	if err != nil {
		return UniqueAddress{}, fmt.Errorf("%w: %q: %w", ErrInvalidAddress, s, err)
	}
	return UniqueAddress{Node: s[:i], Incarnation: inc}, nil
}

// MarshalText renders the address as String does, so that it can key a
// map in a text encoding.
func (a UniqueAddress) MarshalText() ([]byte, error) { return []byte(a.String()), nil }

// UnmarshalText reads what MarshalText wrote.
func (a *UniqueAddress) UnmarshalText(b []byte) error {
	parsed, err := ParseUniqueAddress(string(b))
	if err != nil {
		return err
	}
	*a = parsed
	return nil
}

// IsZero reports whether a names no incarnation.
func (a UniqueAddress) IsZero() bool { return a == UniqueAddress{} }

// Compare orders addresses by node id, then incarnation.
func (a UniqueAddress) Compare(b UniqueAddress) int {
	return cmp.Or(cmp.Compare(a.Node, b.Node), cmp.Compare(a.Incarnation, b.Incarnation))
}

// Status is a member's place in its life cycle. It only moves forward:
// Joining → Up → Leaving → Down (any step may be skipped).
type Status uint8

const (
	// Joining: the member is known but not yet a full member.
	Joining Status = iota + 1
	// Up: a full member; only Up members are candidates for oldest.
	Up
	// Leaving: the member is leaving gracefully and hands its work off first.
	Leaving
	// Down: the member is gone (left, crashed or downed); it never returns,
	// a restarted process is a new incarnation.
	Down
)

// String names the status.
func (s Status) String() string {
	switch s {
	case Joining:
		return "Joining"
	case Up:
		return "Up"
	case Leaving:
		return "Leaving"
	case Down:
		return "Down"
	}
	return "Status(" + strconv.Itoa(int(s)) + ")"
}

func (s Status) valid() bool { return s >= Joining && s <= Down }

// Member is one node incarnation as the cluster sees it.
type Member struct {
	// Address is the incarnation's identity.
	Address UniqueAddress
	// Endpoint is where its transport listens (host:port for a network
	// transport; the in-process transport ignores it).
	Endpoint string
	// Roles the member carries; a member without roles has none.
	Roles []string
	// AppVersion is the application version it runs, for rolling updates.
	AppVersion string
	// JoinOrder is the member's rank in joining: smaller is older. It is
	// what "oldest" compares; ties (which a correct membership never
	// produces) are broken by Address.
	JoinOrder uint64
	// Status is where the member is in its life cycle.
	Status Status
	// Unreachable is set while the failure detector suspects the member.
	// An unreachable member is never oldest.
	Unreachable bool
}

// HasRole reports whether m carries role; the empty role matches every member.
func (m Member) HasRole(role string) bool {
	return role == "" || slices.Contains(m.Roles, role)
}

// Older reports whether m joined before o.
func (m Member) Older(o Member) bool {
	if m.JoinOrder != o.JoinOrder {
		return m.JoinOrder < o.JoinOrder
	}
	return m.Address.Compare(o.Address) < 0
}

// String renders the member as address(status, order n).
func (m Member) String() string {
	return fmt.Sprintf("%s(%s, order %d)", m.Address, m.Status, m.JoinOrder)
}

// clone copies the member so that a view never shares a Roles slice with
// its caller.
func (m Member) clone() Member {
	m.Roles = slices.Clone(m.Roles)
	return m
}

// equal reports whether two members are alike in every field.
func (m Member) equal(o Member) bool {
	return m.Address == o.Address && m.Endpoint == o.Endpoint && slices.Equal(m.Roles, o.Roles) &&
		m.AppVersion == o.AppVersion && m.JoinOrder == o.JoinOrder && m.Status == o.Status &&
		m.Unreachable == o.Unreachable
}
