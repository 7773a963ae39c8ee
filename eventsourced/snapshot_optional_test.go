package eventsourced_test

import (
	"errors"
	"reflect"
	"testing"
	"testing/synctest"

	"github.com/shoal-dev/shoal/eventsourced"
)

func TestSnapshotIsOptionalRecoversFromTheEventsWhenTheStoreFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		kit := newKit(t, listOptions{rec: rec, retention: eventsourced.SnapshotEvery(1, 0), snapshotIsOptional: true})
		kit.RunCommand(add{Item: "a"})
		kit.RunCommand(add{Item: "b"})
		synctest.Wait() // the snapshots are saved
		down := errors.New("snapshot store down")
		kit.Snapshots().FailNextLoad(down)
		kit.Restart()
		if s := kit.State(); !reflect.DeepEqual(s.Items, []string{"a", "b"}) {
			t.Fatalf("recovered %v, want [a b] from the events", s.Items)
		}
		var failed []eventsourced.SnapshotLoadFailed
		for _, sig := range rec.signals() {
			if f, ok := sig.(eventsourced.SnapshotLoadFailed); ok {
				failed = append(failed, f)
			}
		}
		if len(failed) != 1 || !errors.Is(failed[0].Err, down) {
			t.Fatalf("SnapshotLoadFailed signals %v, want one with the store's error", failed)
		}
		if res := kit.RunCommand(add{Item: "c"}); !reflect.DeepEqual(res.State.Items, []string{"a", "b", "c"}) {
			t.Fatalf("after recovery: %v", res.State.Items)
		}
	})
}

func TestSnapshotIsOptionalRefusesWhenTheEventsBehindTheSnapshotAreDeleted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		retention := eventsourced.SnapshotEvery(1, 1).WithDeleteEventsOnSnapshot()
		kit := newKit(t, listOptions{retention: retention, snapshotIsOptional: true})
		for _, item := range []string{"a", "b", "c"} {
			kit.RunCommand(add{Item: item})
			synctest.Wait() // snapshot, then retention's deletes
		}
		kit.Snapshots().FailNextLoad(errors.New("snapshot store down"))
		kit.ExpectStop()
		kit.Restart()
		stopped, err := kit.Stopped()
		if !stopped || !errors.Is(err, eventsourced.ErrSnapshotRequired) || !errors.Is(err, eventsourced.ErrRecoveryFailed) {
			t.Fatalf("stopped %v, err %v; want a recovery failure matching ErrSnapshotRequired", stopped, err)
		}
	})
}

func TestSnapshotIsOptionalRefusesWhenEveryEventIsDeleted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		kit := newKit(t, listOptions{when: func(state, event, uint64) bool { return true },
			retention: eventsourced.Retention{DeleteEventsOnSnapshot: true}, snapshotIsOptional: true})
		kit.RunCommand(add{Item: "a"})
		synctest.Wait()
		kit.Snapshots().FailNextLoad(errors.New("snapshot store down"))
		kit.ExpectStop()
		kit.Restart()
		if stopped, err := kit.Stopped(); !stopped || !errors.Is(err, eventsourced.ErrSnapshotRequired) {
			t.Fatalf("stopped %v, err %v; want ErrSnapshotRequired", stopped, err)
		}
	})
}
