package sharding_test

import (
	"testing"

	"github.com/shoal-dev/shoal/sharding"
	"github.com/shoal-dev/shoal/sharding/shardingtest"
)

func TestMemoryCoordinatorStoreConformance(t *testing.T) {
	shardingtest.RunCoordinatorStore(t, func(*testing.T) sharding.CoordinatorStore {
		return sharding.NewMemoryCoordinatorStore()
	})
}

func TestMemoryRememberStoreConformance(t *testing.T) {
	shardingtest.RunRememberStore(t, func(*testing.T) sharding.RememberStore {
		return sharding.NewMemoryRememberStore()
	})
}
