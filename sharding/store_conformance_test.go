package sharding_test

import (
	"testing"

	"github.com/shoal-dev/shoal/cluster/lease/leasetest"
	"github.com/shoal-dev/shoal/sharding"
	"github.com/shoal-dev/shoal/sharding/shardingtest"
)

func TestMemoryCoordinatorStoreConformance(t *testing.T) {
	shardingtest.RunCoordinatorStore(t, func(_ *testing.T, clock *leasetest.Clock) sharding.CoordinatorStore {
		return sharding.NewMemoryCoordinatorStoreAt(clock.Now)
	})
}

func TestMemoryRememberStoreConformance(t *testing.T) {
	shardingtest.RunRememberStore(t, func(*testing.T) sharding.RememberStore {
		return sharding.NewMemoryRememberStore()
	})
}
