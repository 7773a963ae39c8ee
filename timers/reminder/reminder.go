// Package reminder is the storage seam of durable reminders: timers that
// are stored, so that they fire even when their entity is passivated, its
// node died or the whole cluster restarted (docs/DESIGN.md, "Durable
// reminders").
//
// A reminder is keyed by (entity type, entity id, name), belongs to the
// shard of its entity, carries one of the entity's commands as the codec
// encoded it (manifest and bytes), and is due at a time on the database's
// clock, once or every Period. Each stored version has a Generation, a
// random number that changes whenever the reminder is set again or
// advanced: it is the delivery id. Acknowledging a delivery names it, so
// an acknowledgement that comes late (a second delivery, a reminder set
// again meanwhile) changes nothing.
//
// This package imports nothing of Shoal: the journal carries a Batch in the
// same transaction as an effect's events (it satisfies journal.Side by
// shape), and package sharding/reminders fires what the Store says is due.
// Implementations: memory and postgres; remindertest is the conformance
// suite both pass.
package reminder

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"time"
)

// Key names a reminder: one per name per entity.
type Key struct {
	EntityType string
	EntityID   string
	Name       string
}

func (k Key) String() string { return k.EntityType + "|" + k.EntityID + "/" + k.Name }

// Reminder is one stored reminder.
type Reminder struct {
	Key
	// ShardID is the shard of the entity when the reminder was set: the
	// node hosting that shard fires it.
	ShardID string
	// Due is when it fires next, on the database's clock.
	Due time.Time
	// Period is the interval of a periodic reminder; 0 for a one-shot.
	Period time.Duration
	// Manifest and Payload are the command to deliver, as the entity's
	// codec encoded it.
	Manifest string
	Payload  []byte
	// Generation is the delivery id of this version (see the package doc).
	Generation uint64
}

// Delivery is what a delivered reminder command carries: embed it in the
// command type, and the firing node fills it in. Its fields have JSON names
// of their own, so that they do not clash with the command's.
type Delivery struct {
	Reminder   Key       `json:"reminder_key"`
	Generation uint64    `json:"reminder_generation"`
	Due        time.Time `json:"reminder_due"`
}

// ReminderDelivery returns d; through embedding it makes every command that
// embeds a Delivery answer DeliveryOf.
func (d Delivery) ReminderDelivery() Delivery { return d }

// IsZero reports whether d names no delivery: the command was not sent by
// a reminder.
func (d Delivery) IsZero() bool { return d.Generation == 0 }

// DeliveryOf returns the delivery a command carries: ok is false when it
// embeds no Delivery, or its Delivery is zero (sent by hand, not fired).
func DeliveryOf(cmd any) (Delivery, bool) {
	c, ok := cmd.(interface{ ReminderDelivery() Delivery })
	if !ok {
		return Delivery{}, false
	}
	d := c.ReminderDelivery()
	return d, !d.IsZero()
}

// Change sets or cancels one reminder.
type Change struct {
	Key
	// Cancel removes the reminder; the other fields are ignored.
	Cancel bool
	// ShardID: see Reminder.
	ShardID string
	// At is the due time on the database's clock; when it is zero the
	// reminder is due After from the store's now (the database's).
	At    time.Time
	After time.Duration
	// Period makes the reminder periodic; 0 for a one-shot.
	Period   time.Duration
	Manifest string
	Payload  []byte
	// Generation is the new version's delivery id; NewGeneration's.
	Generation uint64
}

// Ack acknowledges a delivery: the entity handled it. A periodic reminder
// still at Generation advances, a one-shot one is removed; one set again or
// cancelled meanwhile is left alone.
type Ack struct {
	Key
	Generation uint64
	// Next is the generation the advanced periodic reminder takes;
	// NewGeneration's.
	Next uint64
}

// Batch is what one write applies, atomically: the acknowledgements first,
// then the changes, in order (a later change of a key wins).
type Batch struct {
	Acks    []Ack
	Changes []Change
}

// SideStore names the store a Batch is for, so that a journal carries it in
// an effect's transaction (it satisfies journal.Side).
func (Batch) SideStore() string { return SideStoreName }

// SideStoreName is the name a journal's side store for reminders answers.
const SideStoreName = "reminders"

// Empty reports whether b changes nothing.
func (b Batch) Empty() bool { return len(b.Acks) == 0 && len(b.Changes) == 0 }

// ErrInvalid means a change or an acknowledgement is ill-formed; the whole
// batch is refused and nothing is stored.
var ErrInvalid = errors.New("reminder: invalid")

// MaxNameLen bounds a reminder's name (in bytes).
const MaxNameLen = 200

