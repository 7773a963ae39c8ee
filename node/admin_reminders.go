package node

import (
	"context"
	"fmt"
	"time"

	"github.com/shoal-dev/shoal/node/admin"
	"github.com/shoal-dev/shoal/timers/reminder"
)

var _ admin.ReminderSource = adminSource{}

// reminderLateAfter is the lateness the admin API counts stored reminders
// late by: the firing's default.
const reminderLateAfter = 10 * time.Second

// Reminders implements admin.ReminderSource: this node's firing per type,
// and every shard's stored reminders from the store.
func (s adminSource) Reminders(ctx context.Context) ([]admin.ReminderType, error) {
	store := s.n.Reminders()
	if store == nil {
		return nil, nil
	}
	firing := s.n.ReminderFiring()
	var out []admin.ReminderType
	for _, typ := range s.n.Sharding().Types() {
		stats, err := store.Stats(ctx, typ, reminderLateAfter)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", admin.ErrUnavailable, err)
		}
		f := firing[typ]
		t := admin.ReminderType{Type: typ, Shards: []admin.ReminderShard{},
			Firing: admin.ReminderFiring{Shards: f.Shards, Held: f.Held, Due: f.Due, Late: f.Late, Delivered: f.Delivered}}
		for _, st := range stats {
			t.Shards = append(t.Shards, admin.ReminderShard{Shard: st.ShardID, Stored: st.Total, Due: st.Due, Late: st.Late})
		}
		out = append(out, t)
	}
	return out, nil
}

// Reminder implements admin.ReminderSource.
func (s adminSource) Reminder(ctx context.Context, typeName, entityID, name string) (admin.Reminder, error) {
	store := s.n.Reminders()
	if store == nil {
		return admin.Reminder{}, fmt.Errorf("%w: this node has no reminder store", admin.ErrUnknownReminder)
	}
	r, ok, err := store.Get(ctx, reminder.Key{EntityType: typeName, EntityID: entityID, Name: name})
	switch {
	case err != nil:
		return admin.Reminder{}, fmt.Errorf("%w: %w", admin.ErrUnavailable, err)
	case !ok:
		return admin.Reminder{}, fmt.Errorf("%w: %s|%s/%s", admin.ErrUnknownReminder, typeName, entityID, name)
	}
	out := admin.Reminder{Type: typeName, EntityID: entityID, Name: name, Shard: r.ShardID, Due: r.Due, Command: r.Manifest, Generation: r.Generation}
	if r.Period > 0 {
		out.Period = r.Period.String()
	}
	return out, nil
}
