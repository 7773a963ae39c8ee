package main

import (
	"time"

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
