package sharding

import (
	"fmt"
	"time"

	"github.com/shoal-dev/shoal/internal/runtime"
)

// ErrEntityUnavailable matches the error of entity.Ask (and AskFrom) through
// an EntityRef when the entity failed (its journal is down, say) and its
// shard is backing off before restarting it: an answer cannot come before
// the restart, so the caller learns it at once instead of at its deadline.
// The error is an *UnavailableError. ErrEntityUnavailable is
// runtime.ErrUnavailable, so that an ask failed by it on another node
// matches it too.
var ErrEntityUnavailable = runtime.ErrUnavailable

// UnavailableError is ErrEntityUnavailable with its details: the failure
// that stopped the entity and when its shard restarts it.
type UnavailableError struct {
	Type, EntityID string
	// RetryAfter is the rest of the restart back-off; an answer may come
	// after it (the back-off grows while the entity keeps failing).
	RetryAfter time.Duration
	// Cause is the error the entity stopped with.
	Cause error
}

func (e *UnavailableError) Error() string {
	return fmt.Sprintf("sharding: entity %s of type %s unavailable, restarting in %v: %v", e.EntityID, e.Type, e.RetryAfter, e.Cause)
}

// Is matches ErrEntityUnavailable.
func (e *UnavailableError) Is(target error) bool { return target == ErrEntityUnavailable }

// Unwrap returns the cause.
func (e *UnavailableError) Unwrap() error { return e.Cause }
