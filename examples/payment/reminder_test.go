package main

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shoal-dev/shoal/timers/reminder"
)

// processingReminderKey is the test payment's processing-timeout reminder.
var processingReminderKey = reminder.Key{EntityType: TypeKey.Name(), EntityID: testKey.EntityID(), Name: processingReminder}

func (n *localNode) processingReminder() (reminder.Reminder, bool) {
	n.t.Helper()
	r, ok, err := n.reminders.Get(context.Background(), processingReminderKey)
	if err != nil {
		n.t.Fatal(err)
	}
	return r, ok
}

// A payment waits for the issuer when its node dies: the in-memory timer
// dies with it. The next node, started on the same stores and asked
// nothing, fires the phase's durable reminder: the payment times out there,
// once, with no second issuer call, and the reminder is gone.
func TestProcessingTimeoutFiresOnTheNextNodeWithoutARequest(t *testing.T) {
	for _, phase := range []string{"settling", "canceling"} {
		t.Run(phase, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				j, store := remindingJournal()
				a := newLocalNodeOn(t, DefaultSettings(), j, store)
				want := []string{"SettlementAccepted", "SettlementTimeoutDetected"}
				if phase == "canceling" {
					wantOK(t, <-a.settle(aliceSettle))
					want = []string{"SettlementAccepted", "SettlementSuccessConfirmed", "CancelAccepted", "CancelTimeoutDetected"}
				}
				a.issuer.Hold()
				if phase == "settling" {
					a.settle(aliceSettle)
				} else {
					a.cancel(aliceCancel)
				}
				synctest.Wait()
				r, ok := a.processingReminder()
				if !ok {
					t.Fatal("no processing-timeout reminder stored with the event that entered the phase")
				}
				if r.Manifest != "payment.ProcessingTimeout" {
					t.Fatalf("reminder carries %q, want payment.ProcessingTimeout", r.Manifest)
				}
				a.kill()
				time.Sleep(time.Hour) // nothing runs the payment: it stays in its phase
				synctest.Wait()
				wantEvents(t, a.events(), want[:len(want)-1]...)

				b := newLocalNodeOn(t, DefaultSettings(), j, store)
				time.Sleep(time.Minute) // a load of b's firing; no request
				synctest.Wait()
				wantEvents(t, b.events(), want...)
				if _, ok := b.processingReminder(); ok {
					t.Fatal("the reminder is still stored after the timeout was handled")
				}
				if auths, revs := b.issuer.calls(); auths+revs != 0 {
					t.Fatalf("the next node called the issuer %d times, want none", auths+revs)
				}
				time.Sleep(time.Hour) // no second delivery
				synctest.Wait()
				wantEvents(t, b.events(), want...)
			})
		})
	}
}

// Every event that leaves the phase cancels its reminder with it: after an
// answered settlement and cancel nothing is stored.
func TestProcessingReminderCancelledWhenThePhaseEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newLocalNode(t, DefaultSettings())
		wantOK(t, <-n.settle(aliceSettle))
		if r, ok := n.processingReminder(); ok {
			t.Fatalf("reminder %+v stored after the settlement answered", r)
		}
		wantOK(t, <-n.cancel(aliceCancel))
		if r, ok := n.processingReminder(); ok {
			t.Fatalf("reminder %+v stored after the cancel answered", r)
		}
	})
}

// A phase the live entity's timer ends cancels the reminder too: nothing
// fires later.
func TestProcessingReminderCancelledByTheTimersTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newLocalNode(t, DefaultSettings())
		n.issuer.Hold()
		n.settle(aliceSettle)
		time.Sleep(time.Minute)
		synctest.Wait()
		wantEvents(t, n.events(), "SettlementAccepted", "SettlementTimeoutDetected")
		if r, ok := n.processingReminder(); ok {
			t.Fatalf("reminder %+v stored after the phase timed out", r)
		}
	})
}
