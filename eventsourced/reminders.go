package eventsourced

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/shoal-dev/shoal/internal/runtime"
	"github.com/shoal-dev/shoal/journal"
	"github.com/shoal-dev/shoal/timers/reminder"
)

// Durable reminders (docs/DESIGN.md, "Durable reminders"): an effect sets
// or cancels named reminders of its entity, each carrying one of the
// entity's commands; they are written in the transaction that stores the
// effect's events, so a failed persist sets nothing. A command a reminder
// delivered (one that embeds a reminder.Delivery, filled in) is
// acknowledged once its effect is done: in the same transaction as its
// events, or, for an effect without events, right after it ran.

// ErrNoReminderStore is the persist failure of an effect with reminder
// changes on an entity whose journal cannot write them in its transaction
// (not a journal.SideWriter with a reminder side store) or that has no
// reminder store.
var ErrNoReminderStore = errors.New("eventsourced: no reminder store to write the effect's reminders with its events")

// ReminderChange sets or cancels one named reminder of the entity. Build
// one with the CommandContext (RemindAfter, RemindAt, RemindEvery,
// CancelReminder) and add it to an effect with WithReminders.
type ReminderChange struct {
	name   string
	cancel bool
	at     time.Time
	after  time.Duration
	period time.Duration
	cmd    any
}

// Name is the reminder's name.
func (r ReminderChange) Name() string { return r.name }

// Cancels reports whether the change cancels the reminder.
func (r ReminderChange) Cancels() bool { return r.cancel }

// Command is the command the reminder delivers; nil for a cancel.
func (r ReminderChange) Command() any { return r.cmd }

// RemindAfter sets the one-shot reminder name to deliver cmd after d, on
// the database's clock; setting a name again replaces it.
func (c CommandContext[C, E, S]) RemindAfter(name string, d time.Duration, cmd C) ReminderChange {
	return ReminderChange{name: name, after: d, cmd: cmd}
}

// RemindAt sets the one-shot reminder name to deliver cmd at t, a time on
// the database's clock.
func (c CommandContext[C, E, S]) RemindAt(name string, t time.Time, cmd C) ReminderChange {
	return ReminderChange{name: name, at: t, cmd: cmd}
}

// RemindEvery sets the periodic reminder name: cmd after first, then every
// period. After downtime it fires once for all the ticks it missed.
func (c CommandContext[C, E, S]) RemindEvery(name string, first, period time.Duration, cmd C) ReminderChange {
	return ReminderChange{name: name, after: first, period: period, cmd: cmd}
}

// CancelReminder removes the reminder name, if set.
func (c CommandContext[C, E, S]) CancelReminder(name string) ReminderChange {
	return ReminderChange{name: name, cancel: true}
}

// WithReminders adds reminder changes to the effect, applied in order with
// its events (all or none); on an effect without events they are written
// on their own before its side effects run.
func (eff Effect[E, S]) WithReminders(changes ...ReminderChange) Effect[E, S] {
	eff.reminders = append(eff.reminders[:len(eff.reminders):len(eff.reminders)], changes...)
	return eff
}

// Reminders are the effect's reminder changes (a copy).
func (eff Effect[E, S]) Reminders() []ReminderChange { return slices.Clone(eff.reminders) }

// reminderBatch encodes the effect's changes, with the acknowledgement of
// the delivery cmd carries, if any; empty when there is neither.
func (b *behavior[C, E, S]) reminderBatch(cmd C, eff Effect[E, S]) (reminder.Batch, error) {
	var batch reminder.Batch
	if d, ok := reminder.DeliveryOf(cmd); ok && eff.kind != EffectStash {
		batch.Acks = []reminder.Ack{{Key: d.Reminder, Generation: d.Generation, Next: reminder.NewGeneration()}}
	}
	if len(eff.reminders) == 0 {
		return batch, nil
	}
	shard := runtime.ShardOf(b.cell())
	typ := journal.EntityTypeOf(b.pid())
	for _, r := range eff.reminders {
		c := reminder.Change{Key: reminder.Key{EntityType: typ, EntityID: b.EntityID(), Name: r.name}, Cancel: r.cancel}
		if !r.cancel {
			if !reminder.CanCarry(r.cmd) {
				return reminder.Batch{}, fmt.Errorf("%w: reminder %q: command %T does not embed a reminder.Delivery, so its handling could not be acknowledged", reminder.ErrInvalid, r.name, r.cmd)
			}
			manifest, payload, err := b.cfg.Codec.Encode(r.cmd)
			if err != nil {
				return reminder.Batch{}, fmt.Errorf("reminder %q: %w", r.name, err)
			}
			c.ShardID, c.At, c.After, c.Period = shard, r.at, r.after, r.period
			c.Manifest, c.Payload, c.Generation = manifest, payload, reminder.NewGeneration()
		}
		batch.Changes = append(batch.Changes, c)
	}
	if err := batch.Validate(); err != nil {
		return reminder.Batch{}, err
	}
	return batch, nil
}

// reminders is the store the entity writes reminders to without events.
func (b *behavior[C, E, S]) reminders() reminder.Store {
	if b.cfg.Reminders != nil {
		return b.cfg.Reminders
	}
	return b.System().Reminders()
}

// applyReminders writes a batch that goes without events: the changes of
// an effect that persists nothing (the entity waits for them, and stops if
// they fail, as for a failed persist), or only the acknowledgement of a
// delivery (at least once: a failure is logged, and the reminder fires
// again). then runs once it is done.
func (b *behavior[C, E, S]) applyReminders(cmd C, batch reminder.Batch, then func()) {
	store := b.reminders()
	if len(batch.Changes) == 0 {
		if store != nil {
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), b.cfg.WriteTimeout)
				defer cancel()
				if err := store.Apply(ctx, batch); err != nil {
					b.Log().Warn("acknowledging a reminder failed; it fires again", "err", err)
				}
			}()
		}
		then()
		return
	}
	if store == nil {
		b.rejectPersist(cmd, b.seqNr+1, ErrNoReminderStore)
		return
	}
	runtime.Suspend(b.cell())
	timeout := b.cfg.WriteTimeout
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		err := store.Apply(ctx, batch)
		cancel()
		runtime.Post(b.cell(), func() {
			if err != nil {
				kind := ErrPersistFailed
				if errors.Is(err, reminder.ErrInvalid) {
					kind = ErrPersistRejected
				}
				perr := &PersistError{PersistenceID: b.pid(), SeqNr: b.seqNr + 1, Kind: kind, Err: fmt.Errorf("reminders: %w", err)}
				b.Log().Error("writing reminders failed; stopping", "err", perr)
				b.signal(PersistFailed{Err: perr})
				b.failCommand(cmd, perr)
				return
			}
			runtime.Resume(b.cell())
			then()
		})
	}()
}
