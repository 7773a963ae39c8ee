// Package readmodel is the payment example's read model: per shop, each
// settlement's state, amount and last update, and totals by state. Its
// core is pure — Decode turns a stored payment event into the Change it
// makes, Apply folds one Event into a Settlement — and is shared by the
// two stores that keep the model (Memory, kept by an at-least-once
// projection made idempotent; Postgres, kept by an exactly-once one) and
// by the fault tests, which fold the journal themselves and compare.
//
// The package reads the example's events by manifest and JSON field name
// instead of importing their types (they live in package main); the
// example's tests pin that both agree.
package readmodel

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/shoal-dev/shoal/journal"
)

// EntityType is the payment entity type: what precedes the "|" of its
// persistence ids.
const EntityType = "ec-house-money"

// ProjectionName is the name of the projection that keeps the read model;
// its Instances instances each cover one range of
// journal.SplitSlices(Instances), on every kind of node, so that single
// nodes and clusters on one database share offsets.
const (
	ProjectionName = "payment-settlements"
	Instances      = 4
)

// State is a settlement's state as the read model shows it.
type State string

// The states. A settlement is settling from its first request, settled
// once the issuer authorized it (and again after a cancel that failed),
// canceling while a reversal runs, canceled or failed for good.
const (
	Settling  State = "settling"
	Settled   State = "settled"
	Canceling State = "canceling"
	Canceled  State = "canceled"
	Failed    State = "failed"
)

// States lists every state, in the order totals are kept.
var States = []State{Settling, Settled, Canceling, Canceled, Failed}

// Change is what one payment event does to its settlement.
type Change struct {
	To State
	// Amount is set by the first event (the accepted settlement request);
	// 0 leaves the amount as it is.
	Amount int64
}

// changes maps each event manifest of the payment entity to the state it
// leads to (the entity's onEvent).
var changes = map[string]State{
	"payment.SettlementAccepted":         Settling,
	"payment.SettlementSuccessConfirmed": Settled,
	"payment.SettlementFailureConfirmed": Failed,
	"payment.SettlementAborted":          Failed,
	"payment.SettlementTimeoutDetected":  Failed,
	"payment.CancelAccepted":             Canceling,
	"payment.CancelSuccessConfirmed":     Canceled,
	"payment.CancelFailureConfirmed":     Settled, // back to Completed
	"payment.CancelAborted":              Settled,
	"payment.CancelTimeoutDetected":      Settled,
}

// Manifests lists the event manifests Decode knows, sorted.
func Manifests() []string {
	out := make([]string, 0, len(changes))
	for m := range changes {
		out = append(out, m)
	}
	slices.Sort(out)
	return out
}

// ErrUnknownEvent means a manifest that is not a payment event.
var ErrUnknownEvent = errors.New("readmodel: not a payment event")

// Decode reads a stored payment event (its manifest and JSON payload) as
// the Change it makes: the projection's decoder (it has the signature of
// projection.Config.Decode) and the fault tests' alike.
func Decode(manifest string, payload []byte) ([]any, error) {
	to, ok := changes[manifest]
	if !ok {
		return nil, fmt.Errorf("%w: manifest %q", ErrUnknownEvent, manifest)
	}
	c := Change{To: to}
	if manifest == "payment.SettlementAccepted" {
		var e struct{ Request struct{ Amount int64 } }
		if err := json.Unmarshal(payload, &e); err != nil {
			return nil, fmt.Errorf("readmodel: %s: %w", manifest, err)
		}
		if e.Request.Amount <= 0 {
			return nil, fmt.Errorf("readmodel: %s: amount %d is not positive", manifest, e.Request.Amount)
		}
		c.Amount = e.Request.Amount
	}
	return []any{c}, nil
}

// ShopKey names a shop of one client in one tenant: the part of a payment's
// key the read model groups by.
type ShopKey struct {
	Tenant   string
	ClientID int64
	Shop     string
}

// Key names one settlement: its shop and its order id.
type Key struct {
	ShopKey
	OrderID string
}

// ErrNotAPayment means a persistence id that is not a payment's.
var ErrNotAPayment = errors.New("readmodel: not a payment persistence id")

// ParsePersistenceID reads a payment's key from its persistence id,
// "ec-house-money|tenant:client:shop:order" with each part query-escaped
// (the example's OrderKey.EntityID).
func ParsePersistenceID(pid string) (Key, error) {
	typ, id, ok := strings.Cut(pid, "|")
	if !ok || typ != EntityType {
		return Key{}, fmt.Errorf("%w: %q", ErrNotAPayment, pid)
	}
	parts := strings.Split(id, ":")
	if len(parts) != 4 {
		return Key{}, fmt.Errorf("%w: %q: want 4 parts", ErrNotAPayment, pid)
	}
	var raw [4]string
	for i, p := range parts {
		s, err := url.QueryUnescape(p)
		if err != nil {
			return Key{}, fmt.Errorf("%w: %q: %w", ErrNotAPayment, pid, err)
		}
		raw[i] = s
	}
	client, err := strconv.ParseInt(raw[1], 10, 64)
	if err != nil {
		return Key{}, fmt.Errorf("%w: %q: client id: %w", ErrNotAPayment, pid, err)
	}
	return Key{ShopKey: ShopKey{Tenant: raw[0], ClientID: client, Shop: raw[2]}, OrderID: raw[3]}, nil
}

