package admin

import (
	"context"
	"errors"
	"net/http"
	"time"
)

// Reminders (docs/DESIGN.md, "Durable reminders"): GET /admin/v1/reminders
// lists, per entity type, what this node's firing holds and did, and what
// the store holds per shard for the whole cluster (stored, due, late);
// GET /admin/v1/reminders/{type}/{id}/{name} shows one reminder.

// ErrUnknownReminder is returned (wrapped) by a ReminderSource for a
// reminder that is not stored; the handler maps it to 404.
var ErrUnknownReminder = errors.New("admin: unknown reminder")

// CodeUnknownReminder is the code of ErrUnknownReminder's 404.
const CodeUnknownReminder Code = "unknown_reminder"

// ReminderSource is a Source whose node fires reminders; with a Source
// that is none, the list is empty and every reminder unknown.
type ReminderSource interface {
	Reminders(ctx context.Context) ([]ReminderType, error)
	Reminder(ctx context.Context, typeName, entityID, name string) (Reminder, error)
}

// ReminderList is the body of GET /admin/v1/reminders.
type ReminderList struct {
	Types []ReminderType `json:"types"`
}

// ReminderType is one entity type's reminders.
type ReminderType struct {
	Type string `json:"type"`
	// Firing is this node's part: the shards it fires for, the reminders
	// it holds (due within its window), those of them due and late, and
	// the deliveries it sent.
	Firing ReminderFiring `json:"firing"`
	// Shards is every shard with stored reminders, cluster-wide, from the
	// store.
	Shards []ReminderShard `json:"shards"`
}

// ReminderFiring is what one node's firing of a type holds and did.
type ReminderFiring struct {
	Shards    int `json:"shards"`
	Held      int `json:"held"`
	Due       int `json:"due"`
	Late      int `json:"late"`
	Delivered int `json:"delivered"`
}

// ReminderShard counts one shard's stored reminders: all, due now, and
// due longer ago than the lateness threshold.
type ReminderShard struct {
	Shard  string `json:"shard"`
	Stored int    `json:"stored"`
	Due    int    `json:"due"`
	Late   int    `json:"late"`
}

// Reminder is one stored reminder.
type Reminder struct {
	Type       string    `json:"type"`
	EntityID   string    `json:"entityId"`
	Name       string    `json:"name"`
	Shard      string    `json:"shard"`
	Due        time.Time `json:"due"`
	Period     string    `json:"period,omitempty"`
	Command    string    `json:"command"` // its manifest
	Generation uint64    `json:"generation"`
}

func (h *handler) reminderRoutes(mux *http.ServeMux) {
	mux.Handle("GET /admin/v1/reminders", h.read(h.reminders))
	mux.Handle("GET /admin/v1/reminders/{type}/{id}/{name}", h.read(h.reminder))
}

func (h *handler) reminders(w http.ResponseWriter, r *http.Request) {
	out := ReminderList{Types: []ReminderType{}}
	if rs, ok := h.src.(ReminderSource); ok {
		list, err := rs.Reminders(r.Context())
		if err != nil {
			h.fail(w, r, err)
			return
		}
		if list != nil {
			out.Types = list
		}
	}
	writeJSON(w, http.StatusOK, out)
}

func (h *handler) reminder(w http.ResponseWriter, r *http.Request) {
	rs, ok := h.src.(ReminderSource)
	if !ok {
		writeError(w, http.StatusNotFound, CodeUnknownReminder, ErrUnknownReminder)
		return
	}
	rem, err := rs.Reminder(r.Context(), r.PathValue("type"), r.PathValue("id"), r.PathValue("name"))
	switch {
	case errors.Is(err, ErrUnknownReminder):
		writeError(w, http.StatusNotFound, CodeUnknownReminder, err)
	case err != nil:
		h.fail(w, r, err)
	default:
		writeJSON(w, http.StatusOK, rem)
	}
}
