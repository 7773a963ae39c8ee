// Package memory is an in-process snapshot.Store for tests and the embedded default.
package memory

import (
	"context"
	"sort"
	"sync"

	"github.com/shoal-dev/shoal/snapshot"
)

// Store is a snapshot.Store held in memory.
type Store struct {
	mu    sync.RWMutex
	byPID map[string][]snapshot.Snapshot // ascending SeqNr
}

var _ snapshot.Store = (*Store)(nil)

// New returns an empty store.
func New() *Store { return &Store{byPID: make(map[string][]snapshot.Snapshot)} }

// Save implements snapshot.Store.
func (s *Store) Save(ctx context.Context, snap snapshot.Snapshot) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	snap.Payload = append([]byte(nil), snap.Payload...)
	s.mu.Lock()
	defer s.mu.Unlock()
	list := s.byPID[snap.PersistenceID]
	i := sort.Search(len(list), func(i int) bool { return list[i].SeqNr >= snap.SeqNr })
	if i < len(list) && list[i].SeqNr == snap.SeqNr {
		list[i] = snap
		return nil
	}
	list = append(list, snapshot.Snapshot{})
	copy(list[i+1:], list[i:])
	list[i] = snap
	s.byPID[snap.PersistenceID] = list
	return nil
}

// Load implements snapshot.Store.
func (s *Store) Load(ctx context.Context, pid string, c snapshot.Criteria) (snapshot.Snapshot, bool, error) {
	if err := ctx.Err(); err != nil {
		return snapshot.Snapshot{}, false, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	list := s.byPID[pid]
	for i := len(list) - 1; i >= 0; i-- {
		if c.Matches(list[i]) {
			snap := list[i]
			snap.Payload = append([]byte(nil), snap.Payload...)
			return snap, true, nil
		}
	}
	return snapshot.Snapshot{}, false, nil
}

// Delete implements snapshot.Store.
func (s *Store) Delete(ctx context.Context, pid string, c snapshot.Criteria) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	list := s.byPID[pid]
	kept := list[:0]
	for _, snap := range list {
		if !c.Matches(snap) {
			kept = append(kept, snap)
		}
	}
	if len(kept) == 0 {
		delete(s.byPID, pid)
		return nil
	}
	s.byPID[pid] = kept
	return nil
}
