package eventsourcedtest_test

import (
	"context"
	"testing"
	"testing/synctest"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/eventsourced"
	"github.com/shoal-dev/shoal/eventsourced/eventsourcedtest"
)

// A job whose work runs until its entity stops: left running after the
// test, it would keep a goroutine of the synctest bubble blocked.
func newLongPoller(ec entity.Context[workerCmd]) entity.Behavior[workerCmd] {
	return eventsourced.New(eventsourced.Config[workerCmd, workerEv, worker]{
		PersistenceID: eventsourced.PersistenceIDOf(workerKey, ec.EntityID()),
		OnCommand: func(ctx eventsourced.CommandContext[workerCmd, workerEv, worker], _ worker, c workerCmd) eventsourced.Effect[workerEv, worker] {
			ctx.PipeToSelf(func(life context.Context) workerCmd { <-life.Done(); return finished{} })
			return ctx.Persist(started{})
		},
		OnEvent: func(_ eventsourced.Context[workerCmd], s worker, _ workerEv) worker { return s },
	})
}

// Without the kit's own cleanup, synctest.Test panics here: "main bubble
// goroutine has exited but blocked goroutines remain".
func TestKitStopsItsEntityWhenTheTestEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var cell *entity.Cell[workerCmd]
		// Registered before the kit's, so it runs after it.
		t.Cleanup(func() {
			select {
			case <-cell.Done():
			default:
				t.Errorf("the entity still runs after the kit's cleanup")
			}
		})
		kit := eventsourcedtest.New[workerCmd, workerEv, worker](t, workerKey, newLongPoller,
			eventsourcedtest.Options{Codec: workerRegistry()})
		kit.RunCommand(work{})
		cell = kit.Cell()
	})
}
