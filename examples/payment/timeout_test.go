package main

import (
	"reflect"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/eventsourced/eventsourcedtest"
)

// The four points of docs/DESIGN.md, "The processing-timeout pattern", one
// test each, plus recovery. The issuer is held, so the entity stays in
// Settling or Canceling until its timeout; time is synctest's.

// Point 1: the event handler starts a timer at the deadline.
func TestTimeoutPoint1ScheduledFromEventHandlerAtTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, DefaultSettings())
		f.issuer.Hold()
		f.settle(aliceSettle)
		synctest.Wait()
		s := f.kit.State().(Settling)
		if want := s.AcceptedAt.Add(20 * time.Second); !s.Timeout.Deadline.Equal(want) {
			t.Fatalf("deadline %v, want accepted + ask timeout + margin = %v", s.Timeout.Deadline, want)
		}
		if !f.timerActive(s.Timeout) {
			t.Fatal("processing timeout not scheduled")
		}
		time.Sleep(20*time.Second - time.Nanosecond)
		synctest.Wait()
		if _, ok := f.kit.State().(Settling); !ok {
			t.Fatalf("left Settling before the deadline: %T", f.kit.State())
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		wantEvents(t, f.events(), "SettlementAccepted", "SettlementTimeoutDetected")
	})
}

// Point 2: only the timeout stored in the state is handled.
func TestTimeoutPoint2OnlyTheStatesTimeoutCounts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, DefaultSettings())
		f.issuer.Hold()
		f.settle(aliceSettle)
		synctest.Wait()
		s := f.kit.State().(Settling)
		for _, stale := range []ProcessingTimeout{
			{Deadline: s.Timeout.Deadline.Add(-time.Minute)},
			{Deadline: s.Timeout.Deadline.Add(time.Nanosecond)},
		} {
			f.kit.RunCommand(stale)
			wantEvents(t, f.events(), "SettlementAccepted")
		}
		if _, ok := f.kit.State().(Settling); !ok {
			t.Fatalf("state %T after stale timeouts", f.kit.State())
		}
		// The same deadline, as it comes back from the journal (another
		// location, no monotonic reading), is the state's.
		same := ProcessingTimeout{Deadline: s.Timeout.Deadline.In(time.FixedZone("JST", 9*3600))}
		f.kit.RunCommand(same)
		wantEvents(t, f.events(), "SettlementAccepted", "SettlementTimeoutDetected")
	})
}

// Point 4 as recovery needs it: replaying a settlement and a later cancel
// re-arms the settlement's timer (SettlementAccepted's event handler runs
// again), and replaying SettlementSuccessConfirmed cancels it, so no stale
// timeout is delivered and Canceling runs to its own deadline.
func TestTimeoutPoint4ReplayedResultCancelsThePhasesTimer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, DefaultSettings())
		wantOK(t, f.answer(f.settle(aliceSettle)))
		time.Sleep(time.Minute) // past the settlement's deadline
		f.issuer.Hold()
		f.cancel(aliceCancel)
		synctest.Wait()
		dead := f.kit.System().DeadLetters()
		f.kit.Restart()
		synctest.Wait()
		c, ok := f.kit.State().(Canceling)
		if !ok {
			t.Fatalf("state %T after recovery, want Canceling", f.kit.State())
		}
		// Replaying SettlementSuccessConfirmed cancelled the timer that
		// replaying SettlementAccepted re-armed (point 4 in the event
		// handler), so no stale timeout was even delivered.
		if n := f.kit.System().DeadLetters() - dead; n != 0 {
			t.Fatalf("%d unhandled messages after recovery, want 0 (a stale timeout was delivered)", n)
		}
		time.Sleep(time.Until(c.Timeout.Deadline))
		synctest.Wait()
		wantEvents(t, f.events(), "SettlementAccepted", "SettlementSuccessConfirmed", "CancelAccepted", "CancelTimeoutDetected")
	})
}

