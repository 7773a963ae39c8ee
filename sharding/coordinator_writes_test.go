package sharding

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

// countingStore records each Update batch and fails while fail is set.
type countingStore struct {
	*MemoryCoordinatorStore
	batches [][]AllocationChange
	fail    error
}

func (s *countingStore) Update(ctx context.Context, typeName string, epoch uint64, changes []AllocationChange) error {
	s.batches = append(s.batches, slices.Clone(changes))
	if s.fail != nil {
		return s.fail
	}
	return s.MemoryCoordinatorStore.Update(ctx, typeName, epoch, changes)
}

// A step's changes reach the store as one batch, in the order decided,
// and its messages go out only after it committed; a failed batch keeps
// everything waiting and is retried whole.
func TestCoordinatorWritesOneBatchPerStep(t *testing.T) {
	store := &countingStore{MemoryCoordinatorStore: NewMemoryCoordinatorStore()}
	epoch, _, err := store.Acquire(context.Background(), "T", "node-a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var sent []outbound
	w := &coordinatorWrites{store: store, typ: "T", epoch: epoch, timeout: time.Minute,
		send: func(o outbound) { sent = append(sent, o) }, holds: func() bool { return true },
		retries: storeBackOff(Settings{RetryInterval: time.Millisecond})}

	changes := []change{{shard: "s1"}, {shard: "s1", region: "r2"}, {shard: "s2", region: "r1"}, {shard: "s3"}}
	out := []outbound{{to: "node-b"}, {to: "node-c"}}
	store.fail = errors.New("store unavailable")
	w.take(changes, out)
	if err := w.flush(); err == nil {
		t.Fatal("flush with a failing store: no error")
	}
	if len(sent) != 0 || !w.waiting() {
		t.Fatalf("after a failed batch: sent %v, waiting %v; want nothing sent, still waiting", sent, w.waiting())
	}
	store.fail = nil
	if err := w.flush(); err != nil {
		t.Fatalf("retried flush: %v", err)
	}
	want := []AllocationChange{{Shard: "s1"}, {Shard: "s1", Region: "r2"}, {Shard: "s2", Region: "r1"}, {Shard: "s3"}}
	if len(store.batches) != 2 || !slices.Equal(store.batches[0], want) || !slices.Equal(store.batches[1], want) {
		t.Fatalf("batches %v, want the step's changes twice (failed, then retried whole): %v", store.batches, want)
	}
	if !slices.Equal(sent, out) || w.waiting() {
		t.Fatalf("sent %v, waiting %v; want %v sent in order, nothing waiting", sent, w.waiting(), out)
	}
	_, shards, err := store.Acquire(context.Background(), "T", "node-a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(shards) != 2 || shards["s1"] != "r2" || shards["s2"] != "r1" {
		t.Fatalf("stored %v, want s1→r2, s2→r1", shards)
	}
}
