package memory_test

import (
	"testing"

	"github.com/shoal-dev/shoal/timers/reminder"
	"github.com/shoal-dev/shoal/timers/reminder/memory"
	"github.com/shoal-dev/shoal/timers/reminder/remindertest"
)

func TestConformance(t *testing.T) {
	remindertest.Run(t, func(t *testing.T) reminder.Store { return memory.New() })
}