// Point 3: handling the timeout persists a leaving event, passivates, and
// unstashes. Passivation needs an owner (the testkit has none and would
// stop at once, dropping the stash), so this runs on sharding.
func TestTimeoutPoint3LeavesPassivatesUnstashes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newLocalNode(t, DefaultSettings())
		n.issuer.Hold()
		first := n.settle(aliceSettle)
		second := n.settle(aliceSettle) // stashed
		cancel := n.cancel(aliceCancel) // stashed
		time.Sleep(20 * time.Second)
		synctest.Wait()
		wantEvents(t, n.events(), "SettlementAccepted", "SettlementTimeoutDetected")
		select {
		case r := <-first:
			t.Fatalf("the timed-out request was answered: %v", r)
		default:
		}
		wantFailure(t, <-second, CodeUnpredictable)
		wantFailure(t, <-cancel, CodeValidation)
		if l := n.resident(); l != 0 {
			t.Fatalf("%d entities alive, want 0 (passivated)", l)
		}
		n.issuer.Release()
	})
}

// Point 3 for a cancel: back to Completed, where a new cancel can run.
func TestTimeoutPoint3CancelTimeoutReturnsToCompleted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, DefaultSettings())
		wantOK(t, f.answer(f.settle(aliceSettle)))
		f.issuer.Hold()
		f.noAnswer(f.cancel(aliceCancel))
		time.Sleep(20 * time.Second)
		synctest.Wait()
		if !f.passivated() {
			t.Fatal("timeout did not passivate")
		}
		f.issuer.Release()
		if _, ok := f.state().(Completed); !ok {
			t.Fatalf("state %T, want Completed", f.state())
		}
		wantOK(t, f.answer(f.cancel(aliceCancel)))
	})
}

// Point 4: the result cancels the timer.
func TestTimeoutPoint4CancelledWhenTheResultArrives(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, DefaultSettings())
		f.issuer.Hold()
		answer := f.settle(aliceSettle)
		synctest.Wait()
		s := f.kit.State().(Settling)
		if !f.timerActive(s.Timeout) {
			t.Fatal("processing timeout not scheduled")
		}
		f.issuer.Release()
		wantOK(t, f.answer(answer))
		if f.timerActive(s.Timeout) {
			t.Fatal("processing timeout still scheduled after the result")
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		wantEvents(t, f.events(), "SettlementAccepted", "SettlementSuccessConfirmed")
	})
}

// Point 4 for a cancel: the CancelResult cancels the cancel's timer.
func TestTimeoutPoint4CancelingTimerCancelledByTheResult(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, DefaultSettings())
		wantOK(t, f.answer(f.settle(aliceSettle)))
		time.Sleep(time.Second) // another deadline, so another timer than the settlement's
		f.issuer.Hold()
		answer := f.cancel(aliceCancel)
		c := f.kit.State().(Canceling)
		if !f.timerActive(c.Timeout) {
			t.Fatal("processing timeout not scheduled for the cancel")
		}
		f.issuer.Release()
		wantOK(t, f.answer(answer))
		if f.timerActive(c.Timeout) {
			t.Fatal("processing timeout still scheduled after the cancel's result")
		}
	})
}

