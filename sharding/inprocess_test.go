package sharding_test

import (
	"errors"
	"testing"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/sharding"
)

func TestInProcessClusterRefusesATakenNodeName(t *testing.T) {
	c := sharding.NewInProcessCluster()
	for i, want := range []error{nil, sharding.ErrNodeNameTaken} {
		sys, err := entity.NewSystem(entity.Config{NodeID: "a", Logger: quiet()})
		if err != nil {
			t.Fatal(err)
		}
		sh, err := c.Join(sys)
		if !errors.Is(err, want) {
			t.Fatalf("join %d: err %v, want %v", i, err, want)
		}
		if sh != nil {
			t.Cleanup(func() { _ = sh.Shutdown(t.Context()) })
		}
	}
}
