package main

import (
	"fmt"
	"sync"
	"time"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/eventsourced"
)

// TypeKey is the payment entity type (ec-house-money in the original).
var TypeKey = entity.NewTypeKey[Command]("ec-house-money")

// Settings are the entity's timeouts.
type Settings struct {
	// AskTimeout is how long a client waits for an answer. Default 15s.
	AskTimeout time.Duration
	// FailSafeMargin is how much longer than AskTimeout the entity waits for
	// the issuer before it gives up on a phase. Default 5s.
	FailSafeMargin time.Duration
	// ReceiveTimeout passivates an idle entity. Default 30s.
	ReceiveTimeout time.Duration
}

// DefaultSettings returns the original's timeouts.
func DefaultSettings() Settings {
	return Settings{AskTimeout: 15 * time.Second, FailSafeMargin: 5 * time.Second, ReceiveTimeout: 30 * time.Second}
}

// Payments creates payment entities: it holds what every incarnation shares.
type Payments struct {
	Settings    Settings
	Issuer      Issuer
	Credentials Credentials
	Sequences   Sequences
	// Activations, when set, records each incarnation's lifecycle.
	Activations *ActivationLog

	calls sync.WaitGroup // issuer calls in flight
}

// Create builds an incarnation of the payment whose entity id is ec.EntityID().
func (p *Payments) Create(ec entity.Context[Command]) entity.Behavior[Command] {
	key, err := ParseEntityID(ec.EntityID())
	if err != nil {
		ec.Log().Error("not a payment entity id; stopping", "err", err)
		return entity.Stopped[Command]()
	}
	// Idle entities passivate themselves (see timeout.go); every message but a
	// timer's (the processing timeout) resets it.
	ec.SetReceiveTimeout(p.Settings.ReceiveTimeout, ReceiveTimeout{})
	h := &handler{Payments: p, key: key}
	return eventsourced.New(eventsourced.Config[Command, Event, State]{
		// The entity id holds the tenant, so the persistence id does too.
		PersistenceID: eventsourced.PersistenceIDOf(TypeKey, ec.EntityID()),
		EmptyState:    WaitingForRequest{},
		OnCommand:     h.onCommand,
		OnEvent:       h.onEvent,
		// Every Settle and Cancel is answered, now or from its result.
		EnforcedReplies: true,
		OnSignal: func(ctx EventCtx, _ State, sig eventsourced.Signal) {
			p.Activations.Observe(TypeKey.Name(), ctx.EntityID(), sig)
		},
	})
}

// handler is one incarnation's view of Payments.
type handler struct {
	*Payments
	key OrderKey
}

type (
	// Ctx is the context command handlers get; its methods build effects.
	Ctx = eventsourced.CommandContext[Command, Event, State]
	// EventCtx is the context the event handler gets.
	EventCtx = eventsourced.Context[Command]
	// Effect is what command handlers return.
	Effect = eventsourced.Effect[Event, State]
)

// passivate asks the owner to stop the entity (stopSelfSafely in the
// original): the owner sends StopActor, which the current state decides on.
func passivate(ctx Ctx) Effect {
	return ctx.None().ThenRun(func(State) { ctx.Passivate() })
}

// replyAndPassivate answers a request idempotently, from the state, and
// passivates at once: nothing more is likely to happen to this payment.
func replyAndPassivate(ctx Ctx, to entity.ReplyTo[Response], r Response) Effect {
	return ctx.Reply(eventsourced.To(to, r)).ThenRun(func(State) { ctx.Passivate() })
}

// accept confirms a command to an at-least-once sender (accept() in the original).
func accept(ctx Ctx, to entity.ReplyTo[Confirmed]) {
	if !to.IsZero() {
		entity.Reply(ctx, to, Confirmed{})
	}
}

