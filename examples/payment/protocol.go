package main

import (
	"fmt"
	"time"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/timers/reminder"
)

// Command is what a payment entity accepts: a sealed set, switched on by type.
type Command interface{ isCommand() }

// SettleRequest is the data of a settlement request. Events carry it; the
// command adds the addresses to answer.
type SettleRequest struct {
	ClientID     int64
	CustomerID   string
	WalletShopID string
	OrderID      string
	Amount       int64
}

// CancelRequest is the data of a cancel request.
type CancelRequest struct {
	ClientID     int64
	CustomerID   string
	WalletShopID string
	OrderID      string
}

// Settle asks the entity to settle the order (authorization and sale at the issuer).
type Settle struct {
	SettleRequest
	TraceID string
	ReplyTo entity.ReplyTo[Response]
	// ConfirmTo, when set, receives Confirmed once the entity has accepted
	// the command: the original's at-least-once delivery proxy stops
	// redelivering on it. Shoal delivers at most once and the HTTP API asks
	// once, so the API leaves it unset; the entity still confirms where the
	// original did, and does not where the original did not (README).
	ConfirmTo entity.ReplyTo[Confirmed]
}

// Cancel asks the entity to reverse a completed settlement.
type Cancel struct {
	CancelRequest
	TraceID   string
	ReplyTo   entity.ReplyTo[Response]
	ConfirmTo entity.ReplyTo[Confirmed]
}

// StopActor is the entity type's stop message: its owner sends it to
// passivate the entity or to hand it off. It is stashed while a call to the
// issuer is in flight (see timeout.go).
type StopActor struct{}

// ReceiveTimeout is delivered after Settings.ReceiveTimeout without messages.
type ReceiveTimeout struct{}

// ProcessingTimeout is the message that ends a Settling or Canceling phase
// whose issuer call did not answer in time, sent by the entity's timer or by
// its durable reminder (see timeout.go). Deadline identifies the phase: only
// the timeout equal to the one in the state counts (timeout point 2). The
// Delivery is filled in when the reminder sent it, so that handling it
// acknowledges the reminder.
type ProcessingTimeout struct {
	Deadline time.Time
	reminder.Delivery
}

// SettlementResult is the outcome of the settlement's issuer call, delivered
// to the entity through PipeToSelf. Exactly one of Aborted, Failure and
// Response is set.
type SettlementResult struct {
	ReplyTo entity.ReplyTo[Response] // the Settle waiting for the outcome
	TraceID string
	// Aborted: the call was never made (no credential, no sequence number).
	Aborted *Failure `json:",omitempty"`
	// Credential and Request are what was sent to the issuer.
	Credential PayCredential
	Request    IssuerRequest
	// Failure: the call failed (status, timeout, failure-cancel).
	Failure *Failure `json:",omitempty"`
	// Response: the issuer answered; its ErrCode decides success.
	Response *IssuerResponse `json:",omitempty"`
}

// CancelResult is the outcome of the reversal's issuer call, as SettlementResult.
type CancelResult struct {
	ReplyTo    entity.ReplyTo[Response]
	TraceID    string
	Aborted    *Failure `json:",omitempty"`
	Credential PayCredential
	Request    IssuerRequest
	Failure    *Failure        `json:",omitempty"`
	Response   *IssuerResponse `json:",omitempty"`
}

func (Settle) isCommand()            {}
func (Cancel) isCommand()            {}
func (StopActor) isCommand()         {}
func (ReceiveTimeout) isCommand()    {}
func (ProcessingTimeout) isCommand() {}
func (SettlementResult) isCommand()  {}
func (CancelResult) isCommand()      {}

// Confirmed tells an at-least-once sender that its command was accepted.
type Confirmed struct{}

// Response answers Settle and Cancel: success when Failure is nil.
type Response struct {
	Failure *Failure `json:",omitempty"`
}

// Succeeded is the success response (SettlementSuccessResponse).
func Succeeded() Response { return Response{} }

// Rejected is a failure response (SettlementFailureResponse).
func Rejected(f Failure) Response { return Response{Failure: &f} }

// OK reports success.
func (r Response) OK() bool { return r.Failure == nil }

func (r Response) String() string {
	if r.OK() {
		return "success"
	}
	return "failure " + r.Failure.Error()
}

// Code is a client-facing error code; the HTTP API maps it to a status.
type Code string

// The error codes of the original (Message.scala).
const (
	CodeForbidden                 Code = "CODE-001"
	CodeNotFound                  Code = "CODE-002"
	CodeValidation                Code = "CODE-003"
	CodeTimeOut                   Code = "CODE-005"
	CodeIssuingServiceBadRequest  Code = "CODE-007"
	CodeIssuingServiceUnavailable Code = "CODE-008"
	CodeIssuingServiceServerError Code = "CODE-009"
	CodeIssuingServiceTimeout     Code = "CODE-010"
	CodeAlreadyCanceled           Code = "CODE-011"
	CodeUnpredictable             Code = "CODE-012"
)

// Failure is a business failure: what the client is told, and what the
// entity stores when a phase ends badly. It is an error, so the issuer
// client returns it and the entity tells it from unexpected errors.
type Failure struct {
	Code    Code
	Message string
}

func (f Failure) Error() string { return fmt.Sprintf("%s: %s", f.Code, f.Message) }

// The failures of the original, by message class.
func Forbidden() Failure { return Failure{CodeForbidden, "the request is not allowed"} }
func NotFound(resource string) Failure {
	return Failure{CodeNotFound, resource + " not found"}
}
func ValidationFailure(msg string) Failure { return Failure{CodeValidation, msg} }
func TimeOut(name string) Failure {
	return Failure{CodeTimeOut, "issuer did not answer in time: " + name}
}
func IssuingServiceBadRequest(name string) Failure {
	return Failure{CodeIssuingServiceBadRequest, "issuer refused the request: " + name}
}
func IssuingServiceUnavailable(name string) Failure {
	return Failure{CodeIssuingServiceUnavailable, "issuer unavailable: " + name}
}
func IssuingServiceServerError(name, errCode string) Failure {
	return Failure{CodeIssuingServiceServerError, fmt.Sprintf("issuer error %s: %s", errCode, name)}
}
func AlreadyCanceled() Failure {
	return Failure{CodeAlreadyCanceled, "the payment was already canceled at the issuer"}
}
func Unpredictable() Failure { return Failure{CodeUnpredictable, "unexpected error"} }

// invalidKey is the answer of a terminal state to a request it cannot take
// (the original's "walletShopId または orderId が不正です").
func invalidKey() Failure { return ValidationFailure("walletShopId or orderId is invalid") }
