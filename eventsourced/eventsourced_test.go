package eventsourced_test

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/eventsourced"
	"github.com/shoal-dev/shoal/eventsourced/eventsourcedtest"
	"github.com/shoal-dev/shoal/journal"
	"github.com/shoal-dev/shoal/journal/memory"
	"github.com/shoal-dev/shoal/snapshot"
	"github.com/shoal-dev/shoal/stash"
)

func newKit(t *testing.T, o listOptions) *eventsourcedtest.Kit[cmd, event, state] {
	t.Helper()
	return eventsourcedtest.New[cmd, event, state](t, listKey, listEntity(o), eventsourcedtest.Options{Codec: newRegistry()})
}

func TestPersistAppliesEventsAndRunsSideEffectsWithNewState(t *testing.T) {
	rec := &recorder{}
	kit := newKit(t, listOptions{rec: rec})
	res := kit.RunCommand(add{Item: "a"})
	if !reflect.DeepEqual(res.Events, []event{added{Item: "a"}}) || itemsOf(res.State) != "a" {
		t.Fatalf("result = %+v", res)
	}
	kit.RunCommand(add{Item: "b"})
	if got := rec.notes(); !slices.Equal(got, []string{"ran with a", "ran with a,b"}) {
		t.Fatalf("side effects saw %q", got)
	}
}

func TestPersistManyIsAtomicWithConsecutiveSeqNrs(t *testing.T) {
	kit := newKit(t, listOptions{})
	res := kit.RunCommand(addMany{Items: []string{"a", "b", "c"}})
	if len(res.Events) != 3 || itemsOf(res.State) != "a,b,c" {
		t.Fatalf("result = %+v", res)
	}
	w := kit.Journal().Written()
	for i, e := range w {
		if e.SeqNr != uint64(i+1) || e.PersistenceID != "List|test-entity" {
			t.Fatalf("event %d = %s #%d", i, e.PersistenceID, e.SeqNr)
		}
	}
	// A failed batch stores none of its events.
	kit.Journal().FailNextPersist(errors.New("disk on fire"))
	kit.ExpectStop()
	res = kit.RunCommand(addMany{Items: []string{"x", "y"}})
	if !res.Stopped || len(res.Events) != 0 {
		t.Fatalf("failed batch: %+v", res)
	}
	kit.Restart()
	if got := itemsOf(kit.State()); got != "a,b,c" {
		t.Fatalf("after restart: %q", got)
	}
}

func TestThenReplyAnswersWithNewState(t *testing.T) {
	kit := newKit(t, listOptions{})
	kit.RunCommand(add{Item: "a"})
	res := eventsourcedtest.RunCommandWithReply(kit, func(r entity.ReplyTo[int]) cmd { return addAndReply{Item: "b", ReplyTo: r} })
	if !res.Replied || res.Reply != 2 || len(res.Events) != 1 {
		t.Fatalf("reply result = %+v", res)
	}
	none := eventsourcedtest.RunCommandWithReply(kit, func(r entity.ReplyTo[string]) cmd { return noop{ReplyTo: r} })
	if none.Replied {
		t.Fatalf("noop replied %q", none.Reply)
	}
}

func TestSideEffectsAreSkippedWhenPersistFails(t *testing.T) {
	rec := &recorder{}
	kit := newKit(t, listOptions{rec: rec})
	kit.Journal().FailNextPersist(errors.New("connection reset"))
	kit.ExpectStop()
	res := kit.RunCommand(add{Item: "a"})
	if !res.Stopped || !errors.Is(res.Err, eventsourced.ErrPersistFailed) {
		t.Fatalf("want stop with ErrPersistFailed, got %+v", res)
	}
	var perr *eventsourced.PersistError
	if !errors.As(res.Err, &perr) || perr.SeqNr != 1 || perr.PersistenceID != "List|test-entity" {
		t.Fatalf("stop reason = %#v", res.Err)
	}
	if len(rec.notes()) != 0 {
		t.Fatalf("side effects ran: %q", rec.notes())
	}
	if !hasSignal[eventsourced.PersistFailed](rec) {
		t.Fatalf("no PersistFailed signal in %v", rec.signals())
	}
}

func TestRejectedPersistStopsWithDistinctError(t *testing.T) {
	rec := &recorder{}
	kit := newKit(t, listOptions{rec: rec})
	kit.Journal().RejectNextPersist(errors.New("event too large"))
	kit.ExpectStop()
	res := kit.RunCommand(add{Item: "a"})
	if !res.Stopped || !errors.Is(res.Err, eventsourced.ErrPersistRejected) || errors.Is(res.Err, eventsourced.ErrPersistFailed) {
		t.Fatalf("want ErrPersistRejected, got %+v", res)
	}
	if !hasSignal[eventsourced.PersistRejected](rec) {
		t.Fatalf("no PersistRejected signal in %v", rec.signals())
	}
}

