package projection

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/shoal-dev/shoal/journal"
)

// Instance names one running unit of a projection: the projection's name
// and the slice range it covers. Two instances of one name must cover
// disjoint ranges (SplitSlices makes such ranges).
type Instance struct {
	Name   string
	Slices journal.SliceRange
}

// Key is the instance's stored key, "name/min-max".
func (i Instance) Key() string {
	return fmt.Sprintf("%s/%d-%d", i.Name, i.Slices.Min, i.Slices.Max)
}

func (i Instance) String() string { return i.Key() }

// Validate checks the name and the range.
func (i Instance) Validate() error {
	if i.Name == "" {
		return fmt.Errorf("%w: empty projection name", ErrInvalidConfig)
	}
	if err := i.Slices.Validate(); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrInvalidConfig, i.Name, err)
	}
	return nil
}

// Fence is an instance taken by one holder: every write it makes names the
// epoch its Acquire got, and fails with ErrFenced once a later Acquire
// moved the epoch on.
type Fence struct {
	Instance Instance
	Epoch    int64
}

// Claim is what Acquire hands the new holder: the fence and the stored
// state to resume from.
type Claim struct {
	Fence  Fence
	Offset journal.Offset
	Paused bool
}

// DeadLetter is a stored event a projection set aside under the
// dead-letter policy, with the error that made it.
type DeadLetter struct {
	PersistenceID string
	SeqNr         uint64
	Manifest      string
	Payload       []byte
	Error         string
	// Offset is the position after the event.
	Offset journal.Offset
	// At is when it was stored (the store's clock); ignored on Save.
	At time.Time
}

// Store keeps each instance's offset, its paused flag and the lease that
// fences them; the memory store (NewMemoryStore) and projection/postgres's
// pass one suite (projectiontest.RunStore). Implementations are safe for
// concurrent use.
type Store interface {
	// Acquire takes inst for holder: it increments the instance's epoch
	// and leases it for ttl, returning the stored offset (the start for a
	// new instance) and paused flag. While another holder's lease has not
	// expired it fails with ErrInstanceHeld; the same holder may take it
	// again (a restart of the same runner).
	Acquire(ctx context.Context, inst Instance, holder string, ttl time.Duration) (Claim, error)
	// Renew extends f's lease by ttl from now.
	Renew(ctx context.Context, f Fence, ttl time.Duration) error
	// Release ends f's lease now, so another holder need not wait for it
	// to expire; the offset stays.
	Release(ctx context.Context, f Fence) error
	// Save stores offset for f and, in the same transaction, dead letters;
	// a dead letter of an event the instance holds one of already
	// (persistence id and seq nr) replaces it.
	Save(ctx context.Context, f Fence, offset journal.Offset, deadLetters []DeadLetter) error
	// SetPaused stores f's paused flag.
	SetPaused(ctx context.Context, f Fence, paused bool) error
	// Offset reads inst's stored offset without taking it; ok is false for
	// an instance never acquired.
	Offset(ctx context.Context, inst Instance) (offset journal.Offset, ok bool, err error)
	// DeadLetters lists inst's dead letters in the order they were stored.
	DeadLetters(ctx context.Context, inst Instance) ([]DeadLetter, error)
}

// Every write but Acquire fails with ErrFenced once the fence is stale.

var (
	// ErrFenced means another holder acquired the instance since: the
	// write was refused and the holder must stop.
	ErrFenced = errors.New("projection: fenced: another holder acquired the instance")
	// ErrInstanceHeld means Acquire found the instance leased to another
	// holder whose lease has not expired: it runs elsewhere.
	ErrInstanceHeld = errors.New("projection: instance held by another holder")
	// ErrInvalidConfig means a Config, Settings or Instance is unusable.
	ErrInvalidConfig = errors.New("projection: invalid configuration")
	// ErrNotRunning means an operation needs Run to be active.
	ErrNotRunning = errors.New("projection: not running")
	// ErrAlreadyRunning means Run was called while a Run of the same
	// Projection is active.
	ErrAlreadyRunning = errors.New("projection: already running")
)

// ValidateTTL checks a lease length for a Store.
func ValidateTTL(ttl time.Duration) error {
	if ttl <= 0 {
		return fmt.Errorf("%w: lease ttl %v must be positive", ErrInvalidConfig, ttl)
	}
	return nil
}
