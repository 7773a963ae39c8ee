package projectiontest

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/journal"
	"github.com/shoal-dev/shoal/projection"
)

// RunStore runs the conformance suite of projection.Store; newStore
// returns an empty store for each subtest.
func RunStore(t *testing.T, newStore func(t *testing.T) projection.Store) {
	const ttl = time.Minute
	ctx := context.Background()
	inst := projection.Instance{Name: "orders", Slices: journal.SliceRange{Min: 0, Max: 511}}
	off := func(pos int64) journal.Offset { return journal.Offset{Kind: "k", Tx: 7, Pos: pos} }

	t.Run("FirstAcquireStartsAtTheStart", func(t *testing.T) {
		s := newStore(t)
		c, err := s.Acquire(ctx, inst, "a", ttl)
		if err != nil {
			t.Fatal(err)
		}
		if !c.Offset.IsStart() || c.Paused || c.Fence.Instance != inst || c.Fence.Epoch < 1 {
			t.Fatalf("claim %+v, want the start, not paused, epoch >= 1", c)
		}
		if _, ok, err := s.Offset(ctx, inst); err != nil || !ok {
			t.Fatalf("Offset after Acquire: ok %v, %v", ok, err)
		}
		other := projection.Instance{Name: "orders", Slices: journal.SliceRange{Min: 512, Max: 1023}}
		if _, ok, err := s.Offset(ctx, other); err != nil || ok {
			t.Fatalf("Offset of an instance never acquired: ok %v, %v; want false", ok, err)
		}
	})

	// A renewal that reaches the store after the holder released its lease
	// (one in flight when its runner stopped) must not extend it: the
	// successor would wait a whole lease for nothing.
	t.Run("NoRenewalAfterRelease", func(t *testing.T) {
		s := newStore(t)
		a, err := s.Acquire(ctx, inst, "a", ttl)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Release(ctx, a.Fence); err != nil {
			t.Fatal(err)
		}
		if err := s.Renew(ctx, a.Fence, ttl); !errors.Is(err, projection.ErrFenced) {
			t.Fatalf("Renew after Release = %v, want ErrFenced", err)
		}
		if _, err := s.Acquire(ctx, inst, "b", ttl); err != nil {
			t.Fatalf("a successor after a late renewal: %v", err)
		}
	})

	t.Run("SecondHolderRefusedWhileLeased", func(t *testing.T) {
		s := newStore(t)
		a, err := s.Acquire(ctx, inst, "a", ttl)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Acquire(ctx, inst, "b", ttl); !errors.Is(err, projection.ErrInstanceHeld) {
			t.Fatalf("second holder's Acquire = %v, want ErrInstanceHeld", err)
		}
		// The refusal changed nothing: a's fence still writes.
		if err := s.Save(ctx, a.Fence, off(1), nil); err != nil {
			t.Fatalf("Save after a refused Acquire: %v", err)
		}
		// Another instance of the same projection is independent.
		other := projection.Instance{Name: "orders", Slices: journal.SliceRange{Min: 512, Max: 1023}}
		if _, err := s.Acquire(ctx, other, "b", ttl); err != nil {
			t.Fatalf("Acquire of another range: %v", err)
		}
	})

	t.Run("OffsetSurvivesAndFencesTheOldHolder", func(t *testing.T) {
		s := newStore(t)
		a, err := s.Acquire(ctx, inst, "a", ttl)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Save(ctx, a.Fence, off(3), nil); err != nil {
			t.Fatal(err)
		}
		if err := s.Release(ctx, a.Fence); err != nil {
			t.Fatal(err)
		}
		b, err := s.Acquire(ctx, inst, "b", ttl)
		if err != nil {
			t.Fatalf("Acquire after Release: %v", err)
		}
		if b.Offset != off(3) || b.Fence.Epoch <= a.Fence.Epoch {
			t.Fatalf("claim %+v after a's save of %v at epoch %d", b, off(3), a.Fence.Epoch)
		}
		for name, write := range map[string]func() error{
			"Save":      func() error { return s.Save(ctx, a.Fence, off(9), nil) },
			"Renew":     func() error { return s.Renew(ctx, a.Fence, ttl) },
			"Release":   func() error { return s.Release(ctx, a.Fence) },
			"SetPaused": func() error { return s.SetPaused(ctx, a.Fence, true) },
			"DeadLetter": func() error {
				return s.Save(ctx, a.Fence, off(9), []projection.DeadLetter{{PersistenceID: "T|x", SeqNr: 1, Manifest: "m", Error: "e", Offset: off(9)}})
			},
		} {
			if err := write(); !errors.Is(err, projection.ErrFenced) {
				t.Errorf("stale %s = %v, want ErrFenced", name, err)
			}
		}
		if got, _, err := s.Offset(ctx, inst); err != nil || got != off(3) {
			t.Fatalf("offset after fenced writes = %v, %v; want %v", got, err, off(3))
		}
		if dl, err := s.DeadLetters(ctx, inst); err != nil || len(dl) != 0 {
			t.Fatalf("dead letters after a fenced write: %v, %v", dl, err)
		}
		// b was not released by a's stale Release.
		if _, err := s.Acquire(ctx, inst, "c", ttl); !errors.Is(err, projection.ErrInstanceHeld) {
			t.Fatalf("Acquire while b holds it = %v, want ErrInstanceHeld", err)
		}
	})

	t.Run("SameHolderTakesItAgain", func(t *testing.T) {
		s := newStore(t)
		a, err := s.Acquire(ctx, inst, "a", ttl)
		if err != nil {
			t.Fatal(err)
		}
		a2, err := s.Acquire(ctx, inst, "a", ttl)
		if err != nil {
			t.Fatalf("same holder's second Acquire: %v", err)
		}
		if a2.Fence.Epoch <= a.Fence.Epoch {
			t.Fatalf("epochs %d then %d", a.Fence.Epoch, a2.Fence.Epoch)
		}
		if err := s.Save(ctx, a.Fence, off(1), nil); !errors.Is(err, projection.ErrFenced) {
			t.Fatalf("first claim's Save = %v, want ErrFenced", err)
		}
	})

	t.Run("ExpiredLeaseIsTaken", func(t *testing.T) {
		s := newStore(t)
		a, err := s.Acquire(ctx, inst, "a", 50*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Save(ctx, a.Fence, off(5), nil); err != nil {
			t.Fatal(err)
		}
		var b projection.Claim
		deadline := time.Now().Add(30 * time.Second)
		for {
			b, err = s.Acquire(ctx, inst, "b", ttl)
			if err == nil {
				break
			}
			if !errors.Is(err, projection.ErrInstanceHeld) || time.Now().After(deadline) {
				t.Fatalf("Acquire after a's lease expired: %v", err)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if b.Offset != off(5) {
			t.Fatalf("b resumes at %v, want %v", b.Offset, off(5))
		}
		if err := s.Save(ctx, a.Fence, off(6), nil); !errors.Is(err, projection.ErrFenced) {
			t.Fatalf("expired holder's Save = %v, want ErrFenced", err)
		}
	})

	t.Run("RenewKeepsTheLease", func(t *testing.T) {
		s := newStore(t)
		a, err := s.Acquire(ctx, inst, "a", ttl)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Renew(ctx, a.Fence, ttl); err != nil {
			t.Fatalf("Renew: %v", err)
		}
		if _, err := s.Acquire(ctx, inst, "b", ttl); !errors.Is(err, projection.ErrInstanceHeld) {
			t.Fatalf("Acquire of a renewed lease = %v, want ErrInstanceHeld", err)
		}
	})

	// A lease that ran out is not revived by its holder's late renewal:
	// another holder may have taken it meanwhile, and the holder must
	// acquire it again (a new epoch) instead.
	t.Run("NoRenewalAfterExpiry", func(t *testing.T) {
		s := newStore(t)
		a, err := s.Acquire(ctx, inst, "a", time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond) // at least the lease's millisecond, on any clock
		if err := s.Renew(ctx, a.Fence, ttl); !errors.Is(err, projection.ErrFenced) {
			t.Fatalf("Renew of an expired lease = %v, want ErrFenced", err)
		}
	})

	t.Run("PausedSurvivesAcquire", func(t *testing.T) {
		s := newStore(t)
		a, err := s.Acquire(ctx, inst, "a", ttl)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.SetPaused(ctx, a.Fence, true); err != nil {
			t.Fatal(err)
		}
		if err := s.Release(ctx, a.Fence); err != nil {
			t.Fatal(err)
		}
		b, err := s.Acquire(ctx, inst, "b", ttl)
		if err != nil || !b.Paused {
			t.Fatalf("claim %+v, %v; want paused", b, err)
		}
		if err := s.SetPaused(ctx, b.Fence, false); err != nil {
			t.Fatal(err)
		}
		if err := s.Release(ctx, b.Fence); err != nil {
			t.Fatal(err)
		}
		if c, err := s.Acquire(ctx, inst, "c", ttl); err != nil || c.Paused {
			t.Fatalf("claim %+v, %v; want not paused", c, err)
		}
	})

	t.Run("DeadLettersWithTheOffset", func(t *testing.T) {
		s := newStore(t)
		a, err := s.Acquire(ctx, inst, "a", ttl)
		if err != nil {
			t.Fatal(err)
		}
		want := []projection.DeadLetter{
			{PersistenceID: "Order|1", SeqNr: 4, Manifest: "order-placed", Payload: []byte(`{"x":1}`), Error: "boom", Offset: off(4)},
			{PersistenceID: "Order|2", SeqNr: 1, Manifest: "gone", Payload: []byte{0, 1, 2}, Error: "unknown manifest", Offset: off(5)},
		}
		if err := s.Save(ctx, a.Fence, off(5), want); err != nil {
			t.Fatal(err)
		}
		got, err := s.DeadLetters(ctx, inst)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Fatalf("dead letters %+v, want %+v", got, want)
		}
		for i := range want {
			g, w := got[i], want[i]
			if g.PersistenceID != w.PersistenceID || g.SeqNr != w.SeqNr || g.Manifest != w.Manifest ||
				!bytes.Equal(g.Payload, w.Payload) || g.Error != w.Error || g.Offset != w.Offset || g.At.IsZero() {
				t.Errorf("dead letter %d = %+v, want %+v with a time", i, g, w)
			}
		}
		if o, _, _ := s.Offset(ctx, inst); o != off(5) {
			t.Fatalf("offset %v, want %v", o, off(5))
		}
		// The same event set aside again: one row, the latest error.
		again := want[0]
		again.Error = "boom again"
		if err := s.Save(ctx, a.Fence, off(6), []projection.DeadLetter{again}); err != nil {
			t.Fatal(err)
		}
		if got, err := s.DeadLetters(ctx, inst); err != nil || len(got) != 2 || got[0].Error != "boom again" || got[1].SeqNr != 1 {
			t.Fatalf("dead letters after the first was set aside again: %+v, %v", got, err)
		}
		other := projection.Instance{Name: "other", Slices: inst.Slices}
		if dl, err := s.DeadLetters(ctx, other); err != nil || len(dl) != 0 {
			t.Fatalf("another projection's dead letters: %v, %v", dl, err)
		}
	})

	t.Run("InvalidInput", func(t *testing.T) {
		s := newStore(t)
		bad := projection.Instance{Name: "x", Slices: journal.SliceRange{Min: 5, Max: 2}}
		if _, err := s.Acquire(ctx, bad, "a", ttl); !errors.Is(err, projection.ErrInvalidConfig) {
			t.Errorf("Acquire of a bad range = %v, want ErrInvalidConfig", err)
		}
		if _, err := s.Acquire(ctx, inst, "a", 0); !errors.Is(err, projection.ErrInvalidConfig) {
			t.Errorf("Acquire with ttl 0 = %v, want ErrInvalidConfig", err)
		}
	})
}
