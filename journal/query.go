package journal

import (
	"context"
	"crypto/md5"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// This file is the read side's seam: what a journal answers besides replaying
// one persistence id. See docs/DESIGN.md, "The read side".

// NumberOfSlices is how many slices persistence ids hash into. A projection
// splits its work by slice ranges, [0, NumberOfSlices) in N even parts.
const NumberOfSlices = 1024

// SliceOf returns pid's slice: the first two bytes of the MD5 digest of its
// UTF-8 bytes, read big-endian, mod NumberOfSlices. MD5 is chosen because
// PostgreSQL computes it natively, so the migration that backfills old rows
// uses the same function (('x' || substr(md5(pid), 1, 4))::bit(16)::int % 1024);
// it is no security measure. The value is stored with every event and must
// never change: fixed vectors in the tests pin it.
func SliceOf(pid string) int {
	sum := md5.Sum([]byte(pid))
	return (int(sum[0])<<8 | int(sum[1])) % NumberOfSlices
}

// EntityTypeSeparator joins an entity type and an entity id into a
// persistence id ("Type|id").
const EntityTypeSeparator = "|"

// EntityTypeOf returns the entity type of a persistence id of the form
// "Type|id", or "" for an id without the separator.
func EntityTypeOf(pid string) string {
	t, _, ok := strings.Cut(pid, EntityTypeSeparator)
	if !ok {
		return ""
	}
	return t
}

// SliceRange is the inclusive range [Min, Max] of slices.
type SliceRange struct{ Min, Max int }

// AllSlices is every slice.
var AllSlices = SliceRange{0, NumberOfSlices - 1}

// Validate checks 0 <= Min <= Max < NumberOfSlices.
func (r SliceRange) Validate() error {
	if r.Min < 0 || r.Max >= NumberOfSlices || r.Min > r.Max {
		return fmt.Errorf("%w: slice range [%d, %d] outside [0, %d]", ErrInvalidQuery, r.Min, r.Max, NumberOfSlices-1)
	}
	return nil
}

// Contains reports whether slice s is in the range.
func (r SliceRange) Contains(s int) bool { return r.Min <= s && s <= r.Max }

// SplitSlices divides all slices into n contiguous ranges of (nearly) equal
// size, in order. n must be in [1, NumberOfSlices].
func SplitSlices(n int) ([]SliceRange, error) {
	if n < 1 || n > NumberOfSlices {
		return nil, fmt.Errorf("%w: cannot split %d slices into %d ranges", ErrInvalidQuery, NumberOfSlices, n)
	}
	out := make([]SliceRange, n)
	for i := range n {
		out[i] = SliceRange{Min: i * NumberOfSlices / n, Max: (i+1)*NumberOfSlices/n - 1}
	}
	return out, nil
}

// Offset is a position in a query's stream, after the event it was taken
// from. Its contents belong to the journal that made it: compare offsets
// only through that journal. The zero Offset is the start of every stream.
// An offset survives a restart as its text form (MarshalText); a journal
// given an offset of another kind fails with ErrOffsetMismatch.
type Offset struct {
	// Kind names the journal implementation that made it ("memory",
	// "postgres"); empty for the start.
	Kind string
	// Tx and Pos order events within that journal: the Postgres journal
	// stores the writing transaction's id and the row's ordering, the
	// memory journal 0 and its ordering.
	Tx  uint64
	Pos int64
}

// IsStart reports whether o is the start of the stream.
func (o Offset) IsStart() bool { return o == Offset{} }

// Less orders offsets of one kind: by Tx, then Pos.
func (o Offset) Less(p Offset) bool {
	if o.Tx != p.Tx {
		return o.Tx < p.Tx
	}
	return o.Pos < p.Pos
}

// String is the text form: "start", or "kind:tx:pos".
func (o Offset) String() string {
	if o.IsStart() {
		return "start"
	}
	return o.Kind + ":" + strconv.FormatUint(o.Tx, 10) + ":" + strconv.FormatInt(o.Pos, 10)
}

// MarshalText implements encoding.TextMarshaler with String's form.
func (o Offset) MarshalText() ([]byte, error) { return []byte(o.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler; see ParseOffset.
func (o *Offset) UnmarshalText(b []byte) error {
	p, err := ParseOffset(string(b))
	if err != nil {
		return err
	}
	*o = p
	return nil
}

// ParseOffset reads an offset's text form. Malformed text fails with
// ErrOffsetMismatch.
func ParseOffset(s string) (Offset, error) {
	if s == "start" || s == "" {
		return Offset{}, nil
	}
	parts := strings.Split(s, ":")
	if len(parts) != 3 || parts[0] == "" {
		return Offset{}, fmt.Errorf("%w: malformed offset %q", ErrOffsetMismatch, s)
	}
	tx, err1 := strconv.ParseUint(parts[1], 10, 64)
	pos, err2 := strconv.ParseInt(parts[2], 10, 64)
	if err1 != nil || err2 != nil {
		return Offset{}, fmt.Errorf("%w: malformed offset %q", ErrOffsetMismatch, s)
	}
	return Offset{Kind: parts[0], Tx: tx, Pos: pos}, nil
}

// ErrOffsetMismatch means an offset was made by another kind of journal, or
// its text is malformed.
var ErrOffsetMismatch = errors.New("journal: offset of another kind")

// ErrInvalidQuery means a query's arguments are out of range.
var ErrInvalidQuery = errors.New("journal: invalid query")

// Mode says whether a query ends at the present or follows new events.
type Mode int

const (
	// Current delivers what is visible when the query starts (and
	// possibly some events committed while it runs), then returns nil.
	// An event committed but not yet visible (on Postgres: behind a
	// transaction still open) is left to a later query.
	Current Mode = iota
	// Live delivers what is stored, then follows new events until its
	// context ends; it then returns the context's error.
	Live
)

// QueriedEvent is an event with its entity type, slice and offset, as the
// queries deliver it.
type QueriedEvent struct {
	Event
	EntityType string
	Slice      int
	// Offset is the position just after this event: a query resumed from it
	// delivers the next event.
	Offset Offset
}

// Queries is the read side of a journal, answered by the memory and
// Postgres journals alike (one conformance suite, journaltest.RunQueries).
//
// Every query delivers events in offset order, each once, and never skips
// one: an event becomes visible to a query only once no event that sorts
// before it can still appear. Events of one persistence id arrive in seq nr
// order. An error from fn stops the query and is returned.
type Queries interface {
	// EventsBySlices delivers the events of entityType whose slice is in
	// r, after offset after.
	EventsBySlices(ctx context.Context, entityType string, r SliceRange, after Offset, mode Mode, fn func(QueriedEvent) error) error
	// EventsByTag delivers the events carrying tag, after offset after.
	EventsByTag(ctx context.Context, tag string, after Offset, mode Mode, fn func(QueriedEvent) error) error
	// CurrentPersistenceIDs lists up to limit persistence ids of entityType
	// that hold events, in ascending byte order, starting after afterID ("" for
	// the first page). A limit below 1 fails with ErrInvalidQuery.
	CurrentPersistenceIDs(ctx context.Context, entityType string, afterID string, limit int) ([]string, error)
}

// EventCounter is an optional extension of Queries, implemented by the
// memory and Postgres journals: how far a reader at an offset is behind, in
// events (a projection's lag).
type EventCounter interface {
	// CountEventsBySlices counts the stored events of entityType in r
	// after offset after, including ones a query does not hand out yet.
	CountEventsBySlices(ctx context.Context, entityType string, r SliceRange, after Offset) (int64, error)
}