func TestUnencodableEventIsRejectedBeforeWriting(t *testing.T) {
	reg := newRegistry()
	type secret struct{ event }
	create := func(ec entity.Context[cmd]) entity.Behavior[cmd] {
		return eventsourced.New(eventsourced.Config[cmd, event, state]{
			PersistenceID: eventsourced.PersistenceIDOf(listKey, ec.EntityID()),
			OnCommand: func(ctx eventsourced.CommandContext[cmd, event, state], _ state, _ cmd) eventsourced.Effect[event, state] {
				return ctx.Persist(secret{})
			},
			OnEvent: func(_ eventsourced.Context[cmd], s state, _ event) state { return s },
		})
	}
	kit := eventsourcedtest.New[cmd, event, state](t, listKey, create, eventsourcedtest.Options{Codec: reg})
	kit.ExpectStop()
	res := kit.RunCommand(add{Item: "a"})
	if !errors.Is(res.Err, eventsourced.ErrPersistRejected) || !errors.Is(res.Err, codec.ErrUnregisteredType) {
		t.Fatalf("want rejection for an unregistered event, got %+v", res)
	}
	if n := len(kit.Journal().Written()); n != 0 {
		t.Fatalf("%d events written", n)
	}
}

func TestThenStopRunsEarlierSideEffectsThenStops(t *testing.T) {
	rec := &recorder{}
	kit := newKit(t, listOptions{rec: rec})
	kit.ExpectStop()
	res := kit.RunCommand(addAndStop{Item: "last"})
	if !res.Stopped || res.Err != nil || len(res.Events) != 1 {
		t.Fatalf("result = %+v", res)
	}
	if got := rec.notes(); !slices.Equal(got, []string{"before stop"}) {
		t.Fatalf("side effects = %q", got)
	}
	if err := kit.Ref().Tell(add{Item: "late"}); !errors.Is(err, entity.ErrStopped) {
		t.Fatalf("tell after stop = %v", err)
	}
}

func TestStashedCommandsAreUnstashedInOrderBeforeNewerOnes(t *testing.T) {
	rec := &recorder{}
	kit := newKit(t, listOptions{rec: rec})
	kit.RunCommand(lock{})
	for _, it := range []string{"s1", "s2", "s3"} {
		if res := kit.RunCommand(stashCmd{Item: it}); len(res.Events) != 0 {
			t.Fatalf("stashed command persisted: %+v", res)
		}
	}
	// unlock and a newer command queue together: the stash must drain first.
	if err := kit.Ref().Tell(unlock{}); err != nil {
		t.Fatal(err)
	}
	res := kit.RunCommand(add{Item: "newer"})
	if got := itemsOf(res.State); got != "s1,s2,s3,newer" {
		t.Fatalf("items = %q", got)
	}
}

func TestStashOverflowStopsWithTypedError(t *testing.T) {
	create := func(ec entity.Context[cmd]) entity.Behavior[cmd] {
		return eventsourced.New(eventsourced.Config[cmd, event, state]{
			PersistenceID: eventsourced.PersistenceIDOf(listKey, ec.EntityID()),
			OnCommand: func(ctx eventsourced.CommandContext[cmd, event, state], _ state, _ cmd) eventsourced.Effect[event, state] {
				return ctx.Stash()
			},
			OnEvent: func(_ eventsourced.Context[cmd], s state, _ event) state { return s },
		})
	}
	reg := newRegistry()
	sys, _ := entity.NewSystem(entity.Config{Codec: reg, Journal: memory.New(), Logger: quietLogger()})
	cell := entity.Spawn(sys, &entity.Props[cmd]{Key: listKey, Create: create, StashCapacity: 3}, "s")
	for i := range 5 {
		_ = cell.Tell(add{Item: string(rune('a' + i))})
	}
	<-cell.Done()
	if !errors.Is(cell.Err(), stash.ErrFull) {
		t.Fatalf("stop reason = %v, want stash.ErrFull", cell.Err())
	}
}

func TestCommandsWaitInOrderWhilePersisting(t *testing.T) {
	synctest.Test(t, testCommandsWaitInOrderWhilePersisting)
}

func testCommandsWaitInOrderWhilePersisting(t *testing.T) {
	gate := &gatedJournal{Journal: memory.New(), open: make(chan struct{})}
	reg := newRegistry()
	sys, _ := entity.NewSystem(entity.Config{Codec: reg, Journal: gate, Logger: quietLogger()})
	cell := entity.Spawn(sys, &entity.Props[cmd]{Key: listKey, Create: listEntity(listOptions{})}, "p")
	for _, it := range []string{"1", "2", "3", "4"} {
		if err := cell.Tell(add{Item: it}); err != nil {
			t.Fatal(err)
		}
	}
	synctest.Wait() // first write in flight; the others must wait in the mailbox
	if n := gate.writes(); n != 1 {
		t.Fatalf("%d writes started while the first was in flight", n)
	}
	close(gate.open)
	got := askItems(t, cell)
	if !slices.Equal(got, []string{"1", "2", "3", "4"}) {
		t.Fatalf("items = %q", got)
	}
}

