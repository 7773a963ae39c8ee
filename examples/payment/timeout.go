package main

import (
	"time"

	"github.com/shoal-dev/shoal/eventsourced"
	"github.com/shoal-dev/shoal/timers"
)

// The processing-timeout pattern (docs/DESIGN.md, "The processing-timeout
// pattern"; the implementation notes of the original). A phase that stashes
// everything while it waits for the issuer must end even if the answer never
// comes — after a crash the answer never comes, because the call ran in a
// side effect that replay does not repeat. Its four points (marked "timeout
// point n" in the code), and where they are:
//
//  1. The event handler that enters the phase starts a timer at the phase's
//     deadline: replay runs the event handler too, so recovery re-arms the
//     timer, and an entity recovered after its deadline times out at once
//     (a deadline timer fires at once when its deadline has passed).
//     → scheduleProcessingTimeout, called from onEvent for
//     SettlementAccepted and CancelAccepted.
//  2. Only the timeout stored in the state counts; any other is stale and
//     unhandled.
//     → ProcessingTimeout.Is, in settling and canceling.
//  3. Handling it persists an event that leaves the phase, passivates, and
//     unstashes what waited.
//     → the ProcessingTimeout cases of settling and canceling.
//  4. When the work completes, the timer is cancelled: by the event handler,
//     on every event that leaves the phase, so that replaying a finished
//     phase cancels the timer its first event re-armed (a stale timer is
//     never even delivered).
//     → cancelProcessingTimeout, called from onEvent.
//
// A timer lives in the entity's memory: it comes back only when something
// recovers the entity. A payment whose node died while it waited for the
// issuer would stay Settling (or Canceling) until the next request for it,
// and the stash of that request would wait out the deadline first. So the
// phase also sets a durable reminder (docs/DESIGN.md, "Durable reminders")
// in the transaction of the event that enters it, and cancels it with
// every event that leaves it: the reminder is stored with the events, and
// the node that hosts the payment's shard (after a crash, the next home
// once the dead node's lease expired) starts the entity and delivers the
// same ProcessingTimeout, with no request. Whichever of timer and reminder
// comes first ends the phase; the other finds the phase gone and is
// unhandled (and, for the reminder, acknowledged).
//     → remindProcessingTimeout, on the effects persisting SettlementAccepted
//       and CancelAccepted; forgetProcessingTimeout, on the effects of
//       points 3 and 4.

// processingTimeout is the timeout of a phase accepted at acceptedAt: the
// asker gives up after AskTimeout, and the entity FailSafeMargin later.
func (s Settings) processingTimeout(acceptedAt time.Time) ProcessingTimeout {
	return ProcessingTimeout{Deadline: acceptedAt.Add(s.AskTimeout + s.FailSafeMargin)}
}

// Is reports whether t is the timeout o: the same deadline, whatever the
// time zone or monotonic reading a round trip through the journal dropped.
func (t ProcessingTimeout) Is(o ProcessingTimeout) bool { return t.Deadline.Equal(o.Deadline) }

// timerKey gives each phase its own timer, as the original keyed its timer
// by the message itself: one phase's timer never replaces another's.
func (t ProcessingTimeout) timerKey() string {
	return timers.DeadlineKey("processing-timeout", t.Deadline)
}

// scheduleProcessingTimeout is point 1: call it from the event handler.
func scheduleProcessingTimeout(ctx EventCtx, t ProcessingTimeout) {
	ctx.Timers().StartSingleTimerAt(t.timerKey(), t, t.Deadline)
}

// cancelProcessingTimeout is point 4: call it from the event handler.
func cancelProcessingTimeout(ctx EventCtx, t ProcessingTimeout) {
	ctx.Timers().Cancel(t.timerKey())
}

// processingReminder names the phase's durable reminder: one phase runs at
// a time, so one name serves them all (setting it again replaces it).
const processingReminder = "processing-timeout"

// remindProcessingTimeout is the durable reminder of a phase that ends at
// t: due after the same AskTimeout+FailSafeMargin, counted on the
// database's clock from the write of the event that enters the phase.
func (s Settings) remindProcessingTimeout(ctx Ctx, t ProcessingTimeout) eventsourced.ReminderChange {
	return ctx.RemindAfter(processingReminder, s.AskTimeout+s.FailSafeMargin, t)
}

// forgetProcessingTimeout cancels the phase's durable reminder, with the
// event that leaves the phase.
func forgetProcessingTimeout(ctx Ctx) eventsourced.ReminderChange {
	return ctx.CancelReminder(processingReminder)
}
