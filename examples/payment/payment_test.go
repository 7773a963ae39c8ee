package main

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shoal-dev/shoal/entity"
)

// The original PaymentActor's idempotency rules (per tenant, client, shop and
// order: what a repeated or late Settle or Cancel gets in each state), one
// test per row, through the testkit. Every test runs in a synctest bubble:
// time is fake, and synctest.Wait lets the issuer call and its result finish.

func TestFirstSettleProcessedOnceLaterSettlesGetStoredSuccess(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, DefaultSettings())
		wantOK(t, f.answer(f.settle(aliceSettle)))
		wantEvents(t, f.events(), "SettlementAccepted", "SettlementSuccessConfirmed")
		if _, ok := f.kit.State().(Completed); !ok {
			t.Fatalf("state %T, want Completed", f.kit.State())
		}
		if f.passivated() {
			t.Fatal("first-time processing passivated; it should wait for the receive timeout")
		}
		// Amount and customer are not compared.
		other := aliceSettle
		other.Amount, other.CustomerID = 5, "bob"
		wantOK(t, f.answer(f.settle(other)))
		if !f.passivated() {
			t.Fatal("an idempotent reply should passivate at once")
		}
		wantOK(t, f.answer(f.settle(aliceSettle))) // recovered incarnation, same answer
		if auths, _ := f.issuer.calls(); auths != 1 {
			t.Fatalf("issuer called %d times, want 1", auths)
		}
		wantEvents(t, f.events(), "SettlementAccepted", "SettlementSuccessConfirmed")
	})
}

func TestFirstSettleFailureIsTheStoredOutcome(t *testing.T) {
	for _, tc := range []struct {
		name   string
		setup  func(*fixture)
		code   Code
		events []string
	}{
		{"issuer error code", func(f *fixture) { f.issuer.authCode = "E9999" }, CodeIssuingServiceServerError,
			[]string{"SettlementAccepted", "SettlementFailureConfirmed"}},
		{"issuer call failed", func(f *fixture) { f.issuer.authErr = TimeOut("failure cancel") }, CodeTimeOut,
			[]string{"SettlementAccepted", "SettlementFailureConfirmed"}},
		{"unexpected error", func(f *fixture) { f.issuer.authErr = errors.New("boom") }, CodeUnpredictable,
			[]string{"SettlementAccepted", "SettlementFailureConfirmed"}},
		{"no credential", func(f *fixture) { f.tables.Delete(aliceCredential) },
			CodeNotFound, []string{"SettlementAccepted", "SettlementAborted"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFixture(t, DefaultSettings())
				tc.setup(f)
				wantFailure(t, f.answer(f.settle(aliceSettle)), tc.code)
				wantEvents(t, f.events(), tc.events...)
				if f.passivated() {
					t.Fatal("first-time processing passivated; it should wait for the receive timeout")
				}
				// Fixing the cause changes nothing: the outcome is stored.
				f.issuer.authCode, f.issuer.authErr = "", nil
				cred, _ := testTables().PayCredential(context.Background(), aliceCredential)
				f.tables.Put(aliceCredential, cred)
				wantFailure(t, f.answer(f.settle(aliceSettle)), tc.code)
				if auths, _ := f.issuer.calls(); auths > 1 {
					t.Fatalf("issuer called %d times, want at most 1", auths)
				}
				if !f.passivated() {
					t.Fatal("an idempotent reply should passivate at once")
				}
				if got := f.state().(Failed).Failure.Code; got != tc.code {
					t.Fatalf("stored failure %s, want %s", got, tc.code)
				}
			})
		})
	}
}

func TestSettleWhileSettlingIsStashedThenAnswered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, DefaultSettings())
		f.issuer.Hold()
		first := f.settle(aliceSettle)
		second := f.settle(aliceSettle)
		f.noAnswer(first)
		f.noAnswer(second)
		f.issuer.Release()
		wantOK(t, f.answer(first))
		wantOK(t, f.answer(second))
		if auths, _ := f.issuer.calls(); auths != 1 {
			t.Fatalf("issuer called %d times, want 1", auths)
		}
	})
}