// The commands held while persisting are bounded: past the bound senders
// get ErrMailboxFull, and what was accepted is handled, in order.
func TestCommandsHeldWhilePersistingAreBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gate := &gatedJournal{Journal: memory.New(), open: make(chan struct{})}
		sys, _ := entity.NewSystem(entity.Config{Codec: newRegistry(), Journal: gate, Logger: quietLogger()})
		cell := entity.Spawn(sys, &entity.Props[cmd]{Key: listKey, Create: listEntity(listOptions{}), HeldCapacity: 3}, "p")
		if err := cell.Tell(add{Item: "1"}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // the first write is in flight
		for _, it := range []string{"2", "3", "4"} {
			if err := cell.Tell(add{Item: it}); err != nil {
				t.Fatalf("held command %s: %v", it, err)
			}
		}
		if err := cell.Tell(add{Item: "5"}); !errors.Is(err, entity.ErrMailboxFull) {
			t.Fatalf("command past the bound: %v, want ErrMailboxFull", err)
		}
		close(gate.open)
		synctest.Wait()
		if got := askItems(t, cell); !slices.Equal(got, []string{"1", "2", "3", "4"}) {
			t.Fatalf("items = %q", got)
		}
	})
}

func TestCommandsWaitWhileRecovering(t *testing.T) {
	j := memory.New()
	seed(t, j, "List|r", added{Item: "old"})
	gate := &gatedReplay{Journal: j, open: make(chan struct{}), started: make(chan struct{})}
	sys, _ := entity.NewSystem(entity.Config{Codec: newRegistry(), Journal: gate, Logger: quietLogger()})
	cell := entity.Spawn(sys, &entity.Props[cmd]{Key: listKey, Create: listEntity(listOptions{})}, "r")
	<-gate.started
	_ = cell.Tell(add{Item: "new"})
	close(gate.open)
	if got := askItems(t, cell); !slices.Equal(got, []string{"old", "new"}) {
		t.Fatalf("items = %q (a command overtook recovery)", got)
	}
}

func TestRestartRecoversFromJournal(t *testing.T) {
	rec := &recorder{}
	kit := newKit(t, listOptions{rec: rec})
	kit.RunCommand(add{Item: "a"})
	kit.RunCommand(addMany{Items: []string{"b", "c"}})
	kit.Restart()
	if got := itemsOf(kit.State()); got != "a,b,c" {
		t.Fatalf("recovered %q", got)
	}
	if res := kit.RunCommand(add{Item: "d"}); itemsOf(res.State) != "a,b,c,d" {
		t.Fatalf("after restart: %q", itemsOf(res.State))
	}
	if w := kit.Journal().Written(); w[len(w)-1].SeqNr != 4 {
		t.Fatalf("seq after restart = %d, want 4", w[len(w)-1].SeqNr)
	}
	completed := 0
	for _, s := range rec.signals() {
		if rc, ok := s.(eventsourced.RecoveryCompleted); ok {
			completed++
			if completed == 2 && rc.SeqNr != 3 {
				t.Fatalf("second RecoveryCompleted at seq %d, want 3", rc.SeqNr)
			}
		}
	}
	if completed != 2 {
		t.Fatalf("%d RecoveryCompleted signals, want 2", completed)
	}
}

func TestRecoveryFailureStopsWithSignal(t *testing.T) {
	rec := &recorder{}
	kit := newKit(t, listOptions{rec: rec})
	kit.RunCommand(add{Item: "a"})
	kit.Journal().FailNextRead(errors.New("db down"))
	kit.ExpectStop()
	kit.Restart()
	stopped, err := kit.Stopped()
	if !stopped || !errors.Is(err, eventsourced.ErrRecoveryFailed) {
		t.Fatalf("stopped=%v err=%v", stopped, err)
	}
	if !hasSignal[eventsourced.RecoveryFailed](rec) {
		t.Fatalf("no RecoveryFailed in %v", rec.signals())
	}
}

func TestUnknownManifestFailsRecoveryNamingTheEvent(t *testing.T) {
	j := memory.New()
	seed(t, j, "List|u", added{Item: "fine"})
	if err := j.Write(context.Background(), []journal.Event{{PersistenceID: "List|u", SeqNr: 2, Manifest: "from.the.future", Payload: []byte("{}")}}); err != nil {
		t.Fatal(err)
	}
	sys, _ := entity.NewSystem(entity.Config{Codec: newRegistry(), Journal: j, Logger: quietLogger()})
	cell := entity.Spawn(sys, &entity.Props[cmd]{Key: listKey, Create: listEntity(listOptions{})}, "u")
	<-cell.Done()
	var rerr *eventsourced.RecoveryError
	if !errors.As(cell.Err(), &rerr) || rerr.PersistenceID != "List|u" || rerr.SeqNr != 2 {
		t.Fatalf("stop reason = %v", cell.Err())
	}
	if !errors.Is(cell.Err(), codec.ErrUnknownManifest) || !errors.Is(cell.Err(), eventsourced.ErrRecoveryFailed) {
		t.Fatalf("stop reason %v does not match ErrUnknownManifest and ErrRecoveryFailed", cell.Err())
	}
}

