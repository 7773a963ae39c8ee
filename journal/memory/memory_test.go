package memory_test

import (
	"testing"

	"github.com/shoal-dev/shoal/journal"
	"github.com/shoal-dev/shoal/journal/journaltest"
	"github.com/shoal-dev/shoal/journal/memory"
)

func TestConformance(t *testing.T) {
	journaltest.Run(t, func(t *testing.T) journal.Journal { return memory.New() })
}
