package eventsourced_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/eventsourced"
	"github.com/shoal-dev/shoal/eventsourced/eventsourcedtest"
)

// The job entity is the processing-timeout pattern (docs/DESIGN.md, "The
// processing-timeout pattern"): the event handler that enters "processing"
// starts a timer at the deadline, so recovery restores it, and only the
// timeout stored in the state counts.
type jobCmd interface{ isJobCmd() }

type (
	startJob   struct{ Timeout time.Duration }
	jobTimeout struct{ Deadline time.Time }
	finishJob  struct{}
)

func (startJob) isJobCmd()   {}
func (jobTimeout) isJobCmd() {}
func (finishJob) isJobCmd()  {}

type jobEvent interface{ isJobEvent() }

type (
	jobStarted  struct{ Deadline time.Time }
	jobTimedOut struct{}
	jobFinished struct{}
)

func (jobStarted) isJobEvent()  {}
func (jobTimedOut) isJobEvent() {}
func (jobFinished) isJobEvent() {}

type jobState struct {
	Phase    string
	Deadline time.Time
}

var jobKey = entity.NewTypeKey[jobCmd]("Job")

const timeoutKey = "processing-timeout"

func newJob(ec entity.Context[jobCmd]) entity.Behavior[jobCmd] {
	type eff = eventsourced.Effect[jobEvent, jobState]
	return eventsourced.New(eventsourced.Config[jobCmd, jobEvent, jobState]{
		PersistenceID: eventsourced.PersistenceIDOf(jobKey, ec.EntityID()),
		OnCommand: func(ctx eventsourced.CommandContext[jobCmd, jobEvent, jobState], s jobState, c jobCmd) eff {
			switch c := c.(type) {
			case startJob:
				if s.Phase == "" {
					return ctx.Persist(jobStarted{Deadline: ctx.Clock().Now().Add(c.Timeout)})
				}
			case jobTimeout:
				if s.Phase == "processing" && c.Deadline.Equal(s.Deadline) {
					return ctx.Persist(jobTimedOut{})
				}
			case finishJob:
				if s.Phase == "processing" {
					return ctx.Persist(jobFinished{}).
						ThenRun(func(jobState) { ctx.Timers().Cancel(timeoutKey) })
				}
			}
			return ctx.Unhandled()
		},
		OnEvent: func(ctx eventsourced.Context[jobCmd], s jobState, e jobEvent) jobState {
			switch e := e.(type) {
			case jobStarted:
				ctx.Timers().StartSingleTimerAt(timeoutKey, jobTimeout{Deadline: e.Deadline}, e.Deadline)
				return jobState{Phase: "processing", Deadline: e.Deadline}
			case jobTimedOut:
				s.Phase = "timed out"
			case jobFinished:
				s.Phase = "finished"
			}
			return s
		},
	})
}

func jobRegistry() *codec.Registry {
	r := codec.NewRegistry()
	codec.MustRegister[startJob](r, "startJob")
	codec.MustRegister[jobTimeout](r, "jobTimeout")
	codec.MustRegister[finishJob](r, "finishJob")
	codec.MustRegister[jobStarted](r, "jobStarted")
	codec.MustRegister[jobTimedOut](r, "jobTimedOut")
	codec.MustRegister[jobFinished](r, "jobFinished")
	codec.MustRegister[jobState](r, "jobState")
	return r
}

func newJobKit(t *testing.T) *eventsourcedtest.Kit[jobCmd, jobEvent, jobState] {
	return eventsourcedtest.New[jobCmd, jobEvent, jobState](t, jobKey, newJob, eventsourcedtest.Options{Codec: jobRegistry()})
}

func TestProcessingTimeoutFires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		kit := newJobKit(t)
		kit.RunCommand(startJob{Timeout: 10 * time.Second})
		time.Sleep(9 * time.Second)
		synctest.Wait()
		if p := kit.State().Phase; p != "processing" {
			t.Fatalf("phase after 9s = %q", p)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if p := kit.State().Phase; p != "timed out" {
			t.Fatalf("phase after 10s = %q", p)
		}
	})
}

func TestProcessingTimeoutCancelledWhenWorkCompletes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		kit := newJobKit(t)
		kit.RunCommand(startJob{Timeout: 10 * time.Second})
		kit.RunCommand(finishJob{})
		time.Sleep(time.Minute)
		synctest.Wait()
		if p := kit.State().Phase; p != "finished" {
			t.Fatalf("phase = %q", p)
		}
		if n := len(kit.Journal().Written()); n != 2 {
			t.Fatalf("%d events, want 2 (no timeout after finishing)", n)
		}
	})
}

func TestProcessingTimeoutRestoredByRecovery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		kit := newJobKit(t)
		kit.RunCommand(startJob{Timeout: 10 * time.Second})
		kit.Stop()              // the node dies while processing
		time.Sleep(time.Minute) // it comes back after the deadline
		kit.Start()
		synctest.Wait() // the restored timer fires at once: its deadline has passed
		if p := kit.State().Phase; p != "timed out" {
			t.Fatalf("phase after recovery past the deadline = %q", p)
		}
	})
}

func TestStaleTimeoutIsIgnored(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		kit := newJobKit(t)
		kit.RunCommand(startJob{Timeout: 10 * time.Second})
		res := kit.RunCommand(jobTimeout{Deadline: time.Now().Add(-time.Hour)})
		if len(res.Events) != 0 || res.State.Phase != "processing" {
			t.Fatalf("a timeout for another deadline was handled: %+v", res)
		}
	})
}
