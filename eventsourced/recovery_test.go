package eventsourced_test

import (
	"context"
	"slices"
	"testing"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/journal"
	"github.com/shoal-dev/shoal/journal/memory"
)

// blockingReplay holds the replay of one persistence id until its context
// ends, and reports that it ended.
type blockingReplay struct {
	journal.Journal
	pid              string
	started, stopped chan struct{}
}

func (j *blockingReplay) Replay(ctx context.Context, pid string, from, to uint64, fn func(journal.Event) error) error {
	if pid != j.pid {
		return j.Journal.Replay(ctx, pid, from, to, fn)
	}
	close(j.started)
	<-ctx.Done()
	close(j.stopped)
	return ctx.Err()
}

// A recovery whose entity stops is cancelled, and gives its turn to the
// next entity waiting to recover.
func TestStoppingDuringRecoveryCancelsItAndFreesItsTurn(t *testing.T) {
	j := &blockingReplay{Journal: memory.New(), pid: "List|stuck", started: make(chan struct{}), stopped: make(chan struct{})}
	seed(t, j.Journal, "List|next", added{Item: "kept"})
	sys, _ := entity.NewSystem(entity.Config{Codec: newRegistry(), Journal: j, Logger: quietLogger(), MaxConcurrentRecoveries: 1})
	props := &entity.Props[cmd]{Key: listKey, Create: listEntity(listOptions{})}
	stuck := entity.Spawn(sys, props, "stuck")
	<-j.started
	next := entity.Spawn(sys, props, "next") // waits for stuck's turn to end
	stuck.StopNow()
	<-stuck.Done()
	<-j.stopped // the replay's context was cancelled by the stop
	if got := askItems(t, next); !slices.Equal(got, []string{"kept"}) {
		t.Fatalf("items %q after recovery, want [kept]", got)
	}
}