func (h *handler) onCommand(ctx Ctx, s State, c Command) Effect {
	switch s := s.(type) {
	case WaitingForRequest:
		return h.waiting(ctx, c)
	case Settling:
		return h.settling(ctx, s, c)
	case Completed:
		return h.completed(ctx, s, c)
	case Canceling:
		return h.canceling(ctx, s, c)
	case Canceled:
		return h.canceled(ctx, s, c)
	case Failed:
		return h.failed(ctx, s, c)
	}
	panic(fmt.Sprintf("payment: unknown state %T", s))
}

func (h *handler) waiting(ctx Ctx, c Command) Effect {
	switch c := c.(type) {
	case Settle:
		now := ctx.Clock().Now()
		return ctx.Persist(SettlementAccepted{TraceID: c.TraceID, Request: c.SettleRequest, AcceptedAt: now}).
			WithReminders(h.Settings.remindProcessingTimeout(ctx, h.Settings.processingTimeout(now))).
			ThenRun(func(State) {
				accept(ctx, c.ConfirmTo)
				h.authorize(ctx, c, now)
			}).
			ThenNoReply() // the SettlementResult replies, once the issuer has answered
	case Cancel:
		accept(ctx, c.ConfirmTo)
		return replyAndPassivate(ctx, c.ReplyTo, Rejected(NotFound("payment information")))
	case StopActor:
		return ctx.Stop()
	case ReceiveTimeout:
		return passivate(ctx)
	}
	return ctx.Unhandled()
}

func (h *handler) settling(ctx Ctx, s Settling, c Command) Effect {
	switch c := c.(type) {
	case SettlementResult:
		return h.settlementResult(ctx, s, c) // its event cancels the timer (timeout point 4)
	case ProcessingTimeout:
		if !c.Is(s.Timeout) {
			return ctx.Unhandled() // timeout point 2: not this phase's timeout
		}
		// timeout point 3: leave Settling (to Failed), passivate, and let what
		// waited in the stash see the new state. Nobody is answered: the
		// asker has given up FailSafeMargin ago.
		ctx.Log().Warn("settlement timed out", "trace_id", s.TraceID, "deadline", s.Timeout.Deadline)
		return ctx.Persist(SettlementTimeoutDetected{TraceID: s.TraceID}).
			WithReminders(forgetProcessingTimeout(ctx)).
			ThenRun(func(State) { ctx.Passivate() }).
			ThenNoReply().
			ThenUnstashAll()
	case Settle, Cancel:
		return ctx.Stash() // answered from the outcome, after it
	case StopActor:
		ctx.Log().Info("deferring stop until the issuer has answered", "trace_id", s.TraceID)
		return ctx.Stash()
	case ReceiveTimeout:
		return passivate(ctx) // the StopActor that follows is stashed
	}
	return ctx.Unhandled()
}

func (h *handler) settlementResult(ctx Ctx, s Settling, c SettlementResult) Effect {
	now := ctx.Clock().Now()
	var (
		ev  Event
		res Response
	)
	switch {
	case c.Aborted != nil || (c.Failure == nil && c.Response == nil):
		f := Unpredictable()
		if c.Aborted != nil {
			f = *c.Aborted
		}
		ev, res = SettlementAborted{TraceID: s.TraceID, Failure: f, At: now}, Rejected(f)
	case c.Failure != nil:
		ev = SettlementFailureConfirmed{TraceID: s.TraceID, Request: s.Request, Credential: c.Credential,
			IssuerRequest: c.Request, Failure: *c.Failure, At: now}
		res = Rejected(*c.Failure)
	case c.Response.ErrCode == ErrCodeOK:
		ev = SettlementSuccessConfirmed{TraceID: s.TraceID, Request: s.Request, Credential: c.Credential,
			IssuerRequest: c.Request, Response: *c.Response, At: now}
		res = Succeeded()
	default: // every other issuer code is an error; none is special
		f := IssuingServiceServerError(mtiName(MTIAuthorization), c.Response.ErrCode)
		ev = SettlementFailureConfirmed{TraceID: s.TraceID, Request: s.Request, Credential: c.Credential,
			IssuerRequest: c.Request, Response: c.Response, Failure: f, At: now}
		res = Rejected(f)
	}
	// First-time processing does not passivate: the entity stays until idle.
	return ctx.Persist(ev).WithReminders(forgetProcessingTimeout(ctx)).
		ThenReply(eventsourced.To(c.ReplyTo, res)).ThenUnstashAll()
}

