package memory_test

import (
	"testing"

	"github.com/shoal-dev/shoal/snapshot"
	"github.com/shoal-dev/shoal/snapshot/memory"
	"github.com/shoal-dev/shoal/snapshot/snapshottest"
)

func TestConformance(t *testing.T) {
	snapshottest.Run(t, func(t *testing.T) snapshot.Store { return memory.New() })
}
