package sharding

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/shoal-dev/shoal/entity"
)

// ErrEntityUnavailable matches the error of Ask when the entity failed (its
// journal is down, say) and its shard is backing off before restarting it:
// an answer cannot come before the restart, so the caller learns it at once
// instead of at its deadline. The error is an *UnavailableError.
var ErrEntityUnavailable = errors.New("sharding: entity unavailable")

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

// Ask is entity.Ask through sharding that fails fast: when the entity is
// backing off after a failure on this node, it returns an error matching
// ErrEntityUnavailable (an *UnavailableError, with the time left before the
// restart) at once, and the message is not kept. A Tell, which expects no
// answer, is held for the restarted entity instead, as before.
//
// Nothing else changes: the entity restarts after its back-off by itself
// when it is remembered, or on the next message otherwise. Where the
// entity's shard lives on another node the ask waits as entity.Ask does.
func Ask[C, R any](ctx context.Context, ref EntityRef[C], build func(entity.ReplyTo[R]) C) (R, error) {
	return entity.Ask(ctx, failFastRef[C]{ref}, build)
}

// failFastRef is an EntityRef whose Tell refuses messages for an entity
// that is backing off.
type failFastRef[C any] struct{ EntityRef[C] }

func (r failFastRef[C]) Tell(msg C) error {
	if r.region == nil {
		return fmt.Errorf("%w: zero EntityRef", ErrUnknownEntityType)
	}
	return r.region.tell(r.id, msg, false, true)
}