// Outside Settling and Canceling, results and processing timeouts are
// unhandled: nothing stored, nobody answered, the state unchanged. That is
// the fate of a result that comes after its phase timed out.
func TestResultsAndTimeoutsOutsideAPhaseAreUnhandled(t *testing.T) {
	for _, tc := range []struct {
		state string
		reach func(*fixture)
	}{
		{"WaitingForRequest", func(*fixture) {}},
		{"Completed", func(f *fixture) { wantOK(t, f.answer(f.settle(aliceSettle))) }},
		{"Canceled", func(f *fixture) {
			wantOK(t, f.answer(f.settle(aliceSettle)))
			wantOK(t, f.answer(f.cancel(aliceCancel)))
		}},
		{"Failed", func(f *fixture) {
			f.issuer.authCode = "E0007"
			wantFailure(t, f.answer(f.settle(aliceSettle)), CodeIssuingServiceServerError)
		}},
	} {
		t.Run(tc.state, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFixture(t, DefaultSettings())
				tc.reach(f)
				before := f.state()
				if name := stateName(before); name != tc.state {
					t.Fatalf("state %s, want %s", name, tc.state)
				}
				ok := &IssuerResponse{IntranID: "late", ErrCode: ErrCodeOK}
				for _, build := range []func(entity.ReplyTo[Response]) Command{
					func(to entity.ReplyTo[Response]) Command { return SettlementResult{ReplyTo: to, Response: ok} },
					func(to entity.ReplyTo[Response]) Command { return CancelResult{ReplyTo: to, Response: ok} },
					func(entity.ReplyTo[Response]) Command {
						return ProcessingTimeout{Deadline: time.Now().Add(20 * time.Second)}
					},
				} {
					stored := len(f.events())
					res := eventsourcedtest.RunCommandWithReply(f.kit, build)
					if res.Replied || len(f.events()) != stored || res.Stopped || !reflect.DeepEqual(res.State, before) {
						t.Fatalf("%T in %s: replied %v, events %v, stopped %v, state %+v",
							build(entity.ReplyTo[Response]{}), tc.state, res.Replied, f.events(), res.Stopped, res.State)
					}
				}
			})
		})
	}
}

// Recovery: the node stops while Settling and the entity comes back after
// its deadline: the re-armed timeout fires at once and it leaves Settling.
func TestRecoveryAfterTheDeadlineTimesOutAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, DefaultSettings())
		f.issuer.Hold()
		f.settle(aliceSettle)
		synctest.Wait()
		f.kit.Stop() // the node dies; the issuer call is lost
		time.Sleep(time.Hour)
		start := time.Now()
		f.kit.Start()
		synctest.Wait()
		if time.Since(start) != 0 {
			t.Fatalf("timeout took %v after recovery, want 0", time.Since(start))
		}
		wantEvents(t, f.events(), "SettlementAccepted", "SettlementTimeoutDetected")
		wantFailure(t, f.answer(f.settle(aliceSettle)), CodeUnpredictable)
	})
}

// Recovery before the deadline waits only for the time left.
func TestRecoveryBeforeTheDeadlineWaitsForTheRest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, DefaultSettings())
		f.issuer.Hold()
		f.settle(aliceSettle)
		synctest.Wait()
		time.Sleep(5 * time.Second)
		f.kit.Restart()
		time.Sleep(15*time.Second - time.Nanosecond)
		synctest.Wait()
		if _, ok := f.kit.State().(Settling); !ok {
			t.Fatalf("state %T before the deadline", f.kit.State())
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		wantEvents(t, f.events(), "SettlementAccepted", "SettlementTimeoutDetected")
	})
}

// StopActor is stashed while Settling and honoured once the result is in.
func TestStopActorStashedWhileSettling(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newLocalNode(t, DefaultSettings())
		n.issuer.Hold()
		answer := n.settle(aliceSettle)
		synctest.Wait()
		if err := n.ref().Tell(StopActor{}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if l := n.resident(); l != 1 {
			t.Fatalf("entity stopped while Settling (%d alive)", l)
		}
		n.issuer.Release()
		synctest.Wait()
		wantOK(t, <-answer)
		if l := n.resident(); l != 0 {
			t.Fatalf("entity not stopped after the result (%d alive)", l)
		}
		wantEvents(t, n.events(), "SettlementAccepted", "SettlementSuccessConfirmed")
	})
}

