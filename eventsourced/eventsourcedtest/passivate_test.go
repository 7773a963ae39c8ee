package eventsourcedtest_test

import (
	"context"
	"strings"
	"testing"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/eventsourced"
	"github.com/shoal-dev/shoal/eventsourced/eventsourcedtest"
)

// A worker that defers its stop while it processes: a job started by work
// ends with a piped finished; a stop message that comes meanwhile is
// stashed and honoured once the job's result is stored.
type (
	workerCmd interface{ isWorkerCmd() }
	work      struct{}
	finished  struct{}
	goIdle    struct{} // asks the owner to passivate
	stopWork  struct{} // the stop message
	workerEv  interface{ isWorkerEv() }
	started   struct{}
	done      struct{}
	worker    struct{ Busy bool }
)

func (work) isWorkerCmd()     {}
func (finished) isWorkerCmd() {}
func (goIdle) isWorkerCmd()   {}
func (stopWork) isWorkerCmd() {}
func (started) isWorkerEv()   {}
func (done) isWorkerEv()      {}

var workerKey = entity.NewTypeKey[workerCmd]("Worker")

func newWorker(release <-chan struct{}) func(entity.Context[workerCmd]) entity.Behavior[workerCmd] {
	return func(ec entity.Context[workerCmd]) entity.Behavior[workerCmd] {
		return eventsourced.New(workerConfig(ec, release))
	}
}

func workerConfig(ec entity.Context[workerCmd], release <-chan struct{}) eventsourced.Config[workerCmd, workerEv, worker] {
	return eventsourced.Config[workerCmd, workerEv, worker]{
		PersistenceID: eventsourced.PersistenceIDOf(workerKey, ec.EntityID()),
		OnCommand: func(ctx eventsourced.CommandContext[workerCmd, workerEv, worker], s worker, c workerCmd) eventsourced.Effect[workerEv, worker] {
			switch c.(type) {
			case work:
				ctx.PipeToSelf(func(context.Context) workerCmd { <-release; return finished{} })
				return ctx.Persist(started{})
			case finished:
				return ctx.Persist(done{}).ThenUnstashAll()
			case goIdle:
				ctx.Passivate()
				return ctx.None()
			case stopWork:
				if s.Busy {
					return ctx.Stash()
				}
				return ctx.Stop()
			}
			return ctx.Unhandled()
		},
		OnEvent: func(_ eventsourced.Context[workerCmd], s worker, e workerEv) worker {
			_, s.Busy = e.(started)
			return s
		},
	}
}

func workerRegistry() *codec.Registry {
	r := codec.NewRegistry()
	codec.MustRegister[work](r, "work")
	codec.MustRegister[finished](r, "finished")
	codec.MustRegister[goIdle](r, "goIdle")
	codec.MustRegister[stopWork](r, "stopWork")
	codec.MustRegister[started](r, "started")
	codec.MustRegister[done](r, "done")
	codec.MustRegister[worker](r, "worker")
	return r
}

func TestPassivationSendsTheStopMessageWhichTheEntityMayDefer(t *testing.T) {
	release := make(chan struct{})
	kit := eventsourcedtest.New[workerCmd, workerEv, worker](t, workerKey, newWorker(release),
		eventsourcedtest.Options{Codec: workerRegistry(), StopMessage: stopWork{}})

	kit.RunCommand(work{})
	res := kit.RunCommand(goIdle{})
	if res.Stopped {
		t.Fatalf("the entity stopped while busy: the kit did not send it the stop message, which it would have stashed")
	}
	if !kit.Passivated() {
		t.Fatalf("Passivated() = false after the entity passivated")
	}
	close(release)
	<-kit.Cell().Done()
	if stopped, err := kit.Stopped(); !stopped || err != nil {
		t.Fatalf("Stopped() = %v, %v; want a normal stop once the job is done", stopped, err)
	}
	kit.Start()
	if s := kit.State(); s.Busy {
		t.Fatalf("recovered %+v: the job's done was not stored before the stop", s)
	}
}

func TestPassivationWithoutStopMessageStopsAtOnce(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	kit := eventsourcedtest.New[workerCmd, workerEv, worker](t, workerKey, newWorker(release),
		eventsourcedtest.Options{Codec: workerRegistry()})
	kit.RunCommand(work{})
	if res := kit.RunCommand(goIdle{}); !res.Stopped || res.Err != nil {
		t.Fatalf("RunCommand(goIdle) = stopped %v, err %v; want a normal stop at once", res.Stopped, res.Err)
	}
}

func TestStopMessageOfTheWrongTypeFailsTheTest(t *testing.T) {
	msg := expectFatal(t, func(tb testing.TB) {
		eventsourcedtest.New[workerCmd, workerEv, worker](tb, workerKey, newWorker(nil),
			eventsourcedtest.Options{Codec: workerRegistry(), StopMessage: "stop"})
	})
	if !strings.Contains(msg, "StopMessage") {
		t.Fatalf("a StopMessage that is not a command was accepted")
	}
}

func TestNewFromConfigInfersTheTypes(t *testing.T) {
	release := make(chan struct{})
	close(release)
	kit := eventsourcedtest.NewFromConfig(t, workerKey, func(ec entity.Context[workerCmd]) eventsourced.Config[workerCmd, workerEv, worker] {
		return workerConfig(ec, release)
	}, eventsourcedtest.Options{Codec: workerRegistry()})
	var _ *eventsourcedtest.Kit[workerCmd, workerEv, worker] = kit
	if res := kit.RunCommand(work{}); len(res.Events) != 1 || res.Events[0] != workerEv(started{}) {
		t.Fatalf("work: %+v", res)
	}
}