// An event handler that panics on a stored event fails the recovery like an
// event that cannot be decoded: RecoveryFailed, and a stop reason naming the
// event. Other entities carry on.
func TestPanicInEventHandlerDuringReplayFailsRecovery(t *testing.T) {
	j := memory.New()
	seed(t, j, "List|poisoned", added{Item: "fine"}, added{Item: "poison"}, added{Item: "never"})
	seed(t, j, "List|healthy", added{Item: "fine"})
	rec := &recorder{}
	var applied []string
	create := func(ec entity.Context[cmd]) entity.Behavior[cmd] {
		return eventsourced.New(eventsourced.Config[cmd, event, state]{
			PersistenceID: eventsourced.PersistenceIDOf(listKey, ec.EntityID()),
			OnCommand:     listCommand(rec),
			OnEvent: func(ctx eventsourced.Context[cmd], s state, e event) state {
				if a, ok := e.(added); ok {
					if a.Item == "poison" {
						panic("cannot apply " + a.Item)
					}
					if ec.EntityID() == "poisoned" {
						applied = append(applied, a.Item) // the entity's goroutine only; read after Done
					}
					s.Items = append(s.Items, a.Item)
				}
				return s
			},
			OnSignal: func(_ eventsourced.Context[cmd], _ state, sig eventsourced.Signal) {
				if _, ok := sig.(eventsourced.RecoveryFailed); ok {
					rec.signal(sig)
				}
			},
		})
	}
	sys, _ := entity.NewSystem(entity.Config{Codec: newRegistry(), Journal: j, Logger: quietLogger()})
	props := &entity.Props[cmd]{Key: listKey, Create: create}
	poisoned := entity.Spawn(sys, props, "poisoned")
	healthy := entity.Spawn(sys, props, "healthy")
	<-poisoned.Done()
	err := poisoned.Err()
	var rerr *eventsourced.RecoveryError
	var perr *entity.PanicError
	if !errors.Is(err, eventsourced.ErrRecoveryFailed) || !errors.As(err, &rerr) || rerr.SeqNr != 2 ||
		!errors.As(err, &perr) || perr.Value != "cannot apply poison" {
		t.Fatalf("stop reason = %v, want a RecoveryError at seq 2 wrapping the panic", err)
	}
	if n := countSignals[eventsourced.RecoveryFailed](rec); n != 1 {
		t.Fatalf("%d RecoveryFailed signals, want 1", n)
	}
	if !slices.Equal(applied, []string{"fine"}) {
		t.Fatalf("applied %q: replay went on after the failed event", applied)
	}
	if got := askItems(t, healthy); !slices.Equal(got, []string{"fine"}) {
		t.Fatalf("healthy entity: %q", got)
	}
}

func TestPersistenceIDRejectsSeparator(t *testing.T) {
	if _, err := eventsourced.NewPersistenceID("List", "a|b"); !errors.Is(err, eventsourced.ErrInvalidPersistenceID) {
		t.Fatalf("err = %v", err)
	}
	pid, err := eventsourced.NewPersistenceID("List", "a")
	if err != nil || pid.String() != "List|a" {
		t.Fatalf("pid = %q, %v", pid, err)
	}
	sys, _ := entity.NewSystem(entity.Config{Codec: newRegistry(), Journal: memory.New(), Logger: quietLogger()})
	cell := entity.Spawn(sys, &entity.Props[cmd]{Key: listKey, Create: listEntity(listOptions{})}, "bad|id")
	<-cell.Done()
	if !errors.Is(cell.Err(), eventsourced.ErrInvalidPersistenceID) {
		t.Fatalf("stop reason = %v", cell.Err())
	}
}

func TestWriteConflictStopsTheSecondIncarnation(t *testing.T) {
	j := memory.New()
	sys, _ := entity.NewSystem(entity.Config{Codec: newRegistry(), Journal: j, Logger: quietLogger()})
	props := &entity.Props[cmd]{Key: listKey, Create: listEntity(listOptions{})}
	first := entity.Spawn(sys, props, "dup")
	second := entity.Spawn(sys, props, "dup")
	askItems(t, first) // both recovered at seq 0
	askItems(t, second)
	_ = first.Tell(add{Item: "from first"})
	askItems(t, first)
	_ = second.Tell(add{Item: "from second"})
	<-second.Done()
	if !errors.Is(second.Err(), eventsourced.ErrWriteConflict) {
		t.Fatalf("second stopped with %v, want ErrWriteConflict", second.Err())
	}
	// Distinct from an outage: a supervisor that restarts entities after a
	// failed write must be able to tell a second incarnation apart.
	if errors.Is(second.Err(), eventsourced.ErrPersistFailed) {
		t.Fatalf("write conflict %v also matches ErrPersistFailed", second.Err())
	}
	var perr *eventsourced.PersistError
	var conflict *journal.WriteConflictError
	if !errors.As(second.Err(), &perr) || perr.Kind != eventsourced.ErrWriteConflict || perr.SeqNr != 1 ||
		!errors.As(second.Err(), &conflict) || conflict.SeqNr != 1 || conflict.PersistenceID != "List|dup" {
		t.Fatalf("stop reason = %#v", second.Err())
	}
	var stored []string
	_ = j.Replay(context.Background(), "List|dup", 1, 100, func(e journal.Event) error {
		stored = append(stored, string(e.Payload))
		return nil
	})
	if len(stored) != 1 {
		t.Fatalf("stored %q", stored)
	}
}