// NewEvent is the fold's Event of a stored event of persistence id pid.
func NewEvent(pid string, seqNr uint64, timestamp time.Time, c Change) (Event, error) {
	key, err := ParsePersistenceID(pid)
	if err != nil {
		return Event{}, err
	}
	return Event{Key: key, Slice: journal.SliceOf(pid), SeqNr: seqNr, Timestamp: timestamp, Change: c}, nil
}

// Event is one stored payment event as the fold takes it.
type Event struct {
	Key Key
	// Slice is the persistence id's (journal.SliceOf): a projection
	// instance keeps the settlements of its slices, and clears only those
	// for a rebuild.
	Slice int
	SeqNr uint64
	// Timestamp is when the event was written (the journal's timestamp).
	Timestamp time.Time
	Change    Change
}

// Settlement is one payment as the read model holds it. The zero value
// (SeqNr 0) is a payment the model has no event of.
type Settlement struct {
	Key       Key
	Slice     int
	State     State
	Amount    int64
	UpdatedAt time.Time
	// SeqNr is the last event applied.
	SeqNr uint64
}

// ErrDuplicate means an event at or below the settlement's last applied
// seq nr: handled already. ErrGap means an event past the next one: an
// event was missed. Neither happens under exactly-once delivery.
var (
	ErrDuplicate = errors.New("readmodel: event applied already")
	ErrGap       = errors.New("readmodel: event out of sequence")
)

// Apply folds e into s, the settlement of e's key: the state e leads to,
// its amount if it sets one, its timestamp, its seq nr. An event handled
// already is ErrDuplicate (s is returned unchanged), one that skips an
// event ErrGap.
func Apply(s Settlement, e Event) (Settlement, error) {
	switch {
	case e.SeqNr <= s.SeqNr:
		return s, fmt.Errorf("%w: %s seq %d, applied through %d", ErrDuplicate, e.Key, e.SeqNr, s.SeqNr)
	case e.SeqNr != s.SeqNr+1:
		return s, fmt.Errorf("%w: %s seq %d after %d", ErrGap, e.Key, e.SeqNr, s.SeqNr)
	}
	s.Key, s.Slice, s.State, s.UpdatedAt, s.SeqNr = e.Key, e.Slice, e.Change.To, e.Timestamp, e.SeqNr
	if e.Change.Amount != 0 {
		s.Amount = e.Change.Amount
	}
	return s, nil
}

func (k Key) String() string {
	return fmt.Sprintf("%s/%d/%s/%s", k.Tenant, k.ClientID, k.Shop, k.OrderID)
}

// Total is a count of settlements and the sum of their amounts.
type Total struct {
	Count  int64 `json:"count"`
	Amount int64 `json:"amount"`
}

// Totals are a shop's settlements counted by their current state: a
// settled payment that is canceled moves from Settled to Canceled.
type Totals struct {
	Settling  Total `json:"settling"`
	Settled   Total `json:"settled"`
	Canceling Total `json:"canceling"`
	Canceled  Total `json:"canceled"`
	Failed    Total `json:"failed"`
}

// Of returns the total of state st (nil for an unknown state).
func (t *Totals) Of(st State) *Total {
	switch st {
	case Settling:
		return &t.Settling
	case Settled:
		return &t.Settled
	case Canceling:
		return &t.Canceling
	case Canceled:
		return &t.Canceled
	case Failed:
		return &t.Failed
	}
	return nil
}

// Move updates t for a settlement that went from before to after (before
// is the zero Settlement for a new one).
func (t *Totals) Move(before, after Settlement) {
	if tot := t.Of(before.State); tot != nil {
		tot.Count--
		tot.Amount -= before.Amount
	}
	if tot := t.Of(after.State); tot != nil {
		tot.Count++
		tot.Amount += after.Amount
	}
}

// Shop is what the read model answers for one shop: its settlements by
// order id, and its totals.
type Shop struct {
	Settlements []Settlement
	Totals      Totals
}

// Fold is the read model computed from scratch: events in any order across
// keys but in seq nr order per key. The fault tests compare it with what
// a projection kept.
func Fold(events []Event) (map[Key]Settlement, error) {
	out := make(map[Key]Settlement)
	for _, e := range events {
		s, err := Apply(out[e.Key], e)
		if err != nil {
			return nil, err
		}
		out[e.Key] = s
	}
	return out, nil
}

// TotalsOf sums settlements by shop.
func TotalsOf(settlements map[Key]Settlement) map[ShopKey]Totals {
	out := make(map[ShopKey]Totals)
	for _, s := range settlements {
		t := out[s.Key.ShopKey]
		t.Move(Settlement{}, s)
		out[s.Key.ShopKey] = t
	}
	return out
}

// sortByOrder orders a shop's settlements by order id.
func sortByOrder(s []Settlement) {
	slices.SortFunc(s, func(a, b Settlement) int { return strings.Compare(a.Key.OrderID, b.Key.OrderID) })
}