func (h *handler) completed(ctx Ctx, s Completed, c Command) Effect {
	switch c := c.(type) {
	case Settle:
		// Idempotent: amount, customer and client are not compared.
		accept(ctx, c.ConfirmTo)
		return replyAndPassivate(ctx, c.ReplyTo, Succeeded())
	case Cancel:
		now := ctx.Clock().Now()
		return ctx.Persist(CancelAccepted{TraceID: c.TraceID, Request: c.CancelRequest, AcceptedAt: now}).
			WithReminders(h.Settings.remindProcessingTimeout(ctx, h.Settings.processingTimeout(now))).
			ThenRun(func(State) {
				accept(ctx, c.ConfirmTo)
				h.reverse(ctx, s, c)
			}).
			ThenNoReply() // the CancelResult replies
	case StopActor:
		return ctx.Stop()
	case ReceiveTimeout:
		return passivate(ctx)
	}
	return ctx.Unhandled()
}

func (h *handler) canceling(ctx Ctx, s Canceling, c Command) Effect {
	switch c := c.(type) {
	case CancelResult:
		return h.cancelResult(ctx, s, c) // its event cancels the timer (timeout point 4)
	case ProcessingTimeout:
		if !c.Is(s.Timeout) {
			return ctx.Unhandled() // timeout point 2
		}
		// timeout point 3: back to Completed, so the cancel can be retried.
		ctx.Log().Warn("cancel timed out", "trace_id", s.TraceID, "deadline", s.Timeout.Deadline)
		return ctx.Persist(CancelTimeoutDetected{TraceID: s.TraceID}).
			WithReminders(forgetProcessingTimeout(ctx)).
			ThenRun(func(State) { ctx.Passivate() }).
			ThenNoReply().
			ThenUnstashAll()
	case Settle, Cancel:
		return ctx.Stash()
	case StopActor:
		ctx.Log().Info("deferring stop until the issuer has answered", "trace_id", s.TraceID)
		return ctx.Stash()
	case ReceiveTimeout:
		return passivate(ctx)
	}
	return ctx.Unhandled()
}

func (h *handler) cancelResult(ctx Ctx, s Canceling, c CancelResult) Effect {
	now := ctx.Clock().Now()
	failed := func(resp *IssuerResponse, f Failure) (Event, Response) {
		return CancelFailureConfirmed{TraceID: s.TraceID, Request: s.Request, Credential: c.Credential,
			IssuerRequest: c.Request, Response: resp, Failure: f, OriginalResponse: s.Completed.Response,
			OriginalRequest: s.Completed.OriginalRequest, SaleDateTime: s.Completed.SaleDateTime, At: now}, Rejected(f)
	}
	succeeded := func(resp IssuerResponse) Event {
		return CancelSuccessConfirmed{TraceID: s.TraceID, Request: s.Request, Credential: c.Credential,
			IssuerRequest: c.Request, Response: resp, SpecificDealInfo: s.Completed.Response.IntranID,
			OriginalRequest: s.Completed.OriginalRequest, SaleDateTime: s.Completed.SaleDateTime, At: now}
	}
	var (
		ev  Event
		res Response
	)
	switch {
	case c.Aborted != nil || (c.Failure == nil && c.Response == nil):
		f := Unpredictable()
		if c.Aborted != nil {
			f = *c.Aborted
		}
		ev, res = CancelAborted{TraceID: s.TraceID}, Rejected(f)
	case c.Failure != nil:
		ev, res = failed(nil, *c.Failure)
	case c.Response.ErrCode == ErrCodeOK:
		ev, res = succeeded(*c.Response), Succeeded()
	case c.Response.ErrCode == ErrCodeAlreadyCanceled:
		// The issuer had already reversed it: the entity is Canceled, yet
		// this request fails with CODE-011 while later Cancels succeed
		// (original behaviour, README).
		ev, res = succeeded(*c.Response), Rejected(AlreadyCanceled())
	default:
		ev, res = failed(c.Response, IssuingServiceServerError(mtiName(MTIReversal), c.Response.ErrCode))
	}
	return ctx.Persist(ev).WithReminders(forgetProcessingTimeout(ctx)).
		ThenReply(eventsourced.To(c.ReplyTo, res)).ThenUnstashAll()
}

