package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/node/admin"
)

// reminderNode is fakeNode firing the reminders of type "Payment".
type reminderNode struct{ *fakeNode }

func (reminderNode) Reminders(context.Context) ([]admin.ReminderType, error) {
	return []admin.ReminderType{{
		Type:   "Payment",
		Firing: admin.ReminderFiring{Shards: 2, Held: 3, Due: 1, Late: 1, Delivered: 7},
		Shards: []admin.ReminderShard{{Shard: "4", Stored: 10, Due: 1, Late: 1}, {Shard: "9", Stored: 2}},
	}}, nil
}

func (reminderNode) Reminder(_ context.Context, typ, id, name string) (admin.Reminder, error) {
	if typ != "Payment" || id != "p-1" || name != "timeout" {
		return admin.Reminder{}, fmt.Errorf("%w: %s|%s/%s", admin.ErrUnknownReminder, typ, id, name)
	}
	return admin.Reminder{Type: typ, EntityID: id, Name: name, Shard: "4", Due: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		Command: "payment.Timeout", Generation: 42}, nil
}

func startReminderNode(t *testing.T) string {
	srv := httptest.NewServer(admin.New(reminderNode{&fakeNode{}}, admin.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}))
	t.Cleanup(srv.Close)
	t.Setenv("SHOAL_ADMIN", "")
	t.Setenv("SHOAL_TOKEN", "")
	return srv.URL
}

func TestRemindersTable(t *testing.T) {
	url := startReminderNode(t)
	out, err := runCmd("reminders", "--admin", url)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"TYPE SHARD STORED DUE LATE DELIVERED",
		"Payment (this node) 3 1 1 7",
		"Payment 4 10 1 1 -",
		"Payment 9 2 0 0 -",
	}
	if got := lines(out); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("reminders table:\n%s", out)
	}
	out, err = runCmd("reminders", "--admin", url, "--json")
	if err != nil || !strings.Contains(out, `"delivered": 7`) {
		t.Fatalf("reminders --json: %v\n%s", err, out)
	}
}

func TestReminderShowsOneOrNotFound(t *testing.T) {
	url := startReminderNode(t)
	out, err := runCmd("reminder", "Payment", "p-1", "timeout", "--admin", url)
	if err != nil {
		t.Fatal(err)
	}
	if got := lines(out); len(got) != 2 || got[1] != "Payment p-1 timeout 4 2026-01-02T03:04:05Z - payment.Timeout 42" {
		t.Fatalf("reminder:\n%s", out)
	}
	_, err = runCmd("reminder", "Payment", "p-2", "timeout", "--admin", url)
	if ae, ok := errors.AsType[*APIError](err); !ok || ae.Status != 404 || ae.Code != admin.CodeUnknownReminder {
		t.Fatalf("unknown reminder: %v, want a 404 unknown_reminder", err)
	}
	if _, err := runCmd("reminder", "Payment", "p-1", "--admin", url); exitCode(err) != 2 {
		t.Fatalf("reminder without a name: %v, want a usage error", err)
	}
}