// Stopped is the last signal of an incarnation and carries its stop
// reason: nil after a normal stop, the write conflict after a failed write.
func TestStoppedIsTheLastSignal(t *testing.T) {
	j := memory.New()
	sys, _ := entity.NewSystem(entity.Config{Codec: newRegistry(), Journal: j, Logger: quietLogger()})
	firstRec, secondRec := &recorder{}, &recorder{}
	spawn := func(rec *recorder) *entity.Cell[cmd] {
		props := &entity.Props[cmd]{Key: listKey, Create: listEntity(listOptions{rec: rec})}
		return entity.Spawn(sys, props, "dup")
	}
	first, second := spawn(firstRec), spawn(secondRec)
	askItems(t, first)
	askItems(t, second)
	_ = first.Tell(add{Item: "from first"})
	askItems(t, first)
	_ = second.Tell(add{Item: "from second"})
	<-second.Done()
	sigs := secondRec.signals()
	last, ok := sigs[len(sigs)-1].(eventsourced.Stopped)
	if !ok || !errors.Is(last.Err, eventsourced.ErrWriteConflict) {
		t.Fatalf("second's signals %#v: want Stopped with the write conflict last", sigs)
	}
	if n := countSignals[eventsourced.Stopped](secondRec); n != 1 {
		t.Fatalf("%d Stopped signals, want 1", n)
	}
	if n := countSignals[eventsourced.Stopped](firstRec); n != 0 {
		t.Fatalf("first got Stopped while running")
	}
	first.StopNow()
	<-first.Done()
	sigs = firstRec.signals()
	if last, ok := sigs[len(sigs)-1].(eventsourced.Stopped); !ok || last.Err != nil {
		t.Fatalf("first's signals %#v: want Stopped{nil} last", sigs)
	}
}

func TestUnhandledIsADeadLetter(t *testing.T) {
	kit := newKit(t, listOptions{})
	before := kit.System().DeadLetters()
	res := kit.RunCommand(unknownCmd{})
	if res.Stopped || len(res.Events) != 0 || kit.System().DeadLetters() != before+1 {
		t.Fatalf("res=%+v deadletters %d→%d", res, before, kit.System().DeadLetters())
	}
}

func TestEventHandlerSeesRecoveringContext(t *testing.T) {
	var mu sync.Mutex
	var seen []bool
	create := func(ec entity.Context[cmd]) entity.Behavior[cmd] {
		return eventsourced.New(eventsourced.Config[cmd, event, state]{
			PersistenceID: eventsourced.PersistenceIDOf(listKey, ec.EntityID()),
			OnCommand:     listCommand(&recorder{}),
			OnEvent: func(ctx eventsourced.Context[cmd], s state, e event) state {
				mu.Lock()
				seen = append(seen, ctx.Recovering())
				mu.Unlock()
				return s
			},
		})
	}
	kit := eventsourcedtest.New[cmd, event, state](t, listKey, create, eventsourcedtest.Options{Codec: newRegistry()})
	kit.RunCommand(add{Item: "a"})
	kit.Restart()
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(seen, []bool{false, true}) {
		t.Fatalf("Recovering() in event handler = %v, want [false true]", seen)
	}
}

// A slow snapshot write must not let retention, issued after a later
// snapshot, run before it: the slow snapshot would outlive the delete.
func TestSnapshotsAreWrittenInOrder(t *testing.T) { synctest.Test(t, testSnapshotsAreWrittenInOrder) }