func (h *handler) canceled(ctx Ctx, s Canceled, c Command) Effect {
	switch c := c.(type) {
	case Cancel:
		accept(ctx, c.ConfirmTo)
		if c.CustomerID != s.CustomerID {
			return replyAndPassivate(ctx, c.ReplyTo, Rejected(Forbidden()))
		}
		return replyAndPassivate(ctx, c.ReplyTo, Succeeded())
	case Settle:
		// No accept: the original did not confirm here (README).
		return replyAndPassivate(ctx, c.ReplyTo, Rejected(invalidKey()))
	case StopActor:
		return ctx.Stop()
	case ReceiveTimeout:
		return passivate(ctx)
	}
	return ctx.Unhandled()
}

func (h *handler) failed(ctx Ctx, s Failed, c Command) Effect {
	switch c := c.(type) {
	case Settle:
		accept(ctx, c.ConfirmTo)
		return replyAndPassivate(ctx, c.ReplyTo, Rejected(s.Failure))
	case Cancel:
		// No accept: the original did not confirm here (README).
		return replyAndPassivate(ctx, c.ReplyTo, Rejected(invalidKey()))
	case StopActor:
		return ctx.Stop()
	case ReceiveTimeout:
		return passivate(ctx)
	}
	return ctx.Unhandled()
}

// onEvent applies an event. It runs for new events and again during
// replay, which is why the processing timeout is scheduled here.
func (h *handler) onEvent(ctx EventCtx, s State, e Event) State {
	switch s := s.(type) {
	case WaitingForRequest:
		if e, ok := e.(SettlementAccepted); ok {
			t := h.Settings.processingTimeout(e.AcceptedAt)
			scheduleProcessingTimeout(ctx, t) // timeout point 1
			return Settling{TraceID: e.TraceID, Request: e.Request, AcceptedAt: e.AcceptedAt, Timeout: t}
		}
	case Settling:
		cancelProcessingTimeout(ctx, s.Timeout) // timeout point 4: every event here leaves Settling
		switch e := e.(type) {
		case SettlementSuccessConfirmed:
			return Completed{Credential: e.Credential, CustomerID: s.Request.CustomerID, Response: e.Response,
				OriginalRequest: e.IssuerRequest, SaleDateTime: e.At}
		case SettlementFailureConfirmed:
			return Failed{Failure: e.Failure}
		case SettlementAborted:
			return Failed{Failure: e.Failure}
		case SettlementTimeoutDetected:
			return Failed{Failure: Unpredictable()}
		}
	case Completed:
		if e, ok := e.(CancelAccepted); ok {
			t := h.Settings.processingTimeout(e.AcceptedAt)
			scheduleProcessingTimeout(ctx, t) // timeout point 1
			return Canceling{TraceID: e.TraceID, Request: e.Request, Completed: s, AcceptedAt: e.AcceptedAt, Timeout: t}
		}
	case Canceling:
		// Every way back to Completed makes the cancel requester its
		// customer (original behaviour, README).
		back := s.Completed
		back.CustomerID = s.Request.CustomerID
		cancelProcessingTimeout(ctx, s.Timeout) // timeout point 4: every event here leaves Canceling
		switch e := e.(type) {
		case CancelSuccessConfirmed:
			return Canceled{CustomerID: e.Request.CustomerID, Response: e.Response}
		case CancelFailureConfirmed:
			back.Credential = e.Credential
			return back
		case CancelAborted, CancelTimeoutDetected:
			return back
		}
	}
	// Canceled and Failed persist nothing; any other pair is a bug.
	panic(fmt.Sprintf("payment: event %T cannot happen in state %T", e, s))
}
