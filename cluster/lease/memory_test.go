package lease_test

import (
	"testing"

	"github.com/shoal-dev/shoal/cluster/lease"
	"github.com/shoal-dev/shoal/cluster/lease/leasetest"
)

func TestMemoryStoreConformance(t *testing.T) {
	leasetest.Run(t, func(t *testing.T, clock *leasetest.Clock) lease.Store {
		return lease.NewMemoryStore(clock.Now)
	})
}
