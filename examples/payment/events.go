package main

import "time"

// Event is what a payment entity persists. Events hold data only: never a
// ReplyTo, which belongs to one request of one incarnation.
type Event interface{ isEvent() }

// SettlementAccepted: a first Settle arrived; the entity enters Settling.
type SettlementAccepted struct {
	TraceID    string
	Request    SettleRequest
	AcceptedAt time.Time // from the entity's clock; the processing timeout counts from it
}

// SettlementSuccessConfirmed: the issuer authorized the payment.
type SettlementSuccessConfirmed struct {
	TraceID       string
	Request       SettleRequest
	Credential    PayCredential
	IssuerRequest IssuerRequest
	Response      IssuerResponse
	At            time.Time
}

// SettlementFailureConfirmed: the issuer call failed or answered an error code.
type SettlementFailureConfirmed struct {
	TraceID       string
	Request       SettleRequest
	Credential    PayCredential
	IssuerRequest IssuerRequest
	Response      *IssuerResponse `json:",omitempty"` // nil when the call failed
	Failure       Failure
	At            time.Time
}

// SettlementAborted: the issuer was never called.
type SettlementAborted struct {
	TraceID string
	Failure Failure
	At      time.Time
}

// SettlementTimeoutDetected: the processing timeout ended Settling.
type SettlementTimeoutDetected struct{ TraceID string }

// CancelAccepted: a Cancel arrived in Completed; the entity enters Canceling.
type CancelAccepted struct {
	TraceID    string
	Request    CancelRequest
	AcceptedAt time.Time
}

// CancelSuccessConfirmed: the issuer reversed the payment (or said it
// already had: TW005).
type CancelSuccessConfirmed struct {
	TraceID       string
	Request       CancelRequest
	Credential    PayCredential
	IssuerRequest IssuerRequest
	Response      IssuerResponse
	// SpecificDealInfo is the reversed authorization's intranid
	// (specificDealInfo in the original).
	SpecificDealInfo string
	OriginalRequest  IssuerRequest
	SaleDateTime     time.Time
	At               time.Time
}

// CancelFailureConfirmed: the reversal failed; the entity is Completed again.
type CancelFailureConfirmed struct {
	TraceID       string
	Request       CancelRequest
	Credential    PayCredential // fresh from the lookup: Completed takes it
	IssuerRequest IssuerRequest
	Response      *IssuerResponse `json:",omitempty"`
	Failure       Failure
	// OriginalResponse is the issuer's answer to the authorization that
	// stays in force (paymentResponse in the original).
	OriginalResponse IssuerResponse
	OriginalRequest  IssuerRequest
	SaleDateTime     time.Time
	At               time.Time
}

// CancelAborted: the reversal was never sent.
type CancelAborted struct{ TraceID string }

// CancelTimeoutDetected: the processing timeout ended Canceling.
type CancelTimeoutDetected struct{ TraceID string }

func (SettlementAccepted) isEvent()         {}
func (SettlementSuccessConfirmed) isEvent() {}
func (SettlementFailureConfirmed) isEvent() {}
func (SettlementAborted) isEvent()          {}
func (SettlementTimeoutDetected) isEvent()  {}
func (CancelAccepted) isEvent()             {}
func (CancelSuccessConfirmed) isEvent()     {}
func (CancelFailureConfirmed) isEvent()     {}
func (CancelAborted) isEvent()              {}
func (CancelTimeoutDetected) isEvent()      {}
