package sharding

import "github.com/shoal-dev/shoal/internal/runtime"

// ErrEntityUnavailable matches the error of entity.Ask (and AskFrom) through
// an EntityRef when the entity failed (its journal is down, say) and its
// shard is backing off before restarting it: an answer cannot come before
// the restart, so the caller learns it at once instead of at its deadline.
// The error is an *UnavailableError. ErrEntityUnavailable is
// runtime.ErrUnavailable, so that an ask failed by it on another node
// matches it too.
var ErrEntityUnavailable = runtime.ErrUnavailable

// UnavailableError is ErrEntityUnavailable with its details: the failure
// that stopped the entity (Cause) and when its shard restarts it
// (RetryAfter, the rest of the restart back-off; an answer may come after
// it, the back-off growing while the entity keeps failing). An ask from
// another node gets one too, inside its *entity.AskFailedError, with the
// same RetryAfter and no Cause (the cause's sentinels match the
// AskFailedError).
type UnavailableError = runtime.UnavailableError
