// Package snapshot defines the snapshot store: serialized entity state at a
// sequence number, so recovery can start there instead of at event 1.
//
// Implementations live in subpackages (memory, postgres); snapshottest holds
// the conformance suite every implementation passes.
package snapshot

import (
	"context"
	"math"
	"time"
)

// Snapshot is one stored state.
type Snapshot struct {
	PersistenceID string
	SeqNr         uint64
	Timestamp     time.Time
	Manifest      string
	Payload       []byte
}

// Criteria selects snapshots of one persistence id by sequence number and
// timestamp, both ranges inclusive. A zero MaxTimestamp means no upper bound.
type Criteria struct {
	MinSeqNr, MaxSeqNr         uint64
	MinTimestamp, MaxTimestamp time.Time
}

// Latest selects every snapshot; used with Load it yields the newest.
func Latest() Criteria { return Criteria{MaxSeqNr: math.MaxUint64} }

// UpTo selects snapshots with SeqNr <= seqNr.
func UpTo(seqNr uint64) Criteria { return Criteria{MaxSeqNr: seqNr} }

// Matches reports whether s satisfies c.
func (c Criteria) Matches(s Snapshot) bool {
	if s.SeqNr < c.MinSeqNr || s.SeqNr > c.MaxSeqNr {
		return false
	}
	if s.Timestamp.Before(c.MinTimestamp) {
		return false
	}
	return c.MaxTimestamp.IsZero() || !s.Timestamp.After(c.MaxTimestamp)
}

// Store keeps snapshots. Implementations are safe for concurrent use.
type Store interface {
	// Save stores s, replacing any snapshot of the same (pid, seq nr).
	Save(ctx context.Context, s Snapshot) error
	// Load returns the newest snapshot of pid matching c; ok is false when none does.
	Load(ctx context.Context, pid string, c Criteria) (s Snapshot, ok bool, err error)
	// Delete removes every snapshot of pid matching c.
	Delete(ctx context.Context, pid string, c Criteria) error
}
