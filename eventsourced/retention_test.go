package eventsourced

import "testing"

// The rule Retention's doc states, case by case: a snapshot at seqNr
// deletes the snapshots and (with DeleteEventsOnSnapshot) the events up to
// seqNr − KeepSnapshots×SnapshotEvery; snapshots from SnapshotWhen alone
// delete every event they cover.
func TestRetentionDeletesByAkkasRule(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		r                     Retention
		seqNr                 uint64
		snapshotsTo, eventsTo uint64
	}{
		{"keep 2 of every 3, at 9", SnapshotEvery(3, 2).WithDeleteEventsOnSnapshot(), 9, 3, 3},
		{"keep 2 of every 3, at 6: nothing old enough", SnapshotEvery(3, 2).WithDeleteEventsOnSnapshot(), 6, 0, 0},
		{"keep 1 of every 100, at 300", SnapshotEvery(100, 1).WithDeleteEventsOnSnapshot(), 300, 200, 200},
		{"events kept without DeleteEventsOnSnapshot", SnapshotEvery(3, 2), 9, 3, 0},
		{"KeepSnapshots 0 keeps everything", SnapshotEvery(3, 0).WithDeleteEventsOnSnapshot(), 9, 0, 0},
		{"SnapshotWhen only: every covered event", Retention{DeleteEventsOnSnapshot: true}, 7, 0, 7},
	} {
		if got := tc.r.deleteUpTo(tc.seqNr); got != tc.snapshotsTo {
			t.Errorf("%s: snapshots deleted up to %d, want %d", tc.name, got, tc.snapshotsTo)
		}
		if got := tc.r.deleteEventsUpTo(tc.seqNr); got != tc.eventsTo {
			t.Errorf("%s: events deleted up to %d, want %d", tc.name, got, tc.eventsTo)
		}
	}
}
