package main

import (
	"time"

	"github.com/shoal-dev/shoal/eventsourced"
)

// The processing-timeout pattern (DESIGN §6; the implementation notes of
// the original). A phase that stashes everything while it waits for the
// issuer must end even if the answer never comes — after a crash the answer
// never comes, because the call ran in a side effect that replay does not
// repeat. Its four points, and where they are:
//
//  1. The event handler that enters the phase schedules the timeout with
//     the time left until the deadline, 0 when it has passed: replay runs
//     the event handler too, so recovery re-arms the timer, and an entity
//     recovered after its deadline times out at once.
//     → scheduleProcessingTimeout, called from onEvent for
//     SettlementAccepted and CancelAccepted.
//  2. Only the timeout stored in the state counts; others are stale (a
//     replayed earlier phase's, say) and unhandled.
//     → ProcessingTimeout.Is, in settling and canceling.
//  3. Handling it persists an event that leaves the phase, passivates, and
//     unstashes what waited.
//     → the ProcessingTimeout cases of settling and canceling.
//  4. When the answer arrives first, the timer is cancelled.
//     → cancelProcessingTimeout, on SettlementResult and CancelResult.

// processingTimeout is the timeout of a phase accepted at acceptedAt: the
// asker gives up after AskTimeout, and the entity FailSafeMargin later.
func (s Settings) processingTimeout(acceptedAt time.Time) ProcessingTimeout {
	return ProcessingTimeout{Deadline: acceptedAt.Add(s.AskTimeout + s.FailSafeMargin)}
}

// TimeLeft is the time until the deadline, never negative.
func (t ProcessingTimeout) TimeLeft(now time.Time) time.Duration {
	return max(t.Deadline.Sub(now), 0)
}

// Is reports whether t is the timeout o: the same deadline, whatever the
// time zone or monotonic reading a round trip through the journal dropped.
func (t ProcessingTimeout) Is(o ProcessingTimeout) bool { return t.Deadline.Equal(o.Deadline) }

// timerKey gives each phase its own timer, as the original keyed its timer
// by the message itself: a stale timer never replaces the current one.
func (t ProcessingTimeout) timerKey() string {
	return "processing-timeout " + t.Deadline.UTC().Format(time.RFC3339Nano)
}

// scheduleProcessingTimeout is point 1: call it from the event handler.
func scheduleProcessingTimeout(ctx eventsourced.Context[Command], t ProcessingTimeout) {
	ctx.Timers().StartSingleTimer(t.timerKey(), t, t.TimeLeft(ctx.Clock().Now()))
}

// cancelProcessingTimeout is point 4.
func cancelProcessingTimeout(ctx eventsourced.Context[Command], t ProcessingTimeout) {
	ctx.Timers().Cancel(t.timerKey())
}