func TestSettleAfterTimeoutWhileSettlingFailsForever(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, DefaultSettings())
		f.issuer.Hold()
		first := f.settle(aliceSettle)
		time.Sleep(20 * time.Second)
		f.noAnswer(first) // nobody is answered when the timeout fires
		wantEvents(t, f.events(), "SettlementAccepted", "SettlementTimeoutDetected")
		f.issuer.Release()
		wantFailure(t, f.answer(f.settle(aliceSettle)), CodeUnpredictable)
		wantFailure(t, f.answer(f.settle(aliceSettle)), CodeUnpredictable)
	})
}

func TestCancelBeforeSettleIsNotFound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, DefaultSettings())
		wantFailure(t, f.answer(f.cancel(aliceCancel)), CodeNotFound)
		wantEvents(t, f.events())
		if !f.passivated() {
			t.Fatal("Cancel in WaitingForRequest should passivate")
		}
	})
}

func TestCancelWhileSettlingRunsAfterSuccess(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, DefaultSettings())
		f.issuer.Hold()
		settle := f.settle(aliceSettle)
		cancel := f.cancel(aliceCancel)
		f.noAnswer(cancel)
		f.issuer.Release()
		wantOK(t, f.answer(settle))
		wantOK(t, f.answer(cancel))
		wantEvents(t, f.events(), "SettlementAccepted", "SettlementSuccessConfirmed", "CancelAccepted", "CancelSuccessConfirmed")
	})
}

func TestCancelWhileSettlingFailsAfterFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, DefaultSettings())
		f.issuer.authCode = "E0001"
		f.issuer.Hold()
		settle := f.settle(aliceSettle)
		cancel := f.cancel(aliceCancel)
		f.issuer.Release()
		wantFailure(t, f.answer(settle), CodeIssuingServiceServerError)
		wantFailure(t, f.answer(cancel), CodeValidation)
	})
}

func TestCancelAfterSuccess(t *testing.T) {
	for _, tc := range []struct {
		name      string
		revCode   string
		revErr    error
		want      Code // "" for success
		state     string
		lastEvent string
	}{
		{"reversed", ErrCodeOK, nil, "", "Canceled", "CancelSuccessConfirmed"},
		{"TW005 already canceled", ErrCodeAlreadyCanceled, nil, CodeAlreadyCanceled, "Canceled", "CancelSuccessConfirmed"},
		{"issuer error code", "E0002", nil, CodeIssuingServiceServerError, "Completed", "CancelFailureConfirmed"},
		{"issuer unavailable", "", IssuingServiceUnavailable("failure cancel"), CodeIssuingServiceUnavailable, "Completed", "CancelFailureConfirmed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFixture(t, DefaultSettings())
				wantOK(t, f.answer(f.settle(aliceSettle)))
				f.issuer.revCode, f.issuer.revErr = tc.revCode, tc.revErr
				got := f.answer(f.cancel(aliceCancel))
				if tc.want == "" {
					wantOK(t, got)
				} else {
					wantFailure(t, got, tc.want)
				}
				if f.passivated() {
					t.Fatal("first-time processing passivated; it should wait for the receive timeout")
				}
				ev := f.events()
				if last := ev[len(ev)-1]; last != "payment."+tc.lastEvent {
					t.Fatalf("last event %s, want %s", last, tc.lastEvent)
				}
				s := f.state()
				if name := stateName(s); name != tc.state {
					t.Fatalf("state %s, want %s", name, tc.state)
				}
				// From Canceled a repeated cancel succeeds (even after TW005);
				// from Completed it runs the reversal again, which now succeeds.
				f.issuer.revCode, f.issuer.revErr = "", nil
				wantOK(t, f.answer(f.cancel(aliceCancel)))
				if _, ok := f.state().(Canceled); !ok {
					t.Fatalf("state %T after a second cancel", f.state())
				}
			})
		})
	}
}

func TestCancelAbortedWhenCredentialGoneStaysCompleted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, DefaultSettings())
		wantOK(t, f.answer(f.settle(aliceSettle)))
		f.tables.Delete(aliceCredential)
		wantFailure(t, f.answer(f.cancel(aliceCancel)), CodeNotFound)
		wantEvents(t, f.events(), "SettlementAccepted", "SettlementSuccessConfirmed", "CancelAccepted", "CancelAborted")
		if _, ok := f.state().(Completed); !ok {
			t.Fatalf("state %T, want Completed", f.state())
		}
	})
}

