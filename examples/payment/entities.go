package main

import (
	"time"

	"github.com/shoal-dev/shoal/sharding"
)

// InitPayments starts the payment entities on sh with the original's
// sharding settings: 100 shards, StopActor as the stop message, no idle
// passivation by sharding (each entity passivates itself after its receive
// timeout). The shard waits for a stopping entity as long as a phase can
// last, so that passivation and hand-off never cut an issuer call short:
// an entity in Settling or Canceling stashes StopActor until its answer or
// its processing timeout. On a cluster, no shard is allocated before
// minMembers nodes host payments.
func InitPayments(sh *sharding.Sharding, p *Payments, minMembers int) (*sharding.Region[Command], error) {
	phase := p.Settings.AskTimeout + p.Settings.FailSafeMargin + 5*time.Second
	return sharding.Init(sh, sharding.Entity[Command]{
		Key:         TypeKey,
		Create:      p.Create,
		StopMessage: StopActor{},
		Settings: sharding.Settings{
			NumberOfShards:     100,
			PassivateIdleAfter: -1,
			StopTimeout:        phase,
			HandOffTimeout:     phase,
			MinMembers:         minMembers,
		},
	})
}

// residentEntities counts the payment entities running on this node.
func residentEntities(r *sharding.Region[Command]) int {
	n := 0
	for _, c := range r.Stats() {
		n += c
	}
	return n
}
