// Package runtime is the entity runtime behind package entity: cells and
// their mailboxes, the dispatcher, the reply table, and the hooks that
// sharding and eventsourced need and users must not call (Seal, Post,
// Suspend, StartRecovery, DeliverReply, FailAsks, ...). Users see it
// through package entity, which re-exports its user-facing types; the
// hooks are functions of this package rather than methods, so that a type
// a user holds carries none of them (see docs/DESIGN.md, 'Packages').
//
// An entity is a behavior plus a mailbox. Messages to one entity are handled
// one at a time, in arrival order; an entity with an empty mailbox owns no
// goroutine. The System schedules mailboxes onto a small pool of workers,
// fires timers, routes replies, and, in tests, can force every message
// through the codec so that a type that cannot cross the network fails early.
package runtime

import (
	"errors"
	"fmt"
)

// TypeKey names an entity type and fixes its command type.
type TypeKey[C any] struct{ name string }

// NewTypeKey returns the key of the entity type called name.
func NewTypeKey[C any](name string) TypeKey[C] { return TypeKey[C]{name: name} }

// Name is the entity type's name.
func (k TypeKey[C]) Name() string { return k.name }

func (k TypeKey[C]) String() string { return k.name }

// Ref addresses an entity that accepts commands of type C.
type Ref[C any] interface {
	// Tell enqueues msg without waiting for it to be handled. It fails, and
	// msg is not delivered, when the entity is gone or its mailbox is full.
	Tell(msg C) error
	// System is the local runtime that routes replies to asks on this ref.
	System() *System
}

// ErrStopped is returned when telling an entity that has stopped.
var ErrStopped = errors.New("entity: stopped")

// ErrMailboxFull is returned by Tell when a bounded mailbox is at capacity.
var ErrMailboxFull = errors.New("entity: mailbox full")

// PanicError is the stop reason of an entity whose handler panicked.
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("entity: handler panicked: %v", e.Value) }