func testSnapshotsAreWrittenInOrder(t *testing.T) {
	rec := &recorder{}
	kit := newKit(t, listOptions{rec: rec, retention: eventsourced.SnapshotEvery(3, 2)})
	release := kit.Snapshots().BlockNextSave()
	defer release()
	for i := range 10 {
		kit.RunCommand(add{Item: string(rune('a' + i))})
	}
	synctest.Wait()
	if n := countSignals[eventsourced.SnapshotCompleted](rec); n != 0 {
		t.Fatalf("%d snapshots completed while the first was still being written, want 0", n)
	}
	release()
	synctest.Wait()
	var completed []uint64
	for _, s := range rec.signals() {
		if c, ok := s.(eventsourced.SnapshotCompleted); ok {
			completed = append(completed, c.SeqNr)
		}
	}
	if !slices.Equal(completed, []uint64{3, 6, 9}) {
		t.Fatalf("snapshots completed in order %v, want [3 6 9]", completed)
	}
	var kept []uint64
	for _, seq := range []uint64{3, 6, 9} {
		if s, ok, _ := kit.Snapshots().Load(context.Background(), "List|test-entity", snapshot.Criteria{MinSeqNr: seq, MaxSeqNr: seq}); ok {
			kept = append(kept, s.SeqNr)
		}
	}
	if !slices.Equal(kept, []uint64{6, 9}) {
		t.Fatalf("kept snapshots %v, want [6 9]", kept)
	}
}

// A new incarnation must not read the store while its predecessor's
// snapshot job still runs: the job's event deletion would cut the history
// the new incarnation is replaying (it found no snapshot, so it replays
// from 1, and the events it needs vanish under it).
func TestRecoveryWaitsForThePreviousIncarnationsSnapshot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		kit := newKit(t, listOptions{retention: eventsourced.Retention{DeleteEventsOnSnapshot: true},
			when: func(_ state, e event, _ uint64) bool { _, isLock := e.(locked); return isLock }})
		kit.RunCommand(add{Item: "a"})
		release := kit.Snapshots().BlockNextSave()
		defer release()
		kit.RunCommand(lock{}) // snapshot at 2, its save held
		kit.RunCommand(unlock{})
		kit.Journal().DelayReads(time.Second)
		time.AfterFunc(500*time.Millisecond, release) // while the new incarnation would be replaying
		kit.Restart()
		kit.Journal().DelayReads(0)
		if st := kit.State(); itemsOf(st) != "a" || st.Locked {
			t.Fatalf("recovered %+v, want items a, unlocked", st)
		}
	})
}

// The previous incarnation's slow snapshot must not land after the new
// incarnation's retention deleted it.
func TestSnapshotOfAPreviousIncarnationDoesNotOutliveRetention(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		kit := newKit(t, listOptions{retention: eventsourced.SnapshotEvery(3, 1)})
		release := kit.Snapshots().BlockNextSave()
		defer release()
		for i := range 3 {
			kit.RunCommand(add{Item: string(rune('a' + i))})
		}
		time.AfterFunc(time.Second, release)
		kit.Restart() // recovers once snapshot 3 is stored
		for i := 3; i < 6; i++ {
			kit.RunCommand(add{Item: string(rune('a' + i))})
		}
		synctest.Wait() // snapshot 6 saved, snapshots up to 3 deleted
		if s, ok, _ := kit.Snapshots().Load(t.Context(), "List|test-entity", snapshot.Criteria{MinSeqNr: 3, MaxSeqNr: 3}); ok {
			t.Fatalf("snapshot %d kept after retention deleted up to 3", s.SeqNr)
		}
		if got := itemsOf(kit.State()); got != "a,b,c,d,e,f" {
			t.Fatalf("state %q", got)
		}
	})
}

func TestSnapshotEveryWithRetention(t *testing.T) { synctest.Test(t, testSnapshotEveryWithRetention) }

func testSnapshotEveryWithRetention(t *testing.T) {
	rec := &recorder{}
	kit := newKit(t, listOptions{rec: rec, retention: eventsourced.SnapshotEvery(3, 2).WithDeleteEventsOnSnapshot()})
	for i := range 10 {
		kit.RunCommand(add{Item: string(rune('a' + i))})
	}
	synctest.Wait() // snapshot IO runs off the entity
	// Snapshots at 3, 6 and 9; keeping two means only the one at 9 prunes (up to 3).
	if n := countSignals[eventsourced.DeleteEventsCompleted](rec); n != 1 {
		t.Fatalf("%d DeleteEventsCompleted signals, want 1", n)
	}
	if n := countSignals[eventsourced.SnapshotCompleted](rec); n != 3 {
		t.Fatalf("%d SnapshotCompleted signals, want 3", n)
	}
	for _, s := range rec.signals() {
		if d, ok := s.(eventsourced.DeleteSnapshotsCompleted); ok && d.UpTo != 3 {
			t.Fatalf("DeleteSnapshotsCompleted up to %d, want 3", d.UpTo)
		}
	}
	if n := countSignals[eventsourced.DeleteSnapshotsCompleted](rec); n != 1 {
		t.Fatalf("%d DeleteSnapshotsCompleted signals, want 1", n)
	}
	ctx := context.Background()
	var seqs []uint64
	for _, seq := range []uint64{3, 6, 9} {
		if s, ok, _ := kit.Snapshots().Load(ctx, "List|test-entity", snapshot.Criteria{MinSeqNr: seq, MaxSeqNr: seq}); ok {
			seqs = append(seqs, s.SeqNr)
		}
	}
	if !slices.Equal(seqs, []uint64{6, 9}) {
		t.Fatalf("kept snapshots %v, want [6 9]", seqs)
	}
	var first uint64
	_ = kit.Journal().Replay(ctx, "List|test-entity", 1, 100, func(e journal.Event) error {
		if first == 0 {
			first = e.SeqNr
		}
		return nil
	})
	if first != 4 {
		t.Fatalf("first remaining event %d, want 4 (events up to 3 deleted)", first)
	}
	kit.Restart()
	if got := itemsOf(kit.State()); got != "a,b,c,d,e,f,g,h,i,j" {
		t.Fatalf("recovered from snapshot + events: %q", got)
	}
	if res := kit.RunCommand(add{Item: "k"}); kit.Journal().Written()[len(kit.Journal().Written())-1].SeqNr != 11 || len(res.Events) != 1 {
		t.Fatalf("seq after snapshot recovery wrong: %+v", res)
	}
}

