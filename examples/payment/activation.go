package main

import (
	"encoding/json"
	"errors"
	"io"
	"sync"
	"time"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/eventsourced"
	"github.com/shoal-dev/shoal/journal"
)

// ActivationLog records, one JSON line each, when an entity incarnation
// became active on this node (its recovery completed), when it stopped,
// and when its write met another incarnation's event (a write conflict).
// With -activation-log the lines go to stdout, prefixed ActivationPrefix,
// so that a test outside the process can read them from the container's
// output and check that no entity was ever active on two nodes at once:
// an incarnation is active from Activated until its Stopped line or its
// node's lease expiry, whichever comes first (a killed node writes no
// Stopped line), and two such intervals of one entity on two node
// incarnations must not overlap.
//
// A nil *ActivationLog records nothing.
type ActivationLog struct {
	node cluster.UniqueAddress
	now  func() time.Time

	mu  sync.Mutex
	out io.Writer
	enc *json.Encoder
}

// ActivationPrefix starts every line of the log.
const ActivationPrefix = "ACTIVATION "

// Activation kinds.
const (
	Activated     = "activated"
	Deactivated   = "stopped"
	WriteConflict = "write-conflict"
)

// Activation is one line of the log.
type Activation struct {
	Kind   string    `json:"kind"`
	Type   string    `json:"type"`
	Entity string    `json:"entity"`
	Node   string    `json:"node"`
	Inc    uint64    `json:"inc"`
	At     time.Time `json:"at"`
	// SeqNr is the recovered sequence number (activated) or the one the
	// conflicting write wanted (write-conflict).
	SeqNr uint64 `json:"seq,omitempty"`
	// Err is why the incarnation stopped, when not normally.
	Err string `json:"err,omitempty"`
}

// NewActivationLog returns a log of node's activations written to out.
func NewActivationLog(node cluster.UniqueAddress, out io.Writer) *ActivationLog {
	return &ActivationLog{node: node, now: time.Now, out: out, enc: json.NewEncoder(out)}
}

// Observe records what sig says of entity id of type typ, if anything.
func (l *ActivationLog) Observe(typ, id string, sig eventsourced.Signal) {
	if l == nil {
		return
	}
	a := Activation{Type: typ, Entity: id, Node: l.node.Node, Inc: l.node.Incarnation}
	switch s := sig.(type) {
	case eventsourced.RecoveryCompleted:
		a.Kind, a.SeqNr = Activated, s.SeqNr
	case eventsourced.PersistFailed:
		var conflict *journal.WriteConflictError
		if !errors.As(s.Err, &conflict) {
			return
		}
		a.Kind, a.SeqNr = WriteConflict, conflict.SeqNr
	case eventsourced.Stopped:
		a.Kind = Deactivated
		if s.Err != nil {
			a.Err = s.Err.Error()
		}
	default:
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	a.At = l.now()
	_, _ = io.WriteString(l.out, ActivationPrefix)
	_ = l.enc.Encode(a)
}
