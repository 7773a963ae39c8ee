package runtime

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/shoal-dev/shoal/journal"
)

// The failure classes below are raised by packages above this one
// (eventsourced, sharding), which re-export them under their own names.
// They are defined here because an ask fails with the same sentinel on
// every node (docs/DESIGN.md, Delivery): a node that fails an ask of
// another node sends a FailureCode, and the asking node, which may not
// know the package that raised it, maps the code back to the sentinel.
var (
	// ErrPersistFailed is eventsourced.ErrPersistFailed: a write failed
	// (the journal was unreachable, timed out, ...).
	ErrPersistFailed = errors.New("eventsourced: persist failed")
	// ErrPersistRejected is eventsourced.ErrPersistRejected: events that
	// could not be encoded, or that the journal refused.
	ErrPersistRejected = errors.New("eventsourced: persist rejected")
	// ErrUnavailable is sharding.ErrEntityUnavailable: the entity failed
	// and its shard is backing off before restarting it, or it could not
	// recover (its journal unreachable) and the asks waiting in its
	// mailbox fail with it.
	ErrUnavailable = errors.New("sharding: entity unavailable")
	// ErrBufferFull is sharding.ErrBufferFull: a region or shard buffer
	// that holds messages for later is full.
	ErrBufferFull = errors.New("sharding: region buffer full")
	// ErrRegionStopped is sharding.ErrRegionStopped: the region shut down.
	ErrRegionStopped = errors.New("sharding: region stopped")
)

// UnavailableError is ErrUnavailable with its details, re-exported as
// sharding.UnavailableError: the entity failed and its shard backs off
// before restarting it. It is defined here so that an ask of another node
// fails with one too (see AskFailedError).
type UnavailableError struct {
	Type, EntityID string
	// RetryAfter is the rest of the restart back-off; an answer may come
	// after it (the back-off grows while the entity keeps failing).
	RetryAfter time.Duration
	// Cause is the error the entity stopped with. Nil in the one an ask
	// of another node fails with: the cause's classes are the
	// AskFailedError's, its text in its Message.
	Cause error
}

func (e *UnavailableError) Error() string {
	msg := fmt.Sprintf("sharding: entity %s of type %s unavailable, restarting in %v", e.EntityID, e.Type, e.RetryAfter)
	if e.Cause == nil {
		return msg
	}
	return msg + ": " + e.Cause.Error()
}

// Is matches ErrUnavailable.
func (e *UnavailableError) Is(target error) bool { return target == ErrUnavailable }

// Unwrap returns the cause.
func (e *UnavailableError) Unwrap() error { return e.Cause }

// ErrAskFailed matches the error of every ask that another node failed
// (an *AskFailedError), whatever its code: also one of a code this node
// does not know, from a newer version.
var ErrAskFailed = errors.New("entity: ask failed on the target's node")

// FailureCode says on the wire why a node failed another node's ask: which
// failure sentinel its error matched. The numbers are stable; a code is
// never reused for another meaning.
type FailureCode uint16

// The failure codes. FailureOther is an error that matches none of the
// others; it, and a code the asking node does not know, fail the ask with
// ErrAskFailed alone.
const (
	FailureOther           FailureCode = 0
	FailureUnhandled       FailureCode = 1  // ErrUnhandled
	FailureStopped         FailureCode = 2  // ErrStopped
	FailureCrashed         FailureCode = 3  // ErrStopped and a *PanicError
	FailureMailboxFull     FailureCode = 4  // ErrMailboxFull
	FailureUnavailable     FailureCode = 5  // ErrUnavailable
	FailurePersistFailed   FailureCode = 6  // ErrPersistFailed
	FailurePersistRejected FailureCode = 7  // ErrPersistRejected
	FailureWriteConflict   FailureCode = 8  // journal.ErrWriteConflict
	FailureBufferFull      FailureCode = 9  // ErrBufferFull
	FailureRegionStopped   FailureCode = 10 // ErrRegionStopped
)

// failureClasses maps codes to sentinels, the most telling first: the
// first an error matches is its Code, the others its Also. A refusal
// comes before its cause (unavailable, because a write failed), a
// failed write before the stop it caused.
var failureClasses = [...]struct {
	code FailureCode
	err  error
}{
	{FailureUnhandled, ErrUnhandled},
	{FailureUnavailable, ErrUnavailable},
	{FailureMailboxFull, ErrMailboxFull},
	{FailureBufferFull, ErrBufferFull},
	{FailureRegionStopped, ErrRegionStopped},
	{FailurePersistFailed, ErrPersistFailed},
	{FailurePersistRejected, ErrPersistRejected},
	{FailureWriteConflict, journal.ErrWriteConflict},
	{FailureStopped, ErrStopped},
}

// sentinel is the error code stands for; nil for FailureOther, FailureCrashed
// and codes this node does not know.
func (c FailureCode) sentinel() error {
	for _, k := range failureClasses {
		if k.code == c {
			return k.err
		}
	}
	return nil
}

