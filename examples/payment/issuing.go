package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// The issuer calls run outside the entity: PipeToSelf runs the work on its
// own goroutine and delivers its result as a command, SettlementResult or
// CancelResult, which the entity handles like any other message. The work
// must not touch the entity's state, so everything it needs is copied in.
//
// PipeToSelf cancels the work's context when the incarnation stops. Until
// the request to the issuer is sent that is right: nothing has happened
// yet. Once it is sent, the issuer may act on it, and only the client's own
// protocol (its response timeout, then a failure-cancel) settles what it
// did; so the issuer call gets a context that the entity's stop does not
// cancel (issuerContext), as the original's Future outlived its actor. If
// the entity has stopped by then (its processing timeout, a shutdown past
// its deadline), the result finds nobody and is dropped.

// authorize looks up the credential, draws the ids, calls the issuer and
// sends the outcome back as a SettlementResult (executePayment).
func (h *handler) authorize(ctx Ctx, c Settle, acceptedAt time.Time) {
	log := ctx.Log() // taken here: Log is not for other goroutines
	tenant := h.key.Tenant
	h.calls.Add(1)
	ctx.PipeToSelf(func(work context.Context) Command {
		defer h.calls.Done()
		res := SettlementResult{ReplyTo: c.ReplyTo, TraceID: c.TraceID}
		cred, err := h.Credentials.PayCredential(work, CredentialKey{
			Tenant: tenant, CustomerID: c.CustomerID, ClientID: c.ClientID, WalletShopID: c.WalletShopID})
		if err != nil {
			return res.aborted(log, err)
		}
		txID, err := h.Sequences.NextTransactionID(work, tenant)
		if err != nil {
			return res.aborted(log, err)
		}
		paymentID, err := h.Sequences.NextPaymentID(work, tenant, c.CustomerID)
		if err != nil {
			return res.aborted(log, err)
		}
		res.Credential = cred
		res.Request = IssuerRequest{
			MTI:           MTIAuthorization,
			PAN:           cred.HousePAN,
			AmountTran:    zeroPad(c.Amount, 12),
			TranDateTime:  acceptedAt.Format("0102150405"),
			TransactionID: txID,
			AcceptorID:    padRight(cred.MemberStoreID, 15),
			PaymentID:     paymentID,
			TerminalID:    cred.TerminalID,
		}
		resp, err := h.Issuer.Authorize(issuerContext(work), res.Request)
		if err != nil {
			f := failureOf(log, err)
			res.Failure = &f
			return res
		}
		res.Response = &resp
		return res
	})
}

// reverse is authorize for a cancel (executeCancel): a reversal of the
// original authorization, with a fresh credential and fresh ids.
func (h *handler) reverse(ctx Ctx, s Completed, c Cancel) {
	log := ctx.Log()
	tenant := h.key.Tenant
	h.calls.Add(1)
	ctx.PipeToSelf(func(work context.Context) Command {
		defer h.calls.Done()
		res := CancelResult{ReplyTo: c.ReplyTo, TraceID: c.TraceID}
		// The customer is the state's, not the requester's: the original
		// never checks that they are the same.
		cred, err := h.Credentials.PayCredential(work, CredentialKey{
			Tenant: tenant, CustomerID: s.CustomerID, ClientID: c.ClientID, WalletShopID: c.WalletShopID})
		if err != nil {
			return res.aborted(log, err)
		}
		paymentID, err := h.Sequences.NextPaymentID(work, tenant, s.CustomerID)
		if err != nil {
			return res.aborted(log, err)
		}
		txID, err := h.Sequences.NextTransactionID(work, tenant)
		if err != nil {
			return res.aborted(log, err)
		}
		res.Credential = cred
		res.Request = s.OriginalRequest
		res.Request.MTI = MTIReversal
		res.Request.TransactionID = txID
		res.Request.PaymentID = paymentID
		res.Request.TerminalID = cred.TerminalID
		res.Request.OriginalPaymentID = s.OriginalRequest.PaymentID
		resp, err := h.Issuer.Reverse(issuerContext(work), res.Request)
		if err != nil {
			f := failureOf(log, err)
			res.Failure = &f
			return res
		}
		res.Response = &resp
		return res
	})
}

// WaitForIssuerCalls waits until no issuer call is in flight, or ctx ends:
// a call outlives its entity, so a node waits for it before it closes the
// database and the issuer client it uses.
func (p *Payments) WaitForIssuerCalls(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		p.calls.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		select {
		case <-done: // none in flight: ctx ending too says nothing
			return nil
		default:
			return fmt.Errorf("payment: issuer calls still in flight: %w", ctx.Err())
		}
	}
}

// issuerContext is the context of a call to the issuer: work's values, not
// its cancellation. The IssuerClient bounds the call by its own timeouts.
func issuerContext(work context.Context) context.Context { return context.WithoutCancel(work) }

// failureOf keeps a business Failure and turns anything else into
// Unpredictable (handleException in the original).
func failureOf(log *slog.Logger, err error) Failure {
	if f, ok := errors.AsType[Failure](err); ok {
		return f
	}
	log.Warn("unexpected error calling the issuer", "err", err)
	return Unpredictable()
}

func (r SettlementResult) aborted(log *slog.Logger, err error) Command {
	f := failureOf(log, err)
	r.Aborted = &f
	return r
}

func (r CancelResult) aborted(log *slog.Logger, err error) Command {
	f := failureOf(log, err)
	r.Aborted = &f
	return r
}
