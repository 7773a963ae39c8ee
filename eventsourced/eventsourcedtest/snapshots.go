package eventsourcedtest

import (
	"context"
	"sync"

	"github.com/shoal-dev/shoal/snapshot"
)

// SnapshotStore wraps a snapshot.Store with one-shot fault injection, like
// Journal. It is safe for concurrent use.
type SnapshotStore struct {
	snapshot.Store

	mu                             sync.Mutex
	failSave, failLoad, failDelete error
	blockSave                      chan struct{}
}

// NewSnapshotStore wraps s.
func NewSnapshotStore(s snapshot.Store) *SnapshotStore { return &SnapshotStore{Store: s} }

// FailNextSave makes the next Save fail with err, storing nothing.
func (s *SnapshotStore) FailNextSave(err error) { s.set(&s.failSave, err) }

// FailNextLoad makes the next Load (recovery's) fail with err.
func (s *SnapshotStore) FailNextLoad(err error) { s.set(&s.failLoad, err) }

// FailNextDelete makes the next Delete (retention's) fail with err, deleting nothing.
func (s *SnapshotStore) FailNextDelete(err error) { s.set(&s.failDelete, err) }

// BlockNextSave makes the next Save wait, before it stores anything, until
// release is called (or its context ends), to test what happens while a
// snapshot write is slow. release may be called more than once.
func (s *SnapshotStore) BlockNextSave() (release func()) {
	gate := make(chan struct{})
	s.mu.Lock()
	s.blockSave = gate
	s.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { close(gate) }) }
}

func (s *SnapshotStore) set(f *error, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	*f = err
}

func (s *SnapshotStore) take(f *error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	err := *f
	*f = nil
	return err
}

// Save implements snapshot.Store.
func (s *SnapshotStore) Save(ctx context.Context, snap snapshot.Snapshot) error {
	if err := s.take(&s.failSave); err != nil {
		return err
	}
	s.mu.Lock()
	gate := s.blockSave
	s.blockSave = nil
	s.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return s.Store.Save(ctx, snap)
}

// Load implements snapshot.Store.
func (s *SnapshotStore) Load(ctx context.Context, pid string, c snapshot.Criteria) (snapshot.Snapshot, bool, error) {
	if err := s.take(&s.failLoad); err != nil {
		return snapshot.Snapshot{}, false, err
	}
	return s.Store.Load(ctx, pid, c)
}

// Delete implements snapshot.Store.
func (s *SnapshotStore) Delete(ctx context.Context, pid string, c snapshot.Criteria) error {
	if err := s.take(&s.failDelete); err != nil {
		return err
	}
	return s.Store.Delete(ctx, pid, c)
}
