package main

import "github.com/shoal-dev/shoal/entity/codec"

// Register binds the payment entity's commands, events and states to stable
// manifests: events and states are stored under them, commands cross nodes
// under them. Replies need no registration.
func Register(r *codec.Registry) {
	codec.MustRegister[Settle](r, "payment.Settle")
	codec.MustRegister[Cancel](r, "payment.Cancel")
	codec.MustRegister[StopActor](r, "payment.StopActor")
	codec.MustRegister[ReceiveTimeout](r, "payment.ReceiveTimeout")
	codec.MustRegister[ProcessingTimeout](r, "payment.ProcessingTimeout")
	codec.MustRegister[SettlementResult](r, "payment.SettlementResult")
	codec.MustRegister[CancelResult](r, "payment.CancelResult")

	codec.MustRegister[SettlementAccepted](r, "payment.SettlementAccepted")
	codec.MustRegister[SettlementSuccessConfirmed](r, "payment.SettlementSuccessConfirmed")
	codec.MustRegister[SettlementFailureConfirmed](r, "payment.SettlementFailureConfirmed")
	codec.MustRegister[SettlementAborted](r, "payment.SettlementAborted")
	codec.MustRegister[SettlementTimeoutDetected](r, "payment.SettlementTimeoutDetected")
	codec.MustRegister[CancelAccepted](r, "payment.CancelAccepted")
	codec.MustRegister[CancelSuccessConfirmed](r, "payment.CancelSuccessConfirmed")
	codec.MustRegister[CancelFailureConfirmed](r, "payment.CancelFailureConfirmed")
	codec.MustRegister[CancelAborted](r, "payment.CancelAborted")
	codec.MustRegister[CancelTimeoutDetected](r, "payment.CancelTimeoutDetected")

	codec.MustRegister[WaitingForRequest](r, "payment.WaitingForRequest")
	codec.MustRegister[Settling](r, "payment.Settling")
	codec.MustRegister[Completed](r, "payment.Completed")
	codec.MustRegister[Canceling](r, "payment.Canceling")
	codec.MustRegister[Canceled](r, "payment.Canceled")
	codec.MustRegister[Failed](r, "payment.Failed")
}
