package eventsourced_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/eventsourced"
	"github.com/shoal-dev/shoal/internal/runtime"
	"github.com/shoal-dev/shoal/journal"
	"github.com/shoal-dev/shoal/journal/memory"
)

// unreachableJournal is a memory journal whose reads fail, as a journal
// does while its database restarts; with a gate, a replay fails only once
// the gate is closed.
type unreachableJournal struct {
	journal.Journal
	gate chan struct{}
}

var errUnreachable = errors.New("journal unreachable")

func (j unreachableJournal) Replay(context.Context, string, uint64, uint64, func(journal.Event) error) error {
	if j.gate != nil {
		<-j.gate
	}
	return errUnreachable
}

func (unreachableJournal) HighestSeqNr(context.Context, string) (uint64, error) {
	return 0, errUnreachable
}

// An ask that waits in the mailbox of an entity whose recovery fails (its
// journal unreachable) fails at once with runtime.ErrUnavailable, and the
// cause: no answer can come from the stopped incarnation, and its caller
// must not wait for its deadline.
func TestAskOfAnEntityWhoseRecoveryFailsIsUnavailable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// The ask waits in the mailbox while the replay hangs, then fails.
		gate := make(chan struct{})
		cell := spawnUnreachable(unreachableJournal{memory.New(), gate})
		asked := make(chan error, 1)
		go func() { asked <- askItemsOf(cell) }()
		synctest.Wait()
		start := time.Now()
		close(gate)
		wantUnavailable(t, <-asked)
		if waited := time.Since(start); waited != 0 {
			t.Fatalf("the ask failed after %v, want at once", waited)
		}
	})
}

// An ask sent after the entity already stopped for a failed recovery fails
// the same way, not only as "stopped".
func TestAskAfterAFailedRecoveryIsUnavailable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cell := spawnUnreachable(unreachableJournal{Journal: memory.New()})
		synctest.Wait() // the recovery failed and the entity stopped
		wantUnavailable(t, askItemsOf(cell))
	})
}

func spawnUnreachable(j unreachableJournal) *entity.Cell[cmd] {
	sys, _ := entity.NewSystem(entity.Config{Codec: newRegistry(), Journal: j, Logger: quietLogger()})
	return entity.Spawn(sys, &entity.Props[cmd]{Key: listKey, Create: listEntity(listOptions{})}, "e")
}

func askItemsOf(cell *entity.Cell[cmd]) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	_, err := entity.Ask(ctx, cell, func(r entity.ReplyTo[[]string]) cmd { return getItems{ReplyTo: r} })
	return err
}

func wantUnavailable(t *testing.T, err error) {
	t.Helper()
	if !errors.Is(err, runtime.ErrUnavailable) || !errors.Is(err, eventsourced.ErrRecoveryFailed) || !errors.Is(err, errUnreachable) {
		t.Fatalf("ask: %v, want ErrUnavailable caused by the failed recovery", err)
	}
}
