package clustertest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// activationPrefix starts each line of a node's activation log (payment
// -activation-log; ActivationPrefix there).
const activationPrefix = "ACTIVATION "

// Activation is one line of a node's activation log.
type Activation struct {
	Kind   string    `json:"kind"` // activated, stopped or write-conflict
	Type   string    `json:"type"`
	Entity string    `json:"entity"`
	Node   string    `json:"node"`
	Inc    uint64    `json:"inc"`
	At     time.Time `json:"at"`
	SeqNr  uint64    `json:"seq"`
	Err    string    `json:"err"`
}

// Incarnation names one run of a node.
type Incarnation struct {
	Node string
	Inc  uint64
}

func (i Incarnation) String() string { return fmt.Sprintf("%s#%d", i.Node, i.Inc) }

// ParseActivations reads the activation lines of a node's output; other
// lines are skipped. A prefixed line that does not parse is an error.
func ParseActivations(r io.Reader) ([]Activation, error) {
	var out []Activation
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		_, line, ok := strings.Cut(sc.Text(), activationPrefix)
		if !ok {
			continue
		}
		var a Activation
		if err := json.Unmarshal([]byte(line), &a); err != nil {
			return nil, fmt.Errorf("activation log line %q: %w", line, err)
		}
		out = append(out, a)
	}
	return out, sc.Err()
}

// Interval is when one incarnation of an entity was active: from its
// activation to its stop line, or, without one (the node was killed or
// fenced itself), to its node lease's expiry (Open then says so).
type Interval struct {
	Type, Entity string
	On           Incarnation
	From, To     time.Time
	Open         bool
}

func (i Interval) String() string {
	end := "stopped"
	if i.Open {
		end = "lease expiry"
	}
	return fmt.Sprintf("%s/%s on %s %s..%s (%s)", i.Type, i.Entity, i.On,
		i.From.Format("15:04:05.000"), i.To.Format("15:04:05.000"), end)
}

// Overlap is two intervals of one entity that overlap: the entity was
// (or may have been) active on two incarnations at once.
type Overlap struct{ First, Second Interval }

func (o Overlap) String() string { return o.First.String() + " overlaps " + o.Second.String() }

// ActivationReport is what the activation logs of a run show.
type ActivationReport struct {
	Intervals []Interval
	Overlaps  []Overlap
	// Conflicts are the write conflicts the nodes met: each means two
	// incarnations of one entity both wrote.
	Conflicts []Activation
}

// Analyze builds each entity's intervals from acts and finds overlaps.
// leaseExpiry is each node incarnation's final lease expiry (database
// time); an incarnation missing from it never ends, which is the cautious
// reading. A stop line closes the latest open activation of its entity on
// its incarnation.
func Analyze(acts []Activation, leaseExpiry map[Incarnation]time.Time) ActivationReport {
	var rep ActivationReport
	type key struct {
		typ, entity string
		on          Incarnation
	}
	acts = slices.Clone(acts)
	slices.SortStableFunc(acts, func(a, b Activation) int { return a.At.Compare(b.At) })
	open := map[key]int{} // index in rep.Intervals
	forever := time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, a := range acts {
		k := key{a.Type, a.Entity, Incarnation{a.Node, a.Inc}}
		switch a.Kind {
		case "activated":
			to, ok := leaseExpiry[k.on]
			if !ok {
				to = forever
			}
			open[k] = len(rep.Intervals)
			rep.Intervals = append(rep.Intervals, Interval{Type: a.Type, Entity: a.Entity, On: k.on, From: a.At, To: to, Open: true})
		case "stopped":
			if i, ok := open[k]; ok {
				if a.At.Before(rep.Intervals[i].To) {
					rep.Intervals[i].To = a.At
				}
				rep.Intervals[i].Open = false
				delete(open, k)
			}
		case "write-conflict":
			rep.Conflicts = append(rep.Conflicts, a)
		}
	}
	byEntity := map[[2]string][]Interval{}
	for _, iv := range rep.Intervals {
		k := [2]string{iv.Type, iv.Entity}
		byEntity[k] = append(byEntity[k], iv)
	}
	for _, ivs := range byEntity {
		// Sorted by start: each interval must start after every earlier
		// one has ended.
		var latest Interval
		for i, iv := range ivs {
			if i > 0 && iv.From.Before(latest.To) {
				rep.Overlaps = append(rep.Overlaps, Overlap{First: latest, Second: iv})
			}
			if i == 0 || iv.To.After(latest.To) {
				latest = iv
			}
		}
	}
	slices.SortFunc(rep.Overlaps, func(a, b Overlap) int { return a.Second.From.Compare(b.Second.From) })
	return rep
}
