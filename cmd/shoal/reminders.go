package main

import (
	"context"
	"io"
	"net/url"
	"strconv"
	"time"

	"github.com/shoal-dev/shoal/node/admin"
)

// reminders lists, per entity type and shard, the stored reminders (all,
// due, late: the same on every node, from the store), and per type what
// the asked node fires: the reminders it holds and the deliveries it sent.
func reminders(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, _, asJSON, err := adminCommand("reminders", args, 0, stderr)
	if err != nil {
		return err
	}
	var list admin.ReminderList
	data, err := c.get(ctx, "/admin/v1/reminders", &list)
	if err != nil {
		return err
	}
	if asJSON {
		return printJSON(stdout, data)
	}
	itoa := strconv.Itoa
	var rows [][]string
	for _, t := range list.Types {
		rows = append(rows, []string{t.Type, "(this node)", itoa(t.Firing.Held), itoa(t.Firing.Due), itoa(t.Firing.Late), itoa(t.Firing.Delivered)})
		for _, s := range t.Shards {
			rows = append(rows, []string{t.Type, s.Shard, itoa(s.Stored), itoa(s.Due), itoa(s.Late), "-"})
		}
	}
	return table(stdout, []string{"TYPE", "SHARD", "STORED", "DUE", "LATE", "DELIVERED"}, rows)
}

// reminderGet shows one stored reminder: reminder TYPE ID NAME.
func reminderGet(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, pos, asJSON, err := adminCommand("reminder", args, 3, stderr)
	if err != nil {
		return err
	}
	var r admin.Reminder
	path := "/admin/v1/reminders/" + url.PathEscape(pos[0]) + "/" + url.PathEscape(pos[1]) + "/" + url.PathEscape(pos[2])
	data, err := c.get(ctx, path, &r)
	if err != nil {
		return err
	}
	if asJSON {
		return printJSON(stdout, data)
	}
	return table(stdout, []string{"TYPE", "ENTITY", "NAME", "SHARD", "DUE", "PERIOD", "COMMAND", "GENERATION"}, [][]string{{
		r.Type, r.EntityID, r.Name, r.Shard, r.Due.UTC().Format(time.RFC3339Nano), orDash(r.Period), r.Command, strconv.FormatUint(r.Generation, 10),
	}})
}