func TestSnapshotWhenPredicate(t *testing.T) { synctest.Test(t, testSnapshotWhenPredicate) }

func testSnapshotWhenPredicate(t *testing.T) {
	rec := &recorder{}
	kit := newKit(t, listOptions{rec: rec, when: func(_ state, e event, _ uint64) bool {
		_, isLock := e.(locked)
		return isLock
	}})
	kit.RunCommand(add{Item: "a"})
	kit.RunCommand(lock{})
	synctest.Wait()
	if n := countSignals[eventsourced.SnapshotCompleted](rec); n != 1 {
		t.Fatalf("%d SnapshotCompleted signals, want 1", n)
	}
	s, ok, err := kit.Snapshots().Load(context.Background(), "List|test-entity", snapshot.Latest())
	if err != nil || !ok || s.SeqNr != 2 {
		t.Fatalf("snapshot = %+v ok=%v err=%v", s, ok, err)
	}
	// Recovery must use the snapshot: with the events gone the state still comes back.
	if err := kit.Journal().DeleteTo(context.Background(), "List|test-entity", 2); err != nil {
		t.Fatal(err)
	}
	kit.Restart()
	if st := kit.State(); itemsOf(st) != "a" || !st.Locked {
		t.Fatalf("recovered %+v", st)
	}
}

// Snapshots taken only by the predicate, with DeleteEventsOnSnapshot:
// every event the snapshot covers is deleted (Akka's snapshotWhen(pred,
// deleteEventsOnSnapshot = true)); no snapshot is pruned.
func TestSnapshotWhenDeletesCoveredEvents(t *testing.T) {
	synctest.Test(t, testSnapshotWhenDeletesCoveredEvents)
}

func testSnapshotWhenDeletesCoveredEvents(t *testing.T) {
	rec := &recorder{}
	kit := newKit(t, listOptions{rec: rec, retention: eventsourced.Retention{DeleteEventsOnSnapshot: true},
		when: func(_ state, e event, _ uint64) bool { _, isLock := e.(locked); return isLock }})
	kit.RunCommand(add{Item: "a"})
	kit.RunCommand(lock{})
	kit.RunCommand(unlock{})
	synctest.Wait()
	var deleted []uint64
	for _, s := range rec.signals() {
		if d, ok := s.(eventsourced.DeleteEventsCompleted); ok {
			deleted = append(deleted, d.UpTo)
		}
	}
	if !slices.Equal(deleted, []uint64{2}) {
		t.Fatalf("DeleteEventsCompleted up to %v, want [2]", deleted)
	}
	if n := countSignals[eventsourced.DeleteSnapshotsCompleted](rec); n != 0 {
		t.Fatalf("%d DeleteSnapshotsCompleted signals, want 0", n)
	}
	var left []uint64
	_ = kit.Journal().Replay(context.Background(), "List|test-entity", 1, 100, func(e journal.Event) error {
		left = append(left, e.SeqNr)
		return nil
	})
	if !slices.Equal(left, []uint64{3}) {
		t.Fatalf("events left %v, want [3]", left)
	}
	kit.Restart()
	if st := kit.State(); itemsOf(st) != "a" || st.Locked {
		t.Fatalf("recovered %+v", st)
	}
}