// StopActor is stashed while Canceling too; Shutdown waits for it.
func TestShutdownWaitsForCanceling(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newLocalNode(t, DefaultSettings())
		wantOK(t, <-n.settle(aliceSettle))
		n.issuer.Hold()
		answer := n.cancel(aliceCancel)
		synctest.Wait()
		done := make(chan error, 1)
		go func() { done <- n.sharding.Shutdown(t.Context()) }()
		synctest.Wait()
		select {
		case err := <-done:
			t.Fatalf("Shutdown returned while Canceling: %v", err)
		default:
		}
		n.issuer.Release()
		synctest.Wait()
		wantOK(t, <-answer)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		wantEvents(t, n.events(), "SettlementAccepted", "SettlementSuccessConfirmed", "CancelAccepted", "CancelSuccessConfirmed")
	})
}

// The receive timeout passivates an idle entity through StopActor.
func TestReceiveTimeoutPassivates(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newLocalNode(t, DefaultSettings())
		wantOK(t, <-n.settle(aliceSettle))
		time.Sleep(30*time.Second - time.Nanosecond)
		synctest.Wait()
		if l := n.resident(); l != 1 {
			t.Fatalf("passivated before 30s idle (%d alive)", l)
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if l := n.resident(); l != 0 {
			t.Fatalf("not passivated after 30s idle (%d alive)", l)
		}
		wantOK(t, <-n.settle(aliceSettle)) // a new incarnation answers
	})
}

// A receive timeout while Settling passivates too, but the StopActor it
// brings is stashed until the phase ends.
func TestReceiveTimeoutWhileSettlingWaitsForThePhase(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		settings := DefaultSettings()
		settings.ReceiveTimeout = 5 * time.Second
		n := newLocalNode(t, settings)
		n.issuer.Hold()
		answer := n.settle(aliceSettle)
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if l := n.resident(); l != 1 {
			t.Fatalf("entity stopped while Settling (%d alive)", l)
		}
		n.issuer.Release()
		synctest.Wait()
		wantOK(t, <-answer)
		if l := n.resident(); l != 0 {
			t.Fatalf("stashed StopActor not honoured (%d alive)", l)
		}
	})
}

// Mail that arrives while an entity passivates goes to the next incarnation.
func TestMailDuringPassivationReachesTheNextIncarnation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newLocalNode(t, DefaultSettings())
		n.issuer.Hold()
		first := n.settle(aliceSettle)
		synctest.Wait()
		ref := n.ref()
		if err := ref.Tell(ReceiveTimeout{}); err != nil { // passivate: StopActor is stashed
			t.Fatal(err)
		}
		synctest.Wait()
		later := n.settle(aliceSettle) // buffered by the owner, not the entity
		n.issuer.Release()
		synctest.Wait()
		wantOK(t, <-first)
		wantOK(t, <-later)
	})
}

// A call to the issuer, once sent, runs its own protocol to the end even
// when its entity stops first. Here the processing timeout (20s) ends
// Settling while the issuer client still waits for the hanging issuer (its
// response timeout is 30s); the entity is Failed and gone, yet at 30s the
// authorization's failure-cancel goes out, so that the issuer voids what
// it may have done. Its result finds nobody.
func TestIssuerCallOutlivesItsEntity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sim := NewSimulator()
		sim.SetRules(Rule{MTI: MTIAuthorization, Reaction: Reaction{Hang: true}})
		f := newFixtureWith(t, DefaultSettings(), simulatedIssuer(sim, func(c *IssuerClientConfig) {
			c.ResponseTimeout = 30 * time.Second
		}))
		answer := f.settle(aliceSettle)
		time.Sleep(20 * time.Second)
		synctest.Wait()
		wantEvents(t, f.events(), "SettlementAccepted", "SettlementTimeoutDetected")
		if !f.passivated() {
			t.Fatal("the processing timeout did not passivate")
		}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if got := mtis(sim.Received()); !slices.Equal(got, []string{MTIAuthorization, MTIAuthorizationFailure}) {
			t.Fatalf("issuer received %v, want the authorization and its failure-cancel", got)
		}
		f.noAnswer(answer)
		wantEvents(t, f.events(), "SettlementAccepted", "SettlementTimeoutDetected")
	})
}