// Validate checks b's shape: keys complete, names bounded, generations set,
// a set change has a shard, a command manifest and no negative delay or period.
func (b Batch) Validate() error {
	check := func(k Key) error {
		switch {
		case k.EntityType == "" || k.EntityID == "" || k.Name == "":
			return fmt.Errorf("%w: incomplete key %q", ErrInvalid, k)
		case len(k.Name) > MaxNameLen:
			return fmt.Errorf("%w: %s: name longer than %d bytes", ErrInvalid, k, MaxNameLen)
		}
		return nil
	}
	for _, a := range b.Acks {
		if err := check(a.Key); err != nil {
			return err
		}
		if a.Generation == 0 || a.Next == 0 {
			return fmt.Errorf("%w: %s: acknowledgement without generations", ErrInvalid, a.Key)
		}
	}
	for _, c := range b.Changes {
		if err := check(c.Key); err != nil {
			return err
		}
		if c.Cancel {
			continue
		}
		switch {
		case c.ShardID == "":
			return fmt.Errorf("%w: %s: no shard (is the entity sharded?)", ErrInvalid, c.Key)
		case c.Manifest == "":
			return fmt.Errorf("%w: %s: no command", ErrInvalid, c.Key)
		case c.Generation == 0:
			return fmt.Errorf("%w: %s: no generation", ErrInvalid, c.Key)
		case c.After < 0 || c.Period < 0:
			return fmt.Errorf("%w: %s: negative delay or period", ErrInvalid, c.Key)
		case c.Period > 0 && c.Period < time.Millisecond:
			return fmt.Errorf("%w: %s: period below a millisecond", ErrInvalid, c.Key)
		}
	}
	return nil
}

// NewGeneration returns a fresh, non-zero delivery id that fits a signed
// 64-bit column.
func NewGeneration() uint64 { return rand.Uint64()>>1 | 1 }

// Query selects the reminders of one entity type, in a set of shards, due
// within a window from the store's now.
type Query struct {
	EntityType string
	Shards     []string
	Within     time.Duration
	// Limit bounds the reminders returned (the earliest due); 0: no bound.
	Limit int
}

// Window is what Due returns: the store's now (the database's clock) and
// the reminders due at or before Now+Within, earliest first.
type Window struct {
	Now       time.Time
	Reminders []Reminder
}

// ShardStats counts one shard's reminders of one entity type.
type ShardStats struct {
	ShardID string
	// Total is every reminder stored; Due those due at the store's now;
	// Late those due more than the lateness given to Stats ago.
	Total, Due, Late int
}

// Store keeps reminders. Implementations are safe for concurrent use.
type Store interface {
	// Apply stores b atomically: all of it or nothing. An ill-formed batch
	// fails with an error matching ErrInvalid.
	Apply(ctx context.Context, b Batch) error
	// Due returns the reminders of q's shards due within q.Within.
	Due(ctx context.Context, q Query) (Window, error)
	// Get returns one reminder; ok is false when there is none.
	Get(ctx context.Context, k Key) (r Reminder, ok bool, err error)
	// Now is the store's clock: the database's time.
	Now(ctx context.Context) (time.Time, error)
	// DueShards lists the shards of entityType with reminders due within
	// the window, each with the entity id of its earliest: a node starts
	// that entity when nobody hosts the shard, so that its home fires
	// them (after a full cluster restart no shard has a home).
	DueShards(ctx context.Context, entityType string, within time.Duration) (map[string]string, error)
	// Stats counts the reminders of entityType per shard (shards without
	// any are left out), sorted by shard id.
	Stats(ctx context.Context, entityType string, late time.Duration) ([]ShardStats, error)
}

// Acknowledge is Apply of one acknowledgement, the generation of an
// advanced periodic reminder drawn by NewGeneration.
func Acknowledge(ctx context.Context, s Store, d Delivery) error {
	return s.Apply(ctx, Batch{Acks: []Ack{{Key: d.Reminder, Generation: d.Generation, Next: NewGeneration()}}})
}

// NextDue is when a periodic reminder due at due fires after it was
// handled at now: the first of due+k×period after now, so that the ticks
// missed while nobody fired count as the one delivery just handled (fire
// once for everything missed).
func NextDue(due time.Time, period time.Duration, now time.Time) time.Time {
	if period <= 0 {
		return due
	}
	next := due.Add(period)
	if !next.After(now) {
		missed := now.Sub(next)/period + 1
		next = next.Add(missed * period)
	}
	return next
}

// Observer learns of the batches a store applied, after they committed:
// the firing node adds what its shards need without waiting for its next
// load. now is the store's now when it applied b. It must not block.
type Observer func(b Batch, now time.Time)

// CanCarry reports whether cmd can carry a Delivery: it embeds one, so
// that the firing node can fill it in and the handler can read it.
func CanCarry(cmd any) bool {
	_, ok := deliveryField(reflect.ValueOf(cmd))
	return ok
}

// Stamp returns a copy of cmd carrying d in its embedded Delivery; ok is
// false when cmd embeds none. A pointer gives a pointer to a copy.
func Stamp(cmd any, d Delivery) (stamped any, ok bool) {
	v := reflect.ValueOf(cmd)
	isPtr := v.Kind() == reflect.Pointer
	if isPtr {
		if v.IsNil() {
			return cmd, false
		}
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct {
		return cmd, false
	}
	c := reflect.New(v.Type()).Elem()
	c.Set(v)
	f, ok := deliveryField(c)
	if !ok || !f.CanSet() {
		return cmd, false
	}
	f.Set(reflect.ValueOf(d))
	if isPtr {
		return c.Addr().Interface(), true
	}
	return c.Interface(), true
}

var deliveryType = reflect.TypeFor[Delivery]()

// deliveryField finds the Delivery embedded in the struct v (or *v).
func deliveryField(v reflect.Value) (reflect.Value, bool) {
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return reflect.Value{}, false
		}
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct {
		return reflect.Value{}, false
	}
	sf, ok := v.Type().FieldByName("Delivery")
	if !ok || !sf.Anonymous || sf.Type != deliveryType || len(sf.Index) != 1 {
		return reflect.Value{}, false
	}
	return v.Field(sf.Index[0]), true
}
