package reminders

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/internal/runtime"
	"github.com/shoal-dev/shoal/timers/reminder"
)

// Handle sets, cancels and acknowledges the reminders of one entity
// directly, for entities that are not event-sourced (an event-sourced
// entity puts them on its effects, eventsourced.Effect.WithReminders). It
// is a small value, safe to use from any goroutine: take it in a handler
// and call it from the work of ctx.PipeToSelf, since its calls wait for
// the store and handlers must not block. Each call is one transaction;
// setting a name again replaces the reminder.
type Handle[C any] struct {
	key   reminder.Key // Name unset
	shard string
	codec *codec.Registry
	store reminder.Store
}

// ErrNotSharded is returned by For for an entity that does not run in a
// shard: no node would fire its reminders.
var ErrNotSharded = errors.New("reminders: the entity runs in no shard")

// For returns the Handle of the entity whose context ctx is; call it in
// one of its handlers.
func For[C any](ctx entity.Context[C]) (Handle[C], error) {
	h := Handle[C]{key: reminder.Key{EntityID: ctx.EntityID()}, codec: ctx.System().Codec(), store: ctx.System().Reminders()}
	if c, ok := ctx.(*runtime.Cell[C]); ok {
		h.key.EntityType = c.EntityType()
		h.shard = runtime.ShardOf(c)
	}
	switch {
	case h.shard == "" || h.key.EntityType == "":
		return Handle[C]{}, fmt.Errorf("%w: %s", ErrNotSharded, ctx.EntityID())
	case h.store == nil:
		return Handle[C]{}, ErrNoStore
	case h.codec == nil:
		return Handle[C]{}, errors.New("reminders: the System has no codec to encode reminder commands with")
	}
	return h, nil
}

func (h Handle[C]) set(ctx context.Context, name string, at time.Time, after, period time.Duration, cmd C) error {
	if !reminder.CanCarry(cmd) {
		return fmt.Errorf("%w: command %T does not embed a reminder.Delivery", reminder.ErrInvalid, cmd)
	}
	manifest, payload, err := h.codec.Encode(cmd)
	if err != nil {
		return fmt.Errorf("reminders: %q: %w", name, err)
	}
	k := h.key
	k.Name = name
	return h.store.Apply(ctx, reminder.Batch{Changes: []reminder.Change{{
		Key: k, ShardID: h.shard, At: at, After: after, Period: period,
		Manifest: manifest, Payload: payload, Generation: reminder.NewGeneration(),
	}}})
}

// RemindAfter sets the one-shot reminder name to deliver cmd after d (on
// the database's clock).
func (h Handle[C]) RemindAfter(ctx context.Context, name string, d time.Duration, cmd C) error {
	return h.set(ctx, name, time.Time{}, d, 0, cmd)
}

// RemindAt sets the one-shot reminder name to deliver cmd at t, a time on
// the database's clock.
func (h Handle[C]) RemindAt(ctx context.Context, name string, t time.Time, cmd C) error {
	if t.IsZero() {
		return fmt.Errorf("%w: %q: zero time", reminder.ErrInvalid, name)
	}
	return h.set(ctx, name, t, 0, 0, cmd)
}

// RemindEvery sets the periodic reminder name: cmd after first, then every
// period.
func (h Handle[C]) RemindEvery(ctx context.Context, name string, first, period time.Duration, cmd C) error {
	if period <= 0 {
		return fmt.Errorf("%w: %q: period %v", reminder.ErrInvalid, name, period)
	}
	return h.set(ctx, name, time.Time{}, first, period, cmd)
}

// Cancel removes the reminder name, if set.
func (h Handle[C]) Cancel(ctx context.Context, name string) error {
	k := h.key
	k.Name = name
	return h.store.Apply(ctx, reminder.Batch{Changes: []reminder.Change{{Key: k, Cancel: true}}})
}

// Acknowledge tells the store the entity handled delivery d: a one-shot
// reminder is removed, a periodic one advanced, unless it was set again
// meanwhile. Until then the reminder is delivered again.
func (h Handle[C]) Acknowledge(ctx context.Context, d reminder.Delivery) error {
	return reminder.Acknowledge(ctx, h.store, d)
}
