package eventsourced_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/eventsourced"
	"github.com/shoal-dev/shoal/journal"
	"github.com/shoal-dev/shoal/journal/memory"
)

// unreachableJournal is a memory journal whose reads fail, as a journal
// does while its database restarts.
type unreachableJournal struct{ journal.Journal }

var errUnreachable = errors.New("journal unreachable")

func (unreachableJournal) Replay(context.Context, string, uint64, uint64, func(journal.Event) error) error {
	return errUnreachable
}

func (unreachableJournal) HighestSeqNr(context.Context, string) (uint64, error) {
	return 0, errUnreachable
}

// An ask that waits in the mailbox of an entity whose recovery fails (its
// journal unreachable) fails at once with entity.ErrUnavailable, and the
// cause: no answer can come from the stopped incarnation, and its caller
// must not wait for its deadline.
func TestAskOfAnEntityWhoseRecoveryFailsIsUnavailable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		j := unreachableJournal{memory.New()}
		sys, _ := entity.NewSystem(entity.Config{Codec: newRegistry(), Journal: j, Logger: quietLogger()})
		props := &entity.Props[cmd]{Key: listKey, Create: listEntity(listOptions{})}
		cell := entity.Spawn(sys, props, "e")
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		start := time.Now()
		_, err := entity.Ask(ctx, cell, func(r entity.ReplyTo[[]string]) cmd { return getItems{ReplyTo: r} })
		if !errors.Is(err, entity.ErrUnavailable) || !errors.Is(err, eventsourced.ErrRecoveryFailed) || !errors.Is(err, errUnreachable) {
			t.Fatalf("ask: %v, want ErrUnavailable caused by the failed recovery", err)
		}
		if waited := time.Since(start); waited != 0 {
			t.Fatalf("the ask failed after %v, want at once", waited)
		}
	})
}