func TestCancelReversesTheOriginalAuthorization(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, DefaultSettings())
		wantOK(t, f.answer(f.settle(aliceSettle)))
		wantOK(t, f.answer(f.cancel(aliceCancel)))
		auth, rev := f.issuer.auths[0], f.issuer.revrs[0]
		if rev.MTI != MTIReversal || auth.MTI != MTIAuthorization {
			t.Fatalf("mti %s then %s", auth.MTI, rev.MTI)
		}
		if rev.OriginalPaymentID != auth.PaymentID || rev.PaymentID == auth.PaymentID ||
			rev.TransactionID == auth.TransactionID || rev.TranDateTime != auth.TranDateTime ||
			rev.AmountTran != "000000001000" || rev.PAN != auth.PAN {
			t.Fatalf("reversal %+v of %+v", rev, auth)
		}
	})
}

func TestCancelAfterCanceled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, DefaultSettings())
		wantOK(t, f.answer(f.settle(aliceSettle)))
		wantOK(t, f.answer(f.cancel(aliceCancel)))
		wantOK(t, f.answer(f.cancel(aliceCancel)))
		if !f.passivated() {
			t.Fatal("an idempotent reply should passivate at once")
		}
		wantFailure(t, f.answer(f.cancel(bobCancel)), CodeForbidden)
		if _, revs := f.issuer.calls(); revs != 1 {
			t.Fatalf("%d reversals, want 1", revs)
		}
	})
}

func TestSettleAfterCanceledIsInvalid(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, DefaultSettings())
		wantOK(t, f.answer(f.settle(aliceSettle)))
		wantOK(t, f.answer(f.cancel(aliceCancel)))
		wantFailure(t, f.answer(f.settle(aliceSettle)), CodeValidation)
		if !f.passivated() {
			t.Fatal("an idempotent reply should passivate at once")
		}
	})
}

func TestSettleAndCancelAfterFailed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, DefaultSettings())
		f.issuer.authCode = "E0003"
		wantFailure(t, f.answer(f.settle(aliceSettle)), CodeIssuingServiceServerError)
		wantFailure(t, f.answer(f.settle(aliceSettle)), CodeIssuingServiceServerError)
		wantFailure(t, f.answer(f.cancel(aliceCancel)), CodeValidation)
		if !f.passivated() {
			t.Fatal("an idempotent reply should passivate at once")
		}
	})
}

// A failed cancel makes the cancel requester the customer of Completed,
// as the original does; a later cancel by the payer is then Forbidden
// once Canceled by the requester.
func TestFailedCancelMakesTheRequesterTheCustomer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, DefaultSettings())
		wantOK(t, f.answer(f.settle(aliceSettle)))
		f.issuer.revCode = "E0004"
		wantFailure(t, f.answer(f.cancel(bobCancel)), CodeIssuingServiceServerError)
		if c := f.state().(Completed); c.CustomerID != "bob" || c.Credential.TerminalID != "T-alice" {
			t.Fatalf("Completed after bob's failed cancel: %+v", c)
		}
		f.issuer.revCode = ""
		wantOK(t, f.answer(f.cancel(bobCancel)))
		wantFailure(t, f.answer(f.cancel(aliceCancel)), CodeForbidden)
	})
}

// The original confirms to its at-least-once proxy everywhere except on
// Settle after Canceled and Cancel after Failed (README, "weaknesses").
func TestConfirmations(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, DefaultSettings())
		confirmed := func(build func(to entity.ReplyTo[Confirmed]) Command) bool {
			ref := f.ref()
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_, err := entity.Ask(ctx, ref, build)
			synctest.Wait()
			return err == nil
		}
		settle := func(to entity.ReplyTo[Confirmed]) Command { return Settle{SettleRequest: aliceSettle, ConfirmTo: to} }
		cancel := func(to entity.ReplyTo[Confirmed]) Command { return Cancel{CancelRequest: aliceCancel, ConfirmTo: to} }
		if !confirmed(cancel) {
			t.Fatal("Cancel not confirmed in WaitingForRequest")
		}
		if !confirmed(settle) || !confirmed(settle) {
			t.Fatal("Settle not confirmed in WaitingForRequest / Completed")
		}
		if !confirmed(cancel) || !confirmed(cancel) {
			t.Fatal("Cancel not confirmed in Completed / Canceled")
		}
		if confirmed(settle) {
			t.Fatal("Settle after Canceled confirmed; the original does not")
		}
	})
}