// AskFailedError fails an ask that the node of its target failed: it will
// never be answered. It matches ErrAskFailed and the sentinel of every code
// it carries (ErrUnhandled for FailureUnhandled, ...): the same sentinels
// as the error of an ask that fails on its own node. For FailureCrashed it
// matches ErrStopped and holds a *PanicError whose Value is Message. For
// an entity backing off it holds the *UnavailableError the failing node
// raised (Unavailable), so errors.As finds its RetryAfter as on that node.
type AskFailedError struct {
	// Code is the failure's main class, Also the other classes its error
	// matched there (a stop's cause, say).
	Code FailureCode
	Also []FailureCode
	// Message is the error's text on the failing node.
	Message string
	// Unavailable is the failing node's *UnavailableError, without its
	// Cause; nil when the error held none, or the node predates it.
	Unavailable *UnavailableError
}

func (e *AskFailedError) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("%v (code %d)", ErrAskFailed, e.Code)
	}
	return e.Message
}

// Unwrap returns ErrAskFailed and the errors of the codes.
func (e *AskFailedError) Unwrap() []error {
	errs := []error{ErrAskFailed}
	for _, c := range append([]FailureCode{e.Code}, e.Also...) {
		if c == FailureCrashed {
			errs = append(errs, ErrStopped, &PanicError{Value: e.Message})
		} else if s := c.sentinel(); s != nil {
			errs = append(errs, s)
		}
	}
	if e.Unavailable != nil {
		errs = append(errs, e.Unavailable)
	}
	return errs
}

// AskFailureManifest is the manifest under which a failure travels on the
// reply route in place of a reply (ReplyRouter, EncodeReply,
// DeliverReply). No codec type may be registered under it.
const AskFailureManifest = "shoal.reply.failed"

// failureReply is what a node sends, on the reply route, to an ask of
// another node it failed; on the wire it is its JSON, under
// AskFailureManifest. It is unexported so that no reply type is one.
// Fields are only ever added, omitted when zero: a node ignores those it
// does not know, and reads those an older node did not send as zero,
// which must mean what that node meant (docs/DESIGN.md, "Versions").
// testdata/failure pins the bytes.
type failureReply struct {
	Code    FailureCode   `json:"code"`
	Also    []FailureCode `json:"also,omitempty"`
	Message string        `json:"msg"`
	// Unavailable details an *UnavailableError: absent, the asking node
	// knows the code alone, as it did before the field.
	Unavailable *unavailableReply `json:"unavailable,omitempty"`
}

// unavailableReply is an *UnavailableError on the wire, without its cause.
type unavailableReply struct {
	Type       string `json:"type"`
	EntityID   string `json:"entity"`
	RetryAfter int64  `json:"retry_after_ns"`
}

// failureOf classifies err for the wire.
func failureOf(err error) failureReply {
	f := failureReply{Message: err.Error()}
	var codes []FailureCode
	var pe *PanicError
	crashed := errors.As(err, &pe)
	if crashed {
		codes = append(codes, FailureCrashed)
	}
	for _, k := range failureClasses {
		if errors.Is(err, k.err) && !(crashed && k.code == FailureStopped) {
			codes = append(codes, k.code)
		}
	}
	if len(codes) > 0 {
		f.Code, f.Also = codes[0], codes[1:]
	}
	if len(f.Also) == 0 {
		f.Also = nil
	}
	if ue, ok := errors.AsType[*UnavailableError](err); ok {
		f.Unavailable = &unavailableReply{Type: ue.Type, EntityID: ue.EntityID, RetryAfter: int64(ue.RetryAfter)}
	}
	return f
}

func (f failureReply) err() *AskFailedError {
	e := &AskFailedError{Code: f.Code, Also: f.Also, Message: f.Message}
	if u := f.Unavailable; u != nil {
		e.Unavailable = &UnavailableError{Type: u.Type, EntityID: u.EntityID, RetryAfter: time.Duration(max(0, u.RetryAfter))}
	}
	return e
}

func encodeFailure(f failureReply) []byte {
	b, err := json.Marshal(f)
	if err != nil { // a struct of numbers and a string always encodes
		panic(fmt.Sprintf("entity: encode failure reply: %v", err))
	}
	return b
}

// decodeFailure reads a failure reply. Fields it does not know (a newer
// node's) are ignored, and so is a code it does not know: the ask fails
// with ErrAskFailed and the message.
func decodeFailure(payload []byte) (*AskFailedError, error) {
	var f failureReply
	if err := json.Unmarshal(payload, &f); err != nil {
		return nil, fmt.Errorf("failure reply: %w", err)
	}
	return f.err(), nil
}

// failRemote tells the node of the ask a, on the reply route, that it
// failed with f. Like the message that carried a, the failure may be lost
// on the way: the ask then ends at its deadline.
func (s *System) failRemote(a ReplyAddress, f failureReply) {
	err := ErrNoRemoteReplies
	if router := s.router.Load(); router != nil {
		err = (*router).RouteReply(a, f)
	}
	if err != nil {
		s.log.Debug("ask failure not sent", "to", a.String(), "code", f.Code, "err", err)
	}
}
