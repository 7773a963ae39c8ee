package projection_test

import (
	"testing"

	"github.com/shoal-dev/shoal/projection"
	"github.com/shoal-dev/shoal/projection/projectiontest"
)

func TestMemoryStore(t *testing.T) {
	projectiontest.RunStore(t, func(*testing.T) projection.Store { return projection.NewMemoryStore() })
}

func TestMemoryControlStore(t *testing.T) {
	projectiontest.RunControlStore(t, func(*testing.T) projection.ControlStore { return projection.NewMemoryStore() })
}