// In Failed, Settle is confirmed and Cancel is not (README, "weaknesses").
func TestConfirmationsWhenFailed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, DefaultSettings())
		f.issuer.authCode = "E0005"
		wantFailure(t, f.answer(f.settle(aliceSettle)), CodeIssuingServiceServerError)
		confirmed := func(build func(to entity.ReplyTo[Confirmed]) Command) bool {
			ref := f.ref()
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_, err := entity.Ask(ctx, ref, build)
			synctest.Wait()
			return err == nil
		}
		if !confirmed(func(to entity.ReplyTo[Confirmed]) Command { return Settle{SettleRequest: aliceSettle, ConfirmTo: to} }) {
			t.Fatal("Settle not confirmed in Failed")
		}
		if confirmed(func(to entity.ReplyTo[Confirmed]) Command { return Cancel{CancelRequest: aliceCancel, ConfirmTo: to} }) {
			t.Fatal("Cancel after Failed confirmed; the original does not")
		}
	})
}

// Settle and Cancel wait in the stash while Canceling, as while Settling,
// and are answered from the outcome: Canceled here. The first idempotent
// answer passivates, so this runs on sharding, whose StopActor comes after
// what was unstashed (the testkit's owner-less entity would stop at once).
func TestSettleAndCancelWhileCancelingAreStashed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newLocalNode(t, DefaultSettings())
		wantOK(t, <-n.settle(aliceSettle))
		n.issuer.Hold()
		first := n.cancel(aliceCancel)
		settle := n.settle(aliceSettle)
		again := n.cancel(aliceCancel)
		other := n.cancel(bobCancel)
		synctest.Wait()
		select {
		case r := <-settle:
			t.Fatalf("Settle answered while Canceling: %v", r)
		case r := <-again:
			t.Fatalf("Cancel answered while Canceling: %v", r)
		default:
		}
		n.issuer.Release()
		synctest.Wait()
		wantOK(t, <-first)
		wantFailure(t, <-settle, CodeValidation)
		wantOK(t, <-again)
		wantFailure(t, <-other, CodeForbidden)
		if _, revs := n.issuer.calls(); revs != 1 {
			t.Fatalf("%d reversals, want 1", revs)
		}
		if l := n.resident(); l != 0 {
			t.Fatalf("%d entities alive, want 0: idempotent answers passivate", l)
		}
	})
}

// The cancel events keep what the read model needs of the payment they
// cancel: the authorization's intranid (specificDealInfo) on success, its
// response (paymentResponse) on failure.
func TestCancelEventsReferToTheOriginalPayment(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, DefaultSettings())
		wantOK(t, f.answer(f.settle(aliceSettle)))
		paid := f.state().(Completed)
		if paid.Response.IntranID == "" {
			t.Fatal("no intranid in Completed")
		}
		f.issuer.revCode = "E0006"
		wantFailure(t, f.answer(f.cancel(aliceCancel)), CodeIssuingServiceServerError)
		f.issuer.revCode = ""
		wantOK(t, f.answer(f.cancel(aliceCancel)))
		evs := f.storedEvents()
		failed, ok := evs[3].(CancelFailureConfirmed)
		if !ok || failed.OriginalResponse != paid.Response || failed.OriginalRequest != paid.OriginalRequest {
			t.Fatalf("event 4: %+v, want a CancelFailureConfirmed of %+v", evs[3], paid)
		}
		succeeded, ok := evs[5].(CancelSuccessConfirmed)
		if !ok || succeeded.SpecificDealInfo != paid.Response.IntranID || succeeded.Response.IntranID == paid.Response.IntranID {
			t.Fatalf("event 6: %+v, want a CancelSuccessConfirmed of intranid %s", evs[5], paid.Response.IntranID)
		}
	})
}

func stateName(s State) string {
	switch s.(type) {
	case WaitingForRequest:
		return "WaitingForRequest"
	case Settling:
		return "Settling"
	case Completed:
		return "Completed"
	case Canceling:
		return "Canceling"
	case Canceled:
		return "Canceled"
	case Failed:
		return "Failed"
	}
	return "?"
}
