package eventsourced_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/eventsourced"
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

// A history longer than ReplayBatch is handed over in pages; every page,
// the last partial one included, is applied in order before commands run.
func TestRecoveryInPagesAppliesEveryEventInOrder(t *testing.T) {
	for _, n := range []int{0, 1, 3, 6, 7} {
		t.Run(fmt.Sprint(n, " events"), func(t *testing.T) {
			j := memory.New()
			var want []string
			for i := range n {
				item := fmt.Sprint("e", i+1)
				seed(t, j, "List|paged", added{Item: item})
				want = append(want, item)
			}
			rec := &recorder{}
			sys, _ := entity.NewSystem(entity.Config{Codec: newRegistry(), Journal: j, Logger: quietLogger()})
			cell := entity.Spawn(sys, &entity.Props[cmd]{Key: listKey, Create: listEntity(listOptions{rec: rec, replayBatch: 3})}, "paged")
			if got := askItems(t, cell); !slices.Equal(got, want) {
				t.Fatalf("items %q after recovery, want %q", got, want)
			}
			var completed []uint64
			for _, s := range rec.signals() {
				if rc, ok := s.(eventsourced.RecoveryCompleted); ok {
					completed = append(completed, rc.SeqNr)
				}
			}
			if !slices.Equal(completed, []uint64{uint64(n)}) {
				t.Fatalf("RecoveryCompleted at %v, want once at %d", completed, n)
			}
		})
	}
}

// On a journal that reads without IO (journal.ImmediateReader), an entity
// with a short history recovers as it starts: it takes no turn among
// MaxConcurrentRecoveries, so a recovery stuck on a slow journal does not
// hold it up.
func TestShortHistoryOnImmediateJournalRecoversWithoutATurn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memory.New()
		seed(t, mem, "List|quick", added{Item: "a"}, added{Item: "b"})
		slow := &blockingReplay{Journal: mem, pid: "List|stuck", started: make(chan struct{}), stopped: make(chan struct{})}
		sys, _ := entity.NewSystem(entity.Config{Codec: newRegistry(), Journal: mem, Logger: quietLogger(), MaxConcurrentRecoveries: 1})
		stuck := entity.Spawn(sys, &entity.Props[cmd]{Key: listKey, Create: listEntity(listOptions{journal: slow})}, "stuck")
		<-slow.started // holds the only turn
		quick := entity.Spawn(sys, &entity.Props[cmd]{Key: listKey, Create: listEntity(listOptions{})}, "quick")
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		items, err := entity.Ask(ctx, quick, func(r entity.ReplyTo[[]string]) cmd { return getItems{ReplyTo: r} })
		if err != nil || !slices.Equal(items, []string{"a", "b"}) {
			t.Fatalf("quick entity answered %q, %v while another recovery held the turn; want [a b]", items, err)
		}
		stuck.StopNow()
		<-stuck.Done()
	})
}
