package main

import "time"

// State is the entity's state: one of the six types below. The command
// handler switches on it first, then on the command, like the original's
// per-state applyCommand.
type State interface{ isState() }

// WaitingForRequest is the empty state: no Settle yet.
type WaitingForRequest struct{}

// Settling waits for the issuer's answer to the authorization. Settle,
// Cancel and StopActor wait in the stash until it ends.
type Settling struct {
	TraceID    string
	Request    SettleRequest
	AcceptedAt time.Time
	// Timeout is the processing timeout scheduled when Settling began;
	// only a ProcessingTimeout equal to it ends Settling (timeout point 2).
	Timeout ProcessingTimeout
}

// Completed is a settled payment; it can be canceled.
type Completed struct {
	Credential PayCredential
	// CustomerID is the payer, until a cancel attempt fails: then it is the
	// cancel requester's (as in the original, see README).
	CustomerID      string
	Response        IssuerResponse
	OriginalRequest IssuerRequest // the authorization, which a reversal refers to
	SaleDateTime    time.Time
}

// Canceling waits for the issuer's answer to the reversal; like Settling it
// stashes what arrives meanwhile.
type Canceling struct {
	TraceID    string
	Request    CancelRequest
	Completed  Completed // what the entity goes back to if the reversal fails
	AcceptedAt time.Time
	Timeout    ProcessingTimeout
}

// Canceled is terminal: the payment was reversed.
type Canceled struct {
	CustomerID string // the customer whose cancel succeeded
	Response   IssuerResponse
}

// Failed is terminal: the settlement failed with Failure, which every later
// Settle gets.
type Failed struct{ Failure Failure }

func (WaitingForRequest) isState() {}
func (Settling) isState()          {}
func (Completed) isState()         {}
func (Canceling) isState()         {}
func (Canceled) isState()          {}
func (Failed) isState()            {}
