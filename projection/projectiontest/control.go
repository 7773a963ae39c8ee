package projectiontest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/journal"
	"github.com/shoal-dev/shoal/projection"
)

// RunControlStore runs the conformance suite of projection.ControlStore;
// newStore returns an empty store for each subtest.
func RunControlStore(t *testing.T, newStore func(t *testing.T) projection.ControlStore) {
	const ttl = time.Minute
	ctx := context.Background()
	inst := projection.Instance{Name: "orders", Slices: journal.SliceRange{Min: 0, Max: 511}}
	other := projection.Instance{Name: "orders", Slices: journal.SliceRange{Min: 512, Max: 1023}}
	off := func(pos int64) journal.Offset { return journal.Offset{Kind: "k", Tx: 7, Pos: pos} }

	t.Run("RequestsWaitForTheHolderInOrder", func(t *testing.T) {
		s := newStore(t)
		if _, err := s.Request(ctx, inst, projection.OpPause, journal.Offset{}); !errors.Is(err, projection.ErrUnknownInstance) {
			t.Fatalf("Request for an instance never acquired = %v, want ErrUnknownInstance", err)
		}
		a, err := s.Acquire(ctx, inst, "a", ttl)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Request(ctx, inst, projection.OpKind("explode"), journal.Offset{}); !errors.Is(err, projection.ErrInvalidConfig) {
			t.Fatalf("Request of an unknown kind = %v, want ErrInvalidConfig", err)
		}
		p, err := s.Request(ctx, inst, projection.OpPause, journal.Offset{})
		if err != nil {
			t.Fatal(err)
		}
		r, err := s.Request(ctx, inst, projection.OpReset, off(4))
		if err != nil {
			t.Fatal(err)
		}
		if r.ID <= p.ID {
			t.Fatalf("ids %d then %d: want increasing", p.ID, r.ID)
		}
		got, err := s.Heartbeat(ctx, a.Fence, ttl, projection.Report{LagEvents: -1})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 || got[0].ID != p.ID || got[0].Kind != projection.OpPause ||
			got[1].ID != r.ID || got[1].Kind != projection.OpReset || got[1].Offset != off(4) {
			t.Fatalf("pending %+v, want the pause then the reset to %v", got, off(4))
		}
		// Another instance's requests are its own.
		if _, err := s.Acquire(ctx, other, "b", ttl); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Request(ctx, other, projection.OpRebuild, journal.Offset{}); err != nil {
			t.Fatal(err)
		}
		if err := s.Complete(ctx, a.Fence, p.ID); err != nil {
			t.Fatal(err)
		}
		if err := s.Complete(ctx, a.Fence, 1<<40); err != nil {
			t.Fatalf("Complete of an unknown id = %v, want nil", err)
		}
		got, err = s.Heartbeat(ctx, a.Fence, ttl, projection.Report{LagEvents: -1})
		if err != nil || len(got) != 1 || got[0].ID != r.ID {
			t.Fatalf("pending after completing the pause: %+v, %v; want the reset alone", got, err)
		}
	})

	t.Run("RequestsSurviveTheHolderAndFenceTheOldOne", func(t *testing.T) {
		s := newStore(t)
		a, err := s.Acquire(ctx, inst, "a", ttl)
		if err != nil {
			t.Fatal(err)
		}
		q, err := s.Request(ctx, inst, projection.OpRebuild, journal.Offset{})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Release(ctx, a.Fence); err != nil {
			t.Fatal(err)
		}
		b, err := s.Acquire(ctx, inst, "b", ttl)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Heartbeat(ctx, a.Fence, ttl, projection.Report{}); !errors.Is(err, projection.ErrFenced) {
			t.Fatalf("old holder's Heartbeat = %v, want ErrFenced", err)
		}
		if err := s.Complete(ctx, a.Fence, q.ID); !errors.Is(err, projection.ErrFenced) {
			t.Fatalf("old holder's Complete = %v, want ErrFenced", err)
		}
		got, err := s.Heartbeat(ctx, b.Fence, ttl, projection.Report{})
		if err != nil || len(got) != 1 || got[0].ID != q.ID || got[0].Kind != projection.OpRebuild {
			t.Fatalf("new holder's pending %+v, %v; want the rebuild", got, err)
		}
	})

	t.Run("InstancesShowLeaseOffsetAndReport", func(t *testing.T) {
		s := newStore(t)
		if got, err := s.Instances(ctx, ""); err != nil || len(got) != 0 {
			t.Fatalf("Instances of an empty store: %+v, %v", got, err)
		}
		b, err := s.Acquire(ctx, other, "node-b", ttl)
		if err != nil {
			t.Fatal(err)
		}
		a, err := s.Acquire(ctx, inst, "node-a", ttl)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Acquire(ctx, projection.Instance{Name: "audit", Slices: journal.SliceRange{Min: 0, Max: 1023}}, "node-a", ttl); err != nil {
			t.Fatal(err)
		}
		if err := s.Save(ctx, a.Fence, off(5), nil); err != nil {
			t.Fatal(err)
		}
		if err := s.SetPaused(ctx, b.Fence, true); err != nil {
			t.Fatal(err)
		}
		if err := s.Release(ctx, b.Fence); err != nil {
			t.Fatal(err)
		}
		last := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
		rep := projection.Report{Offset: off(9), LastEventTime: last, LagEvents: 12, LastError: "boom"}
		if _, err := s.Heartbeat(ctx, a.Fence, ttl, rep); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Request(ctx, inst, projection.OpResume, journal.Offset{}); err != nil {
			t.Fatal(err)
		}
		// A heartbeat without a last event keeps the stored one.
		if _, err := s.Heartbeat(ctx, a.Fence, ttl, projection.Report{Offset: off(9), LagEvents: 12, LastError: "boom"}); err != nil {
			t.Fatal(err)
		}
		got, err := s.Instances(ctx, "orders")
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 || got[0].Instance != inst || got[1].Instance != other {
			t.Fatalf("Instances(orders) = %+v, want %v then %v", got, inst, other)
		}
		ga, gb := got[0], got[1]
		if ga.Offset != off(5) || ga.Paused || ga.Holder != "node-a" || ga.Epoch != a.Fence.Epoch || !ga.Held ||
			ga.UpdatedAt.IsZero() || ga.ReportedAt.IsZero() || len(ga.Pending) != 1 || ga.Pending[0].Kind != projection.OpResume {
			t.Errorf("a's state %+v", ga)
		}
		if ga.Report.Offset != rep.Offset || !ga.Report.LastEventTime.Equal(last) || ga.Report.LagEvents != 12 || ga.Report.LastError != "boom" {
			t.Errorf("a's report %+v, want %+v", ga.Report, rep)
		}
		if ga.Lag(last.Add(time.Minute)) != time.Minute {
			t.Errorf("a's lag a minute after its last event: %v", ga.Lag(last.Add(time.Minute)))
		}
		if !gb.Paused || gb.Held || gb.Holder != "node-b" || !gb.ReportedAt.IsZero() || len(gb.Pending) != 0 {
			t.Errorf("b's state %+v: want paused, released, never reported", gb)
		}
		all, err := s.Instances(ctx, "")
		if err != nil || len(all) != 3 || all[0].Instance.Name != "audit" {
			t.Fatalf("Instances(\"\") = %+v, %v; want audit then the two orders", all, err)
		}
	})
}