// A snapshot that cannot be saved is reported and changes nothing else: the
// entity carries on, and no event is deleted on its account.
func TestSnapshotFailedSignalAndEntityCarriesOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		j := memory.New()
		store := failingSnapshots{err: errors.New("snapshot store down")}
		sys, _ := entity.NewSystem(entity.Config{Codec: newRegistry(), Journal: j, Snapshots: store, Logger: quietLogger()})
		cell := entity.Spawn(sys, &entity.Props[cmd]{Key: listKey, Create: listEntity(listOptions{rec: rec,
			retention: eventsourced.SnapshotEvery(2, 1).WithDeleteEventsOnSnapshot()})}, "f")
		_ = cell.Tell(add{Item: "a"})
		_ = cell.Tell(add{Item: "b"})
		askItems(t, cell)
		synctest.Wait()
		var failed []eventsourced.SnapshotFailed
		for _, s := range rec.signals() {
			if f, ok := s.(eventsourced.SnapshotFailed); ok {
				failed = append(failed, f)
			}
		}
		if len(failed) != 1 || failed[0].SeqNr != 2 || !errors.Is(failed[0].Err, store.err) {
			t.Fatalf("SnapshotFailed signals %+v, want one at seq 2 with the store's error", failed)
		}
		if hasSignal[eventsourced.SnapshotCompleted](rec) || hasSignal[eventsourced.DeleteEventsCompleted](rec) {
			t.Fatalf("signals %v after a failed snapshot", rec.signals())
		}
		_ = cell.Tell(add{Item: "c"})
		if got := askItems(t, cell); !slices.Equal(got, []string{"a", "b", "c"}) {
			t.Fatalf("items %q after a failed snapshot", got)
		}
		if high, _ := j.HighestSeqNr(context.Background(), "List|f"); high != 3 {
			t.Fatalf("highest seq %d, want 3", high)
		}
		var first uint64
		_ = j.Replay(context.Background(), "List|f", 1, 100, func(e journal.Event) error {
			if first == 0 {
				first = e.SeqNr
			}
			return nil
		})
		if first != 1 {
			t.Fatalf("first stored event %d, want 1 (nothing deleted)", first)
		}
		cell.StopNow()
		<-cell.Done()
	})
}

// failingSnapshots loads nothing and fails every save.
type failingSnapshots struct{ err error }

func (f failingSnapshots) Save(context.Context, snapshot.Snapshot) error { return f.err }
func (f failingSnapshots) Load(context.Context, string, snapshot.Criteria) (snapshot.Snapshot, bool, error) {
	return snapshot.Snapshot{}, false, nil
}
func (f failingSnapshots) Delete(context.Context, string, snapshot.Criteria) error { return f.err }

func hasSignal[T eventsourced.Signal](r *recorder) bool { return countSignals[T](r) > 0 }

func countSignals[T eventsourced.Signal](r *recorder) int {
	n := 0
	for _, s := range r.signals() {
		if _, ok := s.(T); ok {
			n++
		}
	}
	return n
}

func askItems(t *testing.T, ref entity.Ref[cmd]) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	items, err := entity.Ask(ctx, ref, func(r entity.ReplyTo[[]string]) cmd { return getItems{ReplyTo: r} })
	if err != nil {
		t.Fatal(err)
	}
	return items
}

func seed(t *testing.T, j journal.Journal, pid string, events ...event) {
	t.Helper()
	reg := newRegistry()
	high, _ := j.HighestSeqNr(context.Background(), pid)
	for i, e := range events {
		m, p, err := reg.Encode(e)
		if err != nil {
			t.Fatal(err)
		}
		if err := j.Write(context.Background(), []journal.Event{{PersistenceID: pid, SeqNr: high + uint64(i) + 1, Manifest: m, Payload: p}}); err != nil {
			t.Fatal(err)
		}
	}
}

// gatedJournal holds every write until open is closed.
type gatedJournal struct {
	journal.Journal
	open    chan struct{}
	mu      sync.Mutex
	started int
}

func (g *gatedJournal) Write(ctx context.Context, events []journal.Event) error {
	g.mu.Lock()
	g.started++
	g.mu.Unlock()
	<-g.open
	return g.Journal.Write(ctx, events)
}

func (g *gatedJournal) writes() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.started
}

// gatedReplay holds recovery until open is closed.
type gatedReplay struct {
	journal.Journal
	open, started chan struct{}
	once          sync.Once
}

func (g *gatedReplay) Replay(ctx context.Context, pid string, from, to uint64, fn func(journal.Event) error) error {
	g.once.Do(func() { close(g.started) })
	<-g.open
	return g.Journal.Replay(ctx, pid, from, to, fn)
}

// failingWrites is a journal whose writes fail, as during an outage.
type failingWrites struct {
	journal.Journal
	err error
}

func (f failingWrites) Write(context.Context, []journal.Event) error { return f.err }

// The ask of the command whose write failed fails at once with the
// persist failure, not at its deadline: no answer will come for it.
func TestAskOfACommandWhoseWriteFailedFailsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		outage := errors.New("connection refused")
		sys, _ := entity.NewSystem(entity.Config{Codec: newRegistry(), Journal: failingWrites{memory.New(), outage}, Logger: quietLogger()})
		cell := entity.Spawn(sys, &entity.Props[cmd]{Key: listKey, Create: listEntity(listOptions{})}, "down")
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		start := time.Now()
		_, err := entity.Ask(ctx, cell, func(r entity.ReplyTo[int]) cmd { return addAndReply{Item: "a", ReplyTo: r} })
		if !errors.Is(err, eventsourced.ErrPersistFailed) || !errors.Is(err, outage) || time.Since(start) != 0 {
			t.Fatalf("err = %v after %v, want the persist failure at once", err, time.Since(start))
		}
		<-cell.Done()
	})
}
